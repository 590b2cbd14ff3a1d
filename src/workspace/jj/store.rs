//! The agent's commits read from its jj repository on the host, without jj: for
//! when jj inside cannot say what they are (the agent broke its repository's
//! `store/git_target` or operation log, or the image has no jj). Everything is
//! read with forage's untrusted readers (no symlink followed, every file
//! bounded, every id checked for its form); what is named is then imported with
//! the same verification as always, so a lie can only misplace the agent's own
//! work.
//!
//! Where the commits are, best first:
//! - the visible heads and working-copy commit of the view of each current
//!   operation (`repo/op_heads/heads/<op>`, `repo/op_store/operations/<op>`,
//!   `repo/op_store/views/<view>`: protobuf, of which a few fields are read);
//!   with `op_heads` gone, of the latest operation no other one follows;
//! - else every commit the git store keeps: `refs/jj/keep/*` (jj writes one
//!   for each commit it makes), its branches and a detached HEAD. Older
//!   versions of rewritten changes are among them.

use std::collections::{BTreeSet, HashSet};

use git2::Oid;

use crate::error::{Error, Result};
use crate::workspace::git::refs::{self, Head, PrivateRefs};
use crate::workspace::untrusted::{Dir, Kind};

/// An operation is a few hundred bytes; a view lists every visible head.
const MAX_OPERATION: u64 = 1 << 20;
const MAX_VIEW: u64 = 64 << 20;
/// Concurrent operations jj has not merged yet: a handful at most, in use.
const MAX_OP_HEADS: usize = 64;
/// Operations read to find the latest when `op_heads` is gone: one per jj
/// command the agent ran.
const MAX_OPERATIONS: usize = 100_000;
/// jj's workspace in the private repository.
const WORKSPACE: &[u8] = b"default";

/// The agent's commits as its repository keeps them.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct StoreTips {
    /// Commits the agent's work is reachable from (each verified at import).
    pub tips: Vec<Oid>,
    pub working_copy: Option<Oid>,
    /// The tips include the older versions of rewritten changes (jj keeps
    /// every commit it wrote), not only what the agent's jj shows.
    pub all_versions: bool,
    /// Where they were read from, for messages.
    pub source: &'static str,
}

fn err(e: impl std::fmt::Display) -> Error {
    Error::workspace(format!("reading the agent's jj repository: {e}"))
}

/// The tips of the repository whose `.jj` is `jj` (FORAGE_HOME/private/NAME/jj).
pub fn read(jj: &Dir) -> Result<StoreTips> {
    let repo = jj.dir("repo").map_err(err)?.ok_or_else(|| err("it has no repo directory"))?;
    if let Some(found) = from_operation_log(&repo) {
        return Ok(found);
    }
    from_git_refs(&repo)
}

/// The heads and working copy of the current operations' views; `None` when
/// none can be read.
fn from_operation_log(repo: &Dir) -> Option<StoreTips> {
    let operations = repo.dir_path("op_store/operations").ok()??;
    let views = repo.dir_path("op_store/views").ok()??;
    let current = match op_heads(repo) {
        Some(heads) => heads,
        None => vec![latest_operation(&operations)?],
    };
    let mut tips = BTreeSet::new();
    let mut working_copy = None;
    let mut any = false;
    for op in &current {
        let Some(view) = operation(&operations, op).map(|o| o.view) else { continue };
        let Some(bytes) = views.read(hex(&view), MAX_VIEW).ok().flatten() else { continue };
        let Some(fields) = fields(&bytes) else { continue };
        any = true;
        for (number, value) in fields {
            match (number, value) {
                (1, Field::Bytes(id)) => tips.extend(Oid::from_bytes(id).ok().filter(|_| id.len() == 20)),
                (8, Field::Bytes(entry)) => working_copy = working_copy.or_else(|| workspace_commit(entry)),
                _ => {}
            }
        }
    }
    any.then(|| StoreTips {
        tips: tips.into_iter().collect(),
        working_copy,
        all_versions: false,
        source: "its operation log",
    })
}

/// The operations `op_heads/heads` names (by file name); `None` when there
/// is no such directory or it names none.
fn op_heads(repo: &Dir) -> Option<Vec<String>> {
    let names: Vec<String> =
        hex_names(&repo.dir_path("op_heads/heads").ok()??)?.into_iter().take(MAX_OP_HEADS).collect();
    (!names.is_empty()).then_some(names)
}

/// With `op_heads` gone: of the operations no other names as its parent, the
/// one that ended last (to the millisecond).
fn latest_operation(operations: &Dir) -> Option<String> {
    let names = hex_names(operations)?.into_iter().take(MAX_OPERATIONS);
    let read: Vec<(String, Operation)> = names.filter_map(|n| operation(operations, &n).map(|o| (n, o))).collect();
    let parents: HashSet<String> = read.iter().flat_map(|(_, o)| o.parents.iter().map(|p| hex(p))).collect();
    read.into_iter().filter(|(n, _)| !parents.contains(n)).max_by_key(|(n, o)| (o.ended, n.clone())).map(|(n, _)| n)
}

/// The files of `dir` named as jj names operations.
fn hex_names(dir: &Dir) -> Option<Vec<String>> {
    let entries = dir.entries().ok()?;
    Some(
        entries
            .into_iter()
            .filter(|(_, kind)| *kind == Kind::File)
            .filter_map(|(name, _)| name.into_string().ok().filter(|n| is_hex_id(n)))
            .collect(),
    )
}

/// What forage reads of an operation: its view, its parents, and when it
/// ended (milliseconds since the epoch; 0 if it does not say).
struct Operation {
    view: Vec<u8>,
    parents: Vec<Vec<u8>>,
    ended: u64,
}

/// Operation `name` of the operation store: `view_id` (1), `parents` (2),
/// `metadata` (3) { `end_time` (2) { `millis_since_epoch` (1) } }.
fn operation(operations: &Dir, name: &str) -> Option<Operation> {
    let bytes = operations.read(name, MAX_OPERATION).ok()??;
    let mut op = Operation { view: Vec::new(), parents: Vec::new(), ended: 0 };
    for (number, value) in fields(&bytes)? {
        match (number, value) {
            (1, Field::Bytes(view)) => op.view = view.to_vec(),
            (2, Field::Bytes(parent)) => op.parents.push(parent.to_vec()),
            (3, Field::Bytes(metadata)) => op.ended = end_time(metadata).unwrap_or(0),
            _ => {}
        }
    }
    (!op.view.is_empty()).then_some(op)
}

fn end_time(metadata: &[u8]) -> Option<u64> {
    let end = fields(metadata)?.into_iter().find_map(|(n, v)| match v {
        Field::Bytes(b) if n == 2 => Some(b),
        _ => None,
    })?;
    fields(end)?.into_iter().find_map(|(n, v)| match v {
        Field::Varint(millis) if n == 1 => Some(millis),
        _ => None,
    })
}

/// A `wc_commit_ids` map entry (key 1, value 2): the commit, if it is the
/// workspace's.
fn workspace_commit(entry: &[u8]) -> Option<Oid> {
    let fields = fields(entry)?;
    let key = fields.iter().find_map(|(n, v)| matches!((n, v), (1, Field::Bytes(_))).then_some(v))?;
    let value = fields.iter().find_map(|(n, v)| matches!((n, v), (2, Field::Bytes(_))).then_some(v))?;
    match (key, value) {
        (Field::Bytes(key), Field::Bytes(id)) if *key == WORKSPACE && id.len() == 20 => Oid::from_bytes(id).ok(),
        _ => None,
    }
}

/// Every commit the git store's refs name: jj's keep refs, branches, and a
/// detached HEAD. The host's bookmarks (`refs/remotes/host`) and the base
/// (`refs/tags/forage-base*`) are the host's, not the agent's.
fn from_git_refs(repo: &Dir) -> Result<StoreTips> {
    let git = repo.dir_path("store/git").map_err(err)?.ok_or_else(|| err("it has no git store"))?;
    let all = refs::read_all(&git)?;
    let mut tips: BTreeSet<Oid> = all
        .iter()
        .filter(|(name, _)| ["refs/jj/keep/", "refs/heads/"].iter().any(|p| name.starts_with(p)))
        .map(|(_, id)| *id)
        .collect();
    if let Ok(PrivateRefs { head: Head::Detached(id), .. }) = PrivateRefs::read(&git) {
        tips.insert(id);
    }
    Ok(StoreTips {
        tips: tips.into_iter().collect(),
        working_copy: None,
        all_versions: true,
        source: "the refs of its git store",
    })
}

/// An operation's id as jj names its files: 128 hex digits (64 bytes).
fn is_hex_id(name: &str) -> bool {
    name.len() == 128 && name.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A protobuf field's value, as far as forage reads it.
#[derive(Debug, PartialEq, Eq)]
enum Field<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Fixed,
}

/// The fields of a protobuf message, in order; `None` if it is not well formed.
fn fields(mut data: &[u8]) -> Option<Vec<(u64, Field<'_>)>> {
    let mut out = Vec::new();
    while !data.is_empty() {
        let key = varint(&mut data)?;
        let value = match key & 7 {
            0 => Field::Varint(varint(&mut data)?),
            1 => take(&mut data, 8).map(|_| Field::Fixed)?,
            2 => {
                let len = usize::try_from(varint(&mut data)?).ok()?;
                Field::Bytes(take(&mut data, len)?)
            }
            5 => take(&mut data, 4).map(|_| Field::Fixed)?,
            _ => return None,
        };
        out.push((key >> 3, value));
    }
    Some(out)
}

fn varint(data: &mut &[u8]) -> Option<u64> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let (byte, rest) = data.split_first()?;
        *data = rest;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

fn take<'a>(data: &mut &'a [u8], len: usize) -> Option<&'a [u8]> {
    if data.len() < len {
        return None;
    }
    let (taken, rest) = data.split_at(len);
    *data = rest;
    Some(taken)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes_field(number: u64, value: &[u8]) -> Vec<u8> {
        let mut out = vec![(number << 3 | 2) as u8];
        let mut len = value.len();
        loop {
            let byte = (len & 0x7f) as u8;
            len >>= 7;
            out.push(if len == 0 { byte } else { byte | 0x80 });
            if len == 0 {
                break;
            }
        }
        out.extend_from_slice(value);
        out
    }

    fn hex_bytes(hex: &str) -> Vec<u8> {
        (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap()).collect()
    }

    #[test]
    fn views_are_read_from_the_current_operations_and_garbage_is_skipped() {
        let t = tempfile::tempdir().unwrap();
        let repo = t.path().join("repo");
        for d in ["op_heads/heads", "op_store/operations", "op_store/views", "store/git/refs/jj/keep"] {
            std::fs::create_dir_all(repo.join(d)).unwrap();
        }
        let (a, b, wc) = ([0x11u8; 20], [0x22u8; 20], [0x33u8; 20]);
        let view_id = [0xabu8; 64];
        let mut entry = bytes_field(1, b"default");
        entry.extend(bytes_field(2, &wc));
        let mut view = bytes_field(1, &a);
        view.extend([0x08 << 3, 0x96, 0x01]); // a varint field, skipped
        view.extend(bytes_field(1, &b));
        view.extend(bytes_field(8, &entry));
        view.extend(bytes_field(1, &[1, 2, 3])); // not a commit id
        std::fs::write(repo.join("op_store/views").join(hex(&view_id)), &view).unwrap();
        let op = "cd".repeat(64);
        let mut operation = bytes_field(1, &view_id);
        operation.extend(bytes_field(2, &[0; 64]));
        std::fs::write(repo.join("op_store/operations").join(&op), operation).unwrap();
        std::fs::write(repo.join("op_heads/heads").join(&op), "").unwrap();
        // Not op ids, or pointing nowhere: skipped.
        std::fs::write(repo.join("op_heads/heads/junk"), "").unwrap();
        std::fs::write(repo.join("op_heads/heads").join("ef".repeat(64)), "").unwrap();

        let found = read(&Dir::open(t.path()).unwrap()).unwrap();
        let id = |b: [u8; 20]| Oid::from_bytes(&b).unwrap();
        let expected = StoreTips {
            tips: vec![id(a), id(b)],
            working_copy: Some(id(wc)),
            all_versions: false,
            source: "its operation log",
        };
        assert_eq!(found, expected);

        // With op_heads gone, the operation no other follows that ended last.
        std::fs::remove_dir_all(repo.join("op_heads")).unwrap();
        assert_eq!(read(&Dir::open(t.path()).unwrap()).unwrap(), expected);
        let later_view = [0xeeu8; 64];
        std::fs::write(repo.join("op_store/views").join(hex(&later_view)), bytes_field(1, &b)).unwrap();
        let mut later = bytes_field(1, &later_view);
        later.extend(bytes_field(2, &hex_bytes(&op)));
        later.extend(bytes_field(3, &bytes_field(2, &[0x08, 0x96, 0x01])));
        std::fs::write(repo.join("op_store/operations").join("ef".repeat(64)), later).unwrap();
        assert_eq!(read(&Dir::open(t.path()).unwrap()).unwrap().tips, [id(b)]);
        std::fs::remove_file(repo.join("op_store/operations").join("ef".repeat(64))).unwrap();

        // A view that is not protobuf, or no operation at all: the git store's refs.
        std::fs::write(repo.join("op_store/views").join(hex(&view_id)), [0xff; 3]).unwrap();
        let c = "4".repeat(40);
        std::fs::write(repo.join("store/git/refs/jj/keep").join(&c), format!("{c}\n")).unwrap();
        std::fs::create_dir_all(repo.join("store/git/refs/remotes/host")).unwrap();
        std::fs::write(repo.join("store/git/refs/remotes/host/main"), format!("{}\n", "5".repeat(40))).unwrap();
        std::fs::write(repo.join("store/git/HEAD"), format!("{}\n", "6".repeat(40))).unwrap();
        let found = read(&Dir::open(t.path()).unwrap()).unwrap();
        let tips: Vec<String> = found.tips.iter().map(Oid::to_string).collect();
        assert_eq!(tips, ["4".repeat(40), "6".repeat(40)]);
        assert_eq!((found.working_copy, found.all_versions, found.source), (None, true, "the refs of its git store"));
        std::fs::remove_dir_all(repo.join("store")).unwrap();
        assert!(read(&Dir::open(t.path()).unwrap()).is_err());
    }

    #[test]
    fn malformed_protobuf_is_refused() {
        assert_eq!(fields(&[0x0a, 0x05, 1]), None, "length past the end");
        assert_eq!(fields(&[0x0b]), None, "a group");
        assert_eq!(fields(&[0x08, 0xff]), None, "an unfinished varint");
        assert_eq!(fields(&[0x08, 0x01, 0x12, 0x01, 7]), Some(vec![(1, Field::Varint(1)), (2, Field::Bytes(&[7]))]));
    }
}
