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
//! - no commit it brings may carry the change id of a commit that is not its own
//!   (`check_change_ids`);
//! - forage's `jj git import` on the host abandons and rewrites nothing, and
//!   forage itself abandons the sandbox's own commits that its bookmarks no
//!   longer reach (`abandon_obsolete`), leaving any the user built on or
//!   bookmarked.

use std::collections::HashSet;
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

/// A change id as jj writes it in a commit's `change-id` header: 32 of the
/// letters k to z. jj ignores any other value (and makes up an id from the
/// commit's), so only these can collide, and only these go into a revset.
fn well_formed_change_id(value: &str) -> bool {
    value.len() == 32 && value.bytes().all(|b| (b'k'..=b'z').contains(&b))
}

/// Refuses the import if one of `new` (commit, change id) carries the change id
/// of a commit of the repository's that is not the sandbox's own: jj would show
/// the user's change as divergent, or take the agent's commit for its rewrite.
pub(super) fn check_change_ids(repo: &str, new: &[(Oid, String)], owned: &Owned) -> Result<()> {
    let ids: Vec<&str> = new.iter().map(|(_, c)| c.as_str()).filter(|c| well_formed_change_id(c)).collect();
    if ids.is_empty() {
        return Ok(());
    }
    let revset = ids.iter().map(|c| format!("change_id({c})")).collect::<Vec<_>>().join(" | ");
    let found =
        jj_on_host(repo, &["log", "--no-graph", "-r", &revset, "-T", "commit_id ++ \" \" ++ change_id ++ \"\\n\""])?;
    let new_ids: HashSet<Oid> = new.iter().map(|(id, _)| *id).collect();
    for line in found.lines() {
        let Some((commit, change)) = line.split_once(' ') else { continue };
        let Ok(commit) = Oid::from_str(commit) else { continue };
        if new_ids.contains(&commit) || owned.contains(&commit) {
            continue;
        }
        let agents = new.iter().find(|(_, c)| c == change).map(|(id, _)| id.to_string()).unwrap_or_default();
        return Err(Error::workspace(format!(
            "the agent's commit {agents} carries the change id {change} of your commit {commit}, which is not the sandbox's: forage brings no commit that would rewrite or split one of your changes; nothing was brought (the agent can make a new change with `jj new` or `jj duplicate`)"
        )));
    }
    Ok(())
}

/// The sandbox's own commits reachable from `from` without passing through a
/// commit that is not its own.
fn owned_reachable(host: &Repository, from: &[Oid], owned: &Owned) -> HashSet<Oid> {
    let mut seen = HashSet::new();
    let mut todo: Vec<Oid> = from.iter().copied().filter(|id| owned.contains(id)).collect();
    while let Some(id) = todo.pop() {
        if !seen.insert(id) {
            continue;
        }
        if let Ok(commit) = host.find_commit(id) {
            todo.extend(commit.parent_ids().filter(|p| owned.contains(p)));
        }
    }
    seen
}

/// Abandons, in the repository's jj, the sandbox's own commits that its
/// bookmarks reached at `old` and no longer reach at `new`: superseded versions
/// of the agent's changes, or work thrown away. One the user built on,
/// bookmarked or tagged stays, as does everything that is not the sandbox's.
pub(super) fn abandon_obsolete(repo: &str, host: &Repository, old: &[Oid], new: &[Oid], owned: &Owned) -> Result<()> {
    let kept = owned_reachable(host, new, owned);
    let mut gone: Vec<String> = owned_reachable(host, old, owned).difference(&kept).map(Oid::to_string).collect();
    if gone.is_empty() {
        return Ok(());
    }
    gone.sort();
    let set = format!("({})", gone.join(" | "));
    // Of those, the ones with no descendant outside the set and on no bookmark
    // or tag, that jj still shows.
    let revset = format!("({set} ~ ::(({set}):: ~ {set}) ~ ::(bookmarks() | tags())) & ::visible_heads()");
    jj_on_host(repo, &["abandon", "-r", &revset]).map(|_| ())
}
