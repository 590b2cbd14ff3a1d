//! `merge --conflicts` and `merge --abort` in git mode: a conflicting merge
//! left in the checkout that has the target, as `git merge` leaves one
//! (conflict markers in the files, the three versions of each in the index,
//! `MERGE_HEAD` and `MERGE_MSG`), for the user's own `git commit` to conclude
//! or `git merge --abort` (or forage's) to undo. Its files land like any
//! merge's: never in a dirty checkout, rehearsed first, all or nothing.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use git2::{Oid, Repository, RepositoryState};
use serde::{Deserialize, Serialize};

use super::super::review::LandPlan;
use super::checkout::{self, check_out_all_or_nothing, Change};
use super::{ws_err, GitWorkspace};
use crate::error::{Error, Result};
use crate::workspace::conflicts::{merged_index, Aborted};

/// What `merge --conflicts` left, kept in FORAGE_HOME/private/NAME (out of
/// the agent's reach), for `merge --abort`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct LeftConflicts {
    pub target: String,
    /// The checkout's working directory.
    pub checkout: PathBuf,
    /// The target's tip, which the checkout's HEAD stays on.
    pub before: String,
    /// The commit of the files as they were left (markers and all).
    pub marked: String,
    /// The agent's commit, in `MERGE_HEAD`.
    pub merge_head: String,
    pub conflicts: Vec<String>,
}

impl GitWorkspace {
    fn conflicts_file(&self) -> Result<PathBuf> {
        let private = self.private.as_deref().ok_or_else(|| ws_err("the sandbox has no private directory"))?;
        Ok(private.join("conflicts.json"))
    }

    /// `merge --conflicts`: checks out `plan.commit` (the merge's files,
    /// conflicts marked) in `checkout`, whose HEAD is the target, and records
    /// the merge as in progress there; the branch does not move. The caller
    /// checked that the target did not move and that the checkout is the one
    /// found safe.
    pub(super) fn leave_conflicts(&self, repo: &Repository, checkout: &Repository, plan: &LandPlan) -> Result<()> {
        let workdir = checkout.workdir().ok_or_else(|| ws_err("the checkout has no working directory"))?;
        if checkout.state() != RepositoryState::Clean {
            return Err(Error::conflict(format!(
                "{} is checked out in {}, where a merge (or another git operation) is in progress; nothing was changed",
                plan.target,
                shown_dir(workdir)
            ))
            .hint("conclude it (`git commit`) or abort it (`git merge --abort`) first"));
        }
        let (before, marked) = (plan.before_id()?, plan.commit_id()?);
        let merge_head = plan.merge_head.as_deref().and_then(|h| Oid::from_str(h).ok());
        let merge_head = merge_head.ok_or_else(|| ws_err("the plan names no commit to merge"))?;
        let tree = |id: Oid| repo.find_commit(id).and_then(|c| c.tree()).map_err(ws_err);
        let change = Change::between(repo, &tree(before)?, &tree(marked)?)?;
        change.refuse_in_the_way(workdir, &plan.target)?;
        self.rehearse(checkout, &change, marked)?;
        let commit = checkout.find_object(marked, None).map_err(ws_err)?;
        let in_progress = || record_merge(repo, checkout, plan, before, merge_head);
        check_out_all_or_nothing(checkout, &change, &commit, &plan.target, in_progress)?;
        let left = LeftConflicts {
            target: plan.target.clone(),
            checkout: workdir.to_path_buf(),
            before: plan.before.clone(),
            marked: plan.commit.clone(),
            merge_head: merge_head.to_string(),
            conflicts: plan.conflicts.clone(),
        };
        let json = serde_json::to_vec(&left).map_err(ws_err)?;
        super::private::replace(&self.conflicts_file()?, &json)
    }

    /// The checkout of the conflicts the last `merge --conflicts` left, for
    /// the caller to check that no agent writes there.
    pub(super) fn left_conflicts(&self) -> Result<LeftConflicts> {
        let file = self.conflicts_file()?;
        let bytes = match std::fs::read(&file) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Error::not_found("forage left no conflicts of this sandbox's in a checkout to abort")
                    .hint("`git merge --abort` in your checkout aborts a merge of your own"))
            }
            Err(e) => return Err(ws_err(format!("reading {}: {e}", file.display()))),
        };
        serde_json::from_slice(&bytes).map_err(|e| ws_err(format!("reading {}: {e}", file.display())))
    }

    /// `merge --abort`: puts the checkout `merge --conflicts` left conflicts
    /// in back as it was (rehearsed first), and ends the merge there. Refused
    /// where that merge is over (concluded or aborted) or another began.
    pub(super) fn abort_conflicts(&self, repo: &Repository, left: &LeftConflicts) -> Result<Aborted> {
        let found = super::review::landing_checkout(repo, &left.target)?;
        let checkout = found.filter(|c| c.workdir().is_some_and(|w| same_dir(w, &left.checkout)));
        let over = |why: &str| {
            let _ = std::fs::remove_file(self.conflicts_file()?);
            Err(Error::conflict(format!(
                "the merge forage left in {} is over ({why}); nothing was changed",
                shown_dir(&left.checkout)
            )))
        };
        let Some(checkout) = checkout else {
            return over(&format!("{} is no longer checked out there", left.target));
        };
        let head = checkout.head().ok().and_then(|h| h.target()).map(|h| h.to_string());
        if head.as_deref() != Some(left.before.as_str()) {
            return over(&format!("{} moved: was the merge committed?", left.target));
        }
        let merge_head = std::fs::read_to_string(checkout.path().join("MERGE_HEAD")).unwrap_or_default();
        if merge_head.trim() != left.merge_head {
            return over("no merge of the sandbox's work is in progress there");
        }
        let (before, marked) =
            (Oid::from_str(&left.before).map_err(ws_err)?, Oid::from_str(&left.marked).map_err(ws_err)?);
        let tree = |id: Oid| repo.find_commit(id).and_then(|c| c.tree()).map_err(ws_err);
        let change = Change::between(repo, &tree(before)?, &tree(marked)?)?;
        self.rehearse(&checkout, &change, before)?;
        checkout::abort(&checkout, &change)?;
        checkout.cleanup_state().map_err(ws_err)?;
        let _ = std::fs::remove_file(self.conflicts_file()?);
        Ok(Aborted {
            target: left.target.clone(),
            checkout: shown_dir(&left.checkout),
            files: change.paths().map(|p| String::from_utf8_lossy(p).into_owned()).collect(),
        })
    }
}

/// Records in `checkout` the merge of `merge_head` as git records one in
/// progress: the index with the three versions of each conflicting file
/// (each other file as the checkout just wrote it), `MERGE_HEAD`,
/// `MERGE_MSG` (naming the conflicts, as git's does), `MERGE_MODE` and
/// `ORIG_HEAD`. The caller puts files and index back if this fails.
fn record_merge(repo: &Repository, checkout: &Repository, plan: &LandPlan, before: Oid, merge_head: Oid) -> Result<()> {
    let merged = merged_index(repo, before, merge_head)?;
    let mut index = checkout.index().map_err(ws_err)?;
    index.read(true).map_err(ws_err)?;
    for conflict in merged.conflicts().map_err(ws_err)? {
        let conflict = conflict.map_err(ws_err)?;
        let sides = [conflict.ancestor, conflict.our, conflict.their];
        for entry in sides.iter().flatten() {
            let _ = index.remove(Path::new(std::ffi::OsStr::from_bytes(&entry.path)), 0);
        }
        for entry in sides.iter().flatten() {
            index.add(entry).map_err(ws_err)?;
        }
    }
    let dir = checkout.path();
    let mut message = format!("Merge the work of sandbox {}\n\n# Conflicts:\n", plan.sandbox);
    for path in &plan.conflicts {
        message.push_str(&format!("#\t{path}\n"));
    }
    let written = index
        .write()
        .map_err(ws_err)
        .and_then(|()| write(&dir.join("ORIG_HEAD"), format!("{before}\n").as_bytes()))
        .and_then(|()| write(&dir.join("MERGE_MSG"), message.as_bytes()))
        .and_then(|()| write(&dir.join("MERGE_MODE"), b""))
        .and_then(|()| write(&dir.join("MERGE_HEAD"), format!("{merge_head}\n").as_bytes()));
    if written.is_err() {
        let _ = checkout.cleanup_state();
    }
    written
}

fn write(path: &Path, bytes: &[u8]) -> Result<()> {
    std::fs::write(path, bytes).map_err(|e| ws_err(format!("writing {}: {e}", path.display())))
}

fn shown_dir(dir: &Path) -> String {
    dir.display().to_string().trim_end_matches('/').to_owned()
}

/// True when `a` and `b` name one directory.
fn same_dir(a: &Path, b: &Path) -> bool {
    crate::host_paths::resolved(a) == crate::host_paths::resolved(b)
}
