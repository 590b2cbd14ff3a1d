//! Which commits of the user's repository are a sandbox's own, and keeping its
//! bookmarks to those.
//!
//! jj inside says which commits are the agent's work, but the agent can make it
//! say anything, and jj on the host acts on what a bookmark pointed at: when a
//! bookmark moves, jj's import abandons the commits only it reached and takes a
//! new commit carrying an old one's change id for that commit's rewrite (moving
//! bookmarks and rebasing descendants onto it). Pointed at the user's commits,
//! or carrying their change ids, the agent's bookmarks would rewrite or abandon
//! the user's work. So:
//!
//! - a sandbox's bookmarks only ever point at commits its own imports brought
//!   into the repository (`owned`, a file of forage's the agent cannot reach);
//! - no commit it brings may carry a change-id header in any form but the one
//!   jj writes, nor the change id of a commit that is not its own, compared as
//!   jj compares them: as the bytes they decode to (`check_change_ids`);
//! - the user's jj never imports a move of the sandbox's bookmarks itself
//!   (`bookmarks`), forage's `jj git import` abandons and rewrites nothing, and
//!   forage itself abandons the sandbox's own commits that its bookmarks no
//!   longer reach (`abandon_obsolete`), leaving any the user built on or
//!   bookmarked.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use git2::{Oid, Repository};

use super::{jj_on_host, ws_err};
use crate::error::{Error, Result};

/// The commits a sandbox's imports brought, kept in FORAGE_HOME/private/<name>/owned.
pub(super) struct Owned {
    ids: HashSet<Oid>,
}

impl Owned {
    /// What `file` records (nothing if it is not there yet).
    pub(super) fn read(file: &Path) -> Owned {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        Owned { ids: text.lines().filter_map(crate::workspace::git::refs::parse_oid).collect() }
    }

    pub(super) fn contains(&self, id: &Oid) -> bool {
        self.ids.contains(id)
    }

    /// Adds `new` and writes the whole set back (temp file and rename): done
    /// before any bookmark points at them, so that a crash in between leaves an
    /// owned commit without a bookmark, never a bookmark on a commit not owned.
    pub(super) fn add(&mut self, file: &Path, new: impl IntoIterator<Item = Oid>) -> Result<()> {
        let before = self.ids.len();
        self.ids.extend(new);
        if self.ids.len() == before {
            return Ok(());
        }
        let mut ids: Vec<String> = self.ids.iter().map(Oid::to_string).collect();
        ids.sort();
        let tmp = file.with_extension("tmp");
        std::fs::write(&tmp, ids.join("\n") + "\n")
            .and_then(|()| std::fs::rename(&tmp, file))
            .map_err(|e| ws_err(format!("writing {}: {e}", file.display())))
    }
}

/// A change id as jj keeps it: 16 bytes, written in commits (`change-id`
/// header) and printed as 32 "reverse hex" letters, `z` for 0 down to `k` for
/// 15. jj reads either case (`K`–`Z` too), so two spellings can name one
/// change: ids are compared as bytes, never as text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct ChangeId([u8; 16]);

impl ChangeId {
    /// `text` decoded as jj decodes a change id (`hex_util::decode_reverse_hex`:
    /// `k`–`z` and `K`–`Z`, 16 bytes); `None` where jj would find none.
    pub(super) fn decode(text: &str) -> Option<ChangeId> {
        let digit = |b: u8| match b {
            b'k'..=b'z' => Some(b'z' - b),
            b'K'..=b'Z' => Some(b'Z' - b),
            _ => None,
        };
        let bytes = text.as_bytes();
        if bytes.len() != 32 {
            return None;
        }
        let mut id = [0u8; 16];
        for (out, pair) in id.iter_mut().zip(bytes.chunks_exact(2)) {
            *out = digit(pair[0])? << 4 | digit(pair[1])?;
        }
        Some(ChangeId(id))
    }

    /// The value of a commit's `change-id` header, if it is exactly what jj
    /// writes there: the id in lower case. Any other spelling is refused,
    /// whether jj would read it as the same change or ignore it.
    pub(super) fn from_header(value: &str) -> Option<ChangeId> {
        ChangeId::decode(value).filter(|id| id.to_string() == value)
    }
}

impl std::fmt::Display for ChangeId {
    /// As jj writes and prints it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        const DIGITS: &[u8; 16] = b"zyxwvutsrqponmlk";
        for b in self.0 {
            write!(f, "{}{}", DIGITS[usize::from(b >> 4)] as char, DIGITS[usize::from(b & 15)] as char)?;
        }
        Ok(())
    }
}

/// What forage says of a header value the agent chose: quoted, escaped and cut short.
fn shown(value: &str) -> String {
    let quoted = format!("{value:?}");
    match quoted.char_indices().nth(80) {
        Some((cut, _)) => format!("{}…", &quoted[..cut]),
        None => quoted,
    }
}

/// The most commit or change ids forage puts in one revset. jj 0.45 takes a
/// union of n ids in time that grows faster than n² past a few hundred
/// (measured: 256 ids 0.34 s, 1,024 1.6 s, 2,048 8 s, 5,000 100 s), so more
/// are never listed: a bigger question is asked another way.
const MAX_REVSET_IDS: usize = 256;

/// Refuses the import if one of `new` (commit, change id) carries a change-id
/// header in any form but the one jj writes, or the change id of a commit of
/// the repository's that is not the sandbox's own: jj would show the user's
/// change as divergent, or take the agent's commit for its rewrite.
pub(super) fn check_change_ids(repo: &str, new: &[(Oid, String)], owned: &Owned) -> Result<()> {
    let mut carried: HashMap<ChangeId, Oid> = HashMap::new();
    for (commit, value) in new {
        let id = ChangeId::from_header(value).ok_or_else(|| {
            Error::workspace(format!(
                "the agent's commit {commit} has the change-id header {}, which is not a change id as jj writes it (32 of the letters k to z); nothing was brought (the agent can make a new change with `jj new` or `jj duplicate`)",
                shown(value)
            ))
        })?;
        carried.entry(id).or_insert(*commit);
    }
    if carried.is_empty() {
        return Ok(());
    }
    let new_ids: HashSet<Oid> = new.iter().map(|(id, _)| *id).collect();
    for (commit, change) in commits_with_change_ids(repo, carried.keys())? {
        if new_ids.contains(&commit) || owned.contains(&commit) {
            continue;
        }
        let Some(agents) = carried.get(&change) else { continue };
        return Err(Error::workspace(format!(
            "the agent's commit {agents} carries the change id {change} of your commit {commit}, which is not the sandbox's: forage brings no commit that would rewrite or split one of your changes; nothing was brought (the agent can make a new change with `jj new` or `jj duplicate`)"
        )));
    }
    Ok(())
}

/// The repository's visible commits that may carry one of `changes`, with the
/// change id each does carry: those jj finds for them, or, for more than
/// `MAX_REVSET_IDS`, every visible commit (one pass over the repository).
fn commits_with_change_ids<'a>(
    repo: &str,
    changes: impl ExactSizeIterator<Item = &'a ChangeId>,
) -> Result<Vec<(Oid, ChangeId)>> {
    let revset = match changes.len() {
        n if n <= MAX_REVSET_IDS => changes.map(|c| format!("change_id({c})")).collect::<Vec<_>>().join(" | "),
        _ => "all()".to_owned(),
    };
    let template = "commit_id ++ \" \" ++ change_id ++ \"\\n\"";
    let found = jj_on_host(repo, &["log", "--no-graph", "-r", &revset, "-T", template])?;
    Ok(found
        .lines()
        .filter_map(|l| l.split_once(' '))
        .filter_map(|(commit, change)| Some((Oid::from_str(commit).ok()?, ChangeId::decode(change)?)))
        .collect())
}

/// The sandbox's own commits reachable from `from` without passing through a
/// commit that is not its own, and the commits not its own they sit on.
fn owned_reachable(host: &Repository, from: &[Oid], owned: &Owned) -> (HashSet<Oid>, HashSet<Oid>) {
    let mut seen = HashSet::new();
    let mut under = HashSet::new();
    let mut todo: Vec<Oid> = from.iter().copied().filter(|id| owned.contains(id)).collect();
    while let Some(id) = todo.pop() {
        if !seen.insert(id) {
            continue;
        }
        if let Ok(commit) = host.find_commit(id) {
            for parent in commit.parent_ids() {
                if owned.contains(&parent) {
                    todo.push(parent);
                } else {
                    under.insert(parent);
                }
            }
        }
    }
    (seen, under)
}

/// Abandons, in the repository's jj, the sandbox's own commits that its
/// bookmarks reached at `old` and no longer reach at `new`: superseded versions
/// of the agent's changes, or work thrown away. One the user built on,
/// bookmarked or tagged stays, as does everything that is not the sandbox's.
///
/// The set is named to jj by its ends, not commit by commit: `::old ~ ::(new |
/// under)`, `under` being the commits not the sandbox's that its own ones at
/// `old` sit on. Every commit of it is one of the sandbox's own that `old`
/// reaches through its own commits (the first commit not its own on any way
/// down from `old` is in `under`), and none is reached from `new`. When the
/// ends are too many to name (an agent's work on hundreds of the user's
/// commits), nothing is abandoned: the commits stay visible, and that is said.
pub(super) fn abandon_obsolete(repo: &str, host: &Repository, old: &[Oid], new: &[Oid], owned: &Owned) -> Result<()> {
    let old: Vec<Oid> = old.iter().copied().filter(|id| owned.contains(id)).collect();
    let (reached, under) = owned_reachable(host, &old, owned);
    let (kept, _) = owned_reachable(host, new, owned);
    if reached.difference(&kept).next().is_none() {
        return Ok(());
    }
    let ends = old.len() + new.len() + under.len();
    if ends > MAX_REVSET_IDS {
        tracing::warn!(
            "the sandbox's superseded commits sit on {} commits of yours: more than forage names to jj, so they stay visible (`jj abandon` them)",
            under.len()
        );
        return Ok(());
    }
    let ids = |ids: &mut dyn Iterator<Item = &Oid>| ids.map(Oid::to_string).collect::<Vec<_>>().join(" | ");
    let stop = ids(&mut new.iter().chain(&under));
    let set = format!("(::({}) ~ ::({}))", ids(&mut old.iter()), if stop.is_empty() { "none()".into() } else { stop });
    // Of those, the ones with no descendant outside the set and on no bookmark
    // or tag, that jj still shows.
    let revset = format!("({set} ~ ::({set}:: ~ {set}) ~ ::(bookmarks() | tags())) & ::visible_heads()");
    jj_on_host(repo, &["abandon", "-r", &revset]).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn change_ids_are_compared_as_jj_decodes_them_and_only_jj_s_spelling_is_admitted() {
        let lower = "zyxwvutsrqponmlkzyxwvutsrqponmlk";
        let id = ChangeId::decode(lower).unwrap();
        assert_eq!(id.0[..8], [0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef]);
        assert_eq!(id.to_string(), lower);
        // jj reads upper case as the same change: so does forage, and refuses it.
        let upper = lower.to_ascii_uppercase();
        let mixed = format!("{}{}", &upper[..16], &lower[16..]);
        assert_eq!(ChangeId::decode(&upper), Some(id));
        assert_eq!(ChangeId::decode(&mixed), Some(id));
        assert_eq!(ChangeId::from_header(lower), Some(id));
        for refused in [upper.as_str(), &mixed, "", "zz", &lower[..31], &format!("{lower}k"), &format!("{lower} ")] {
            assert_eq!(ChangeId::from_header(refused), None, "{refused:?}");
        }
        // Digits and hex are not jj's letters; nor is anything past z.
        assert_eq!(ChangeId::decode(&"a".repeat(32)), None);
        assert_eq!(ChangeId::decode(&"{".repeat(32)), None);
        assert_eq!(ChangeId::decode(&"ü".repeat(16)), None);
    }

    #[test]
    fn what_the_agent_wrote_is_shown_escaped_and_short() {
        assert_eq!(shown("a\u{1b}[2Jb"), "\"a\\u{1b}[2Jb\"");
        assert!(shown(&"x".repeat(500)).chars().count() < 90);
    }
}
