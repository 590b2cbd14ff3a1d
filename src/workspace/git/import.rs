//! Bringing the agent's commits from its private object store into the host
//! repository: the one way anything the agent made reaches the host's git.
//!
//! The private store is the agent's to write, so it is never opened as a
//! repository (that would honour its `alternates`, `commondir`, config). Its
//! loose objects and packs are first *placed* (hard-linked, or copied) into a
//! staging directory forage owns, checking that each is a regular file, and only
//! that directory is read by libgit2. Every object read is then checked against
//! its id, parsed by forage to find what it refers to, checked for tree entries
//! git itself would refuse to check out, and written to the host's object store,
//! children first, so that the host never holds an object whose parts are missing.

use std::collections::HashSet;
use std::ffi::OsStr;
use std::path::Path;

use git2::{ObjectType, Odb, Oid, Repository};

use super::super::untrusted::{remove_created_dir, Dir, Kind};
use crate::error::{Error, Result};

fn err(e: impl std::fmt::Display) -> Error {
    Error::workspace(format!("importing the agent's commits: {e}"))
}

/// The largest object an import reads: each is read whole into memory, and a
/// few kilobytes of compressed zeros can claim gigabytes.
const MAX_OBJECT_BYTES: usize = 256 << 20;
/// The most one import writes into the host's object store.
const MAX_IMPORT_BYTES: usize = 4 << 30;

/// What one import brought over (or, looking only, would bring).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Imported {
    pub objects: usize,
    /// The commits, each with the first line of its message.
    pub commits: Vec<(Oid, String)>,
    /// The jj change id each commit carries (its `change-id` header), if any.
    pub change_ids: Vec<(Oid, String)>,
}

/// The agent's objects, placed where only forage writes: loose objects
/// hard-linked (libgit2 reads them whole, so a later change by the agent is
/// caught by the hash check), packs copied (libgit2 maps them, and a pack the
/// agent truncated under the mapping would crash forage). Removed when dropped.
pub struct Staged {
    odb: Odb<'static>,
    dir: std::path::PathBuf,
    owner: std::path::PathBuf,
}

impl Staged {
    /// Stages `private_objects` (the agent's `objects/`, if it has one) in
    /// `staging`, a path forage owns.
    pub fn new(private_objects: Option<&Dir>, staging: &Path) -> Result<Staged> {
        let owner = staging.parent().ok_or_else(|| err("staging has no parent"))?.to_path_buf();
        remove_created_dir(staging, &owner).map_err(err)?;
        std::fs::create_dir(staging).map_err(err)?;
        let staged = Staged { odb: Odb::new().map_err(err)?, dir: staging.to_path_buf(), owner };
        if let Some(objects) = private_objects {
            if stage(objects, &Dir::open(staging).map_err(err)?)? {
                let path = staging.to_str().ok_or_else(|| err("FORAGE_HOME is not UTF-8"))?;
                staged.odb.add_disk_alternate(path).map_err(err)?;
            }
        }
        Ok(staged)
    }

    /// Imports everything `tips` reach that the host lacks, every object checked.
    pub fn import(&self, host: &Repository, tips: &[Oid]) -> Result<Imported> {
        self.walk(host, tips, true)
    }

    /// What `import` would bring, every object checked the same way, writing
    /// nothing to the host.
    pub fn look(&self, host: &Repository, tips: &[Oid]) -> Result<Imported> {
        self.walk(host, tips, false)
    }

    fn walk(&self, host: &Repository, tips: &[Oid], write: bool) -> Result<Imported> {
        let host_odb = host.odb().map_err(err)?;
        if let Some(missing) = tips.iter().find(|t| !host_odb.exists(**t) && !self.odb.exists(**t)) {
            return Err(err(format!(
                "{missing} is in neither the agent's repository nor the host's; nothing was imported"
            )));
        }
        copy_closure(&self.odb, &host_odb, tips, write)
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if let Err(e) = remove_created_dir(&self.dir, &self.owner) {
            tracing::warn!("removing {}: {e}", self.dir.display());
        }
    }
}

/// Imports everything `tips` reach that the host lacks. `private_objects` is the
/// agent's `objects/` directory; `staging` a path forage owns (removed again).
pub fn import(host: &Repository, private_objects: Option<&Dir>, staging: &Path, tips: &[Oid]) -> Result<Imported> {
    if all_there(host, tips)? {
        return Ok(Imported::default());
    }
    Staged::new(private_objects, staging)?.import(host, tips)
}

/// What `import` would bring, writing nothing to the host.
pub fn look(host: &Repository, private_objects: Option<&Dir>, staging: &Path, tips: &[Oid]) -> Result<Imported> {
    if all_there(host, tips)? {
        return Ok(Imported::default());
    }
    Staged::new(private_objects, staging)?.look(host, tips)
}

/// The host has every tip already (and so everything they reach).
fn all_there(host: &Repository, tips: &[Oid]) -> Result<bool> {
    let odb = host.odb().map_err(err)?;
    Ok(tips.iter().all(|t| odb.exists(*t)))
}

/// Places the private loose objects and packs into `into`; false if there were none.
fn stage(objects: &Dir, into: &Dir) -> Result<bool> {
    let mut any = false;
    for (name, kind) in objects.entries().map_err(err)? {
        let Some(fan) = name.to_str().filter(|n| n.len() == 2 && is_hex(n)) else { continue };
        if kind != Kind::Dir {
            continue;
        }
        let Some(src) = objects.dir(fan).map_err(err)? else { continue };
        let dst = into.make_dir(fan).map_err(err)?;
        for (file, kind) in src.entries().map_err(err)? {
            let ok = file.to_str().is_some_and(|f| f.len() == 38 && is_hex(f));
            if ok && kind == Kind::File {
                any |= src.place_into(&file, &dst, &file).map_err(err)?;
            }
        }
    }
    if let Some(src) = objects.dir("pack").map_err(err)? {
        let dst = into.make_dir("pack").map_err(err)?;
        for (file, kind) in src.entries().map_err(err)? {
            let Some(stem) = file.to_str().and_then(|f| f.strip_suffix(".pack")) else { continue };
            let idx = format!("{stem}.idx");
            if kind != Kind::File || src.kind(&idx).map_err(err)? != Some(Kind::File) {
                continue;
            }
            // The index first: a pack without its index is ignored by libgit2.
            if src.copy_into(OsStr::new(&idx), &dst, OsStr::new(&idx)).map_err(err)? {
                any |= src.copy_into(&file, &dst, &file).map_err(err)?;
            }
        }
    }
    Ok(any)
}

fn is_hex(s: &str) -> bool {
    s.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
}

/// Deeper trees are refused, as git refuses them (`core.maxTreeDepth`).
const MAX_TREE_DEPTH: usize = 4096;

/// What an object must be, where it is referred to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// A tag's target: anything.
    Any,
    Commit,
    /// A tree, this many trees below its commit.
    Tree(usize),
    Blob,
}

enum Frame {
    Visit(Oid, Expect),
    Write(ObjectType, Vec<u8>, Oid),
}

/// Copies what `tips` reach from `from` to `to` (with `write`; else only checks
/// and counts it), stopping at objects `to` has (whose closure it then has too),
/// writing children before parents.
fn copy_closure(from: &Odb, to: &Odb, tips: &[Oid], write: bool) -> Result<Imported> {
    let mut done: HashSet<Oid> = HashSet::new();
    let mut imported = Imported::default();
    let mut bytes = 0usize;
    let mut stack: Vec<Frame> = tips.iter().map(|t| Frame::Visit(*t, Expect::Any)).collect();
    while let Some(frame) = stack.pop() {
        match frame {
            Frame::Visit(id, expect) => {
                if done.contains(&id) || to.exists(id) {
                    continue;
                }
                let (kind, data) = read_checked(from, id, &mut bytes)?;
                let children = references(kind, expect, &data)
                    .map_err(|why| err(format!("object {id} refused: {why}; nothing was imported")))?;
                stack.push(Frame::Write(kind, data, id));
                stack.extend(children.into_iter().map(|(child, expect)| Frame::Visit(child, expect)));
            }
            Frame::Write(kind, data, id) => {
                if done.insert(id) {
                    if write {
                        let written = to.write(kind, &data).map_err(err)?;
                        debug_assert_eq!(written, id);
                    }
                    imported.objects += 1;
                    if kind == ObjectType::Commit {
                        imported.commits.push((id, summary(&data)));
                        if let Some(change) = header_lines(&data).find(|(k, _)| *k == "change-id") {
                            imported.change_ids.push((id, change.1.to_owned()));
                        }
                    }
                }
            }
        }
    }
    Ok(imported)
}

/// Reads object `id`, bounded in size (each is read whole), and checks that its
/// content hashes to its id; `bytes` counts what the import has read so far.
fn read_checked(from: &Odb, id: Oid, bytes: &mut usize) -> Result<(ObjectType, Vec<u8>)> {
    let size = from.read_header(id).map(|(size, _)| size).unwrap_or(0);
    if size > MAX_OBJECT_BYTES {
        return Err(err(format!(
            "object {id} in the agent's repository is {} MiB, more than the {} MiB forage imports; nothing was imported",
            size >> 20,
            MAX_OBJECT_BYTES >> 20
        )));
    }
    *bytes += size;
    if *bytes > MAX_IMPORT_BYTES {
        return Err(err(format!(
            "the agent's new objects come to more than {} GiB, the most one import brings; nothing was imported",
            MAX_IMPORT_BYTES >> 30
        )));
    }
    let object = from.read(id).map_err(|e| {
        err(match from.exists(id) {
            // libgit2 checks the id of what it reads, too.
            true => format!("object {id} in the agent's repository does not match its id (forged or corrupt: {}); nothing was imported", e.message()),
            false => format!("object {id} is in neither the agent's repository nor the host's; nothing was imported"),
        })
    })?;
    let (kind, data) = (object.kind(), object.data().to_vec());
    if Oid::hash_object(kind, &data).map_err(err)? != id {
        return Err(err(format!(
            "object {id} in the agent's repository does not match its id (forged or corrupt); nothing was imported"
        )));
    }
    Ok((kind, data))
}

/// The objects a commit, tree or tag refers to (a submodule's commit excepted),
/// each with what it must be; checking that this object is what it was expected
/// to be, is well formed, and holds no tree entry git would refuse.
fn references(kind: ObjectType, expect: Expect, data: &[u8]) -> std::result::Result<Vec<(Oid, Expect)>, String> {
    let is = match expect {
        Expect::Any => true,
        Expect::Commit => kind == ObjectType::Commit,
        Expect::Tree(_) => kind == ObjectType::Tree,
        Expect::Blob => kind == ObjectType::Blob,
    };
    if !is {
        return Err(format!(
            "it is a {kind}, where a {} belongs",
            match expect {
                Expect::Commit => "commit",
                Expect::Tree(_) => "tree",
                _ => "blob",
            }
        ));
    }
    match kind {
        ObjectType::Blob => Ok(Vec::new()),
        ObjectType::Commit => commit_references(data),
        ObjectType::Tag => {
            let object = header_lines(data).find(|(k, _)| *k == "object").ok_or("a tag without an object")?;
            Ok(vec![(hex_oid(object.1).ok_or("bad object line")?, Expect::Any)])
        }
        ObjectType::Tree => {
            let depth = match expect {
                Expect::Tree(depth) => depth,
                _ => 0,
            };
            if depth > MAX_TREE_DEPTH {
                return Err(format!("trees nested more than {MAX_TREE_DEPTH} deep"));
            }
            tree_entries(data, depth)
        }
        _ => Err("not a commit, tree, tag or blob".into()),
    }
}

fn commit_references(data: &[u8]) -> std::result::Result<Vec<(Oid, Expect)>, String> {
    if header_lines(data).next().is_none_or(|(k, _)| k != "tree") {
        return Err("a commit must start with its tree".into());
    }
    let mut out = Vec::new();
    for (key, value) in header_lines(data) {
        match key {
            "tree" => out.push((hex_oid(value).ok_or("bad tree line")?, Expect::Tree(0))),
            "parent" => out.push((hex_oid(value).ok_or("bad parent line")?, Expect::Commit)),
            // jj keeps a conflicted commit's trees here: imported and checked like
            // its tree (jj reads them as the commit's content).
            "jj:trees" => {
                let trees: Option<Vec<Oid>> = value.split(' ').map(hex_oid).collect();
                match trees {
                    Some(trees) if trees.len() >= 3 && trees.len() % 2 == 1 => {
                        out.extend(trees.into_iter().map(|t| (t, Expect::Tree(0))))
                    }
                    _ => return Err("a bad jj:trees line".into()),
                }
            }
            _ => {}
        }
    }
    Ok(out)
}

/// The first line of a commit's message.
fn summary(commit: &[u8]) -> String {
    let text = String::from_utf8_lossy(commit);
    text.split_once("\n\n").map(|(_, m)| m.lines().next().unwrap_or("").to_owned()).unwrap_or_default()
}

/// `key value` lines up to the first empty line.
fn header_lines(data: &[u8]) -> impl Iterator<Item = (&str, &str)> {
    data.split(|b| *b == b'\n')
        .take_while(|l| !l.is_empty())
        .filter_map(|l| std::str::from_utf8(l).ok())
        .filter_map(|l| l.split_once(' '))
}

fn hex_oid(s: &str) -> Option<Oid> {
    super::refs::parse_oid(s)
}

/// A tree's entries, `depth` trees below its commit: each name checked, in
/// git's order (no two alike), and what each must be.
fn tree_entries(mut data: &[u8], depth: usize) -> std::result::Result<Vec<(Oid, Expect)>, String> {
    let mut out = Vec::new();
    let mut previous: Option<Vec<u8>> = None;
    while !data.is_empty() {
        let space = data.iter().position(|b| *b == b' ').ok_or("truncated tree entry")?;
        let mode = std::str::from_utf8(&data[..space]).map_err(|_| "bad mode")?;
        let rest = &data[space + 1..];
        let nul = rest.iter().position(|b| *b == 0).ok_or("truncated tree entry")?;
        let name = &rest[..nul];
        let id = rest.get(nul + 1..nul + 21).ok_or("truncated tree entry")?;
        let id = Oid::from_bytes(id).map_err(|e| e.to_string())?;
        data = &rest[nul + 21..];
        check_entry_name(name, mode)?;
        // git sorts a tree's entries as if a directory's name ended in '/'.
        let mut key = name.to_vec();
        if mode == "40000" {
            key.push(b'/');
        }
        if previous.as_ref().is_some_and(|p| *p >= key) {
            return Err(format!("its entries are out of order or repeated at {:?}", String::from_utf8_lossy(name)));
        }
        previous = Some(key);
        match mode {
            "40000" => out.push((id, Expect::Tree(depth + 1))),
            "100644" | "100755" | "100664" | "120000" => out.push((id, Expect::Blob)),
            // A submodule's commit lives in another repository.
            "160000" => {}
            other => return Err(format!("unknown tree entry mode {other}")),
        }
    }
    Ok(out)
}

/// `check_entry_name` for a file of the worktree (a symlink, or not).
pub(crate) fn refused_name(name: &[u8], symlink: bool) -> std::result::Result<(), String> {
    check_entry_name(name, if symlink { "120000" } else { "100644" })
}

/// The names git refuses to check out (`verify_path`), and `.jj`: a tree that
/// holds one is refused here already, so the host never stores it. A `.jj` in a
/// checkout of a colocated repository would be read by the user's jj (its
/// `repo/store/git_target` names the git directory jj then runs commands in).
fn check_entry_name(name: &[u8], mode: &str) -> std::result::Result<(), String> {
    let shown = String::from_utf8_lossy(name);
    if name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') {
        return Err(format!("a tree entry named {shown:?}"));
    }
    // NTFS ignores trailing dots and spaces, and knows `.git` as `git~1`.
    let trimmed = shown.trim_end_matches(['.', ' ']).to_ascii_lowercase();
    if trimmed == ".git" || trimmed == "git~1" {
        return Err(format!("a tree entry named {shown:?}, which would be a git directory"));
    }
    if trimmed == ".jj" {
        return Err(format!("a tree entry named {shown:?}, which would be a jj repository"));
    }
    if mode == "120000" && trimmed == ".gitmodules" {
        return Err("a .gitmodules that is a symlink".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(entries: &[(&str, &[u8], Oid)]) -> Vec<u8> {
        let mut out = Vec::new();
        for (mode, name, id) in entries {
            out.extend_from_slice(mode.as_bytes());
            out.push(b' ');
            out.extend_from_slice(name);
            out.push(0);
            out.extend_from_slice(id.as_bytes());
        }
        out
    }

    #[test]
    fn trees_naming_a_git_directory_or_escaping_are_refused() {
        let id = Oid::from_str("1111111111111111111111111111111111111111").unwrap();
        let ok = tree(&[("100644", b"a.txt", id), ("40000", b"dir", id), ("160000", b"sub", id)]);
        assert_eq!(
            references(ObjectType::Tree, Expect::Tree(0), &ok).unwrap(),
            vec![(id, Expect::Blob), (id, Expect::Tree(1))]
        );
        for bad in [&b".git"[..], b".GIT", b".git.", b"git~1", b"..", b"a/b", b"", b".jj", b".JJ ", b".jj."] {
            let t = tree(&[("40000", bad, id)]);
            assert!(references(ObjectType::Tree, Expect::Tree(0), &t).is_err(), "{}", String::from_utf8_lossy(bad));
        }
        assert!(references(ObjectType::Tree, Expect::Tree(0), &tree(&[("120000", b".gitmodules", id)])).is_err());
        assert!(references(ObjectType::Tree, Expect::Tree(0), &ok[..ok.len() - 3]).is_err(), "truncated");
        // Out of order, repeated, too deep, or not what its referrer expected.
        let unsorted = tree(&[("100644", b"b", id), ("100644", b"a", id)]);
        assert!(references(ObjectType::Tree, Expect::Tree(0), &unsorted).is_err());
        let twice = tree(&[("100644", b"a", id), ("100644", b"a", id)]);
        assert!(references(ObjectType::Tree, Expect::Tree(0), &twice).is_err());
        // "a" as a directory sorts as "a/", after "a.txt".
        let dir_order = tree(&[("100644", b"a.txt", id), ("40000", b"a", id)]);
        assert!(references(ObjectType::Tree, Expect::Tree(0), &dir_order).is_ok());
        assert!(references(ObjectType::Tree, Expect::Tree(MAX_TREE_DEPTH + 1), &ok).is_err());
        assert!(references(ObjectType::Blob, Expect::Tree(0), b"not a tree").is_err());
        assert!(references(ObjectType::Blob, Expect::Commit, b"x").is_err());
    }

    #[test]
    fn commits_and_tags_name_what_they_refer_to() {
        let t = "1111111111111111111111111111111111111111";
        let p = "2222222222222222222222222222222222222222";
        let commit = format!("tree {t}\nparent {p}\nauthor a <a> 1 +0000\n\nmessage\nparent {t}\n");
        let refs = references(ObjectType::Commit, Expect::Commit, commit.as_bytes()).unwrap();
        assert_eq!(
            refs,
            vec![(Oid::from_str(t).unwrap(), Expect::Tree(0)), (Oid::from_str(p).unwrap(), Expect::Commit)]
        );
        assert!(references(ObjectType::Commit, Expect::Any, format!("parent {p}\ntree {t}\n\n").as_bytes()).is_err());
        // jj's conflicted trees are referred to (and so imported and checked).
        let conflicted = format!("tree {t}\njj:trees {t} {p} {t}\n\nconflict\n");
        assert_eq!(references(ObjectType::Commit, Expect::Any, conflicted.as_bytes()).unwrap().len(), 4);
        for bad in [format!("{t} {p}"), t.to_string(), "zz".into()] {
            assert!(references(ObjectType::Commit, Expect::Any, format!("tree {t}\njj:trees {bad}\n\nx").as_bytes())
                .is_err());
        }
        let tag = format!("object {p}\ntype commit\ntag v1\n\nmsg");
        assert_eq!(
            references(ObjectType::Tag, Expect::Any, tag.as_bytes()).unwrap(),
            vec![(Oid::from_str(p).unwrap(), Expect::Any)]
        );
    }
}
