//! git mode's side of the review commands (`workspace::review`): the work is
//! the host's `forage-<name>` (as the last sync left it) plus the worktree's
//! files read as untrusted data; landing moves the user's branch in the
//! checkout that has it, all or nothing (`checkout`), refusing a dirty one and
//! one a sandbox's agent writes.

use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use git2::{BranchType, Oid, ReferenceType, Repository, StatusOptions};

use super::super::conflicts::Aborted;
use super::super::review::{in_memory, tree_of, DetachedHead, LandPlan, Landed, Review, Work};
use super::super::untrusted::remove_created_dir;
use super::super::worktree_files::{self, Known, Reading};
use super::checkout::{check_out_all_or_nothing, Change};
use super::refs::Head;
use super::{ws_err, GitWorkspace};
use crate::error::{Error, Result};
use crate::host_paths::resolved;

impl GitWorkspace {
    /// A copy-on-write workspace's current tree, stored, and what could not
    /// be read ("path: why"): `tip_tree` with the changes the layers show,
    /// in O(changed files) (`LayeredChanges`); `None` for any other
    /// workspace. With its upper layer gone, the tip's tree.
    fn layered_work(&self, repo: &Repository, tip_tree: &git2::Tree<'_>) -> Result<Option<(Oid, Vec<String>)>> {
        use super::super::tree_lookup::TreeLookup;
        let Some(layers) = &self.cow else { return Ok(None) };
        let upper = super::cow::upper(&self.path);
        if !upper.is_dir() {
            return Ok(Some((tip_tree.id(), Vec::new())));
        }
        let (lower, committed) = (TreeLookup::in_host(repo, layers.tree()?), TreeLookup::in_host(repo, tip_tree.id()));
        let rules = worktree_files::HostRules::of(repo);
        let changes = worktree_files::LayeredChanges::read(repo, &rules, &upper, &lower, &committed, Reading::Store)?;
        let current =
            if changes.changed().is_empty() { tip_tree.id() } else { changes.write_tree(repo, &lower, tip_tree)? };
        Ok(Some((current, changes.skipped())))
    }
}

impl Review for GitWorkspace {
    fn repository(&self) -> Result<Repository> {
        self.open()
    }

    fn work(&self, repo: &Repository) -> Result<Work> {
        let base = Oid::from_str(&self.base).map_err(ws_err)?;
        let tip = self.tip(repo).unwrap_or(base);
        let target = self.target_branch(repo);
        let start = match target.as_deref().and_then(|t| repo.refname_to_id(&format!("refs/heads/{t}")).ok()) {
            Some(target_tip) => repo.merge_base(target_tip, tip).unwrap_or(base),
            None => base,
        };
        let tip_tree = repo.find_tree(tree_of(repo, tip)?).map_err(ws_err)?;
        if let Some((current, skipped)) = self.layered_work(repo, &tip_tree)? {
            return Ok(Work { start, tip, current, current_commit: None, target, skipped });
        }
        let files = match self.view()? {
            Some(view) => {
                let index = view.index().map_err(ws_err)?;
                Some(worktree_files::read(repo, &self.path, Known::Index(index), Reading::Store)?)
            }
            None => None,
        };
        let (current, skipped) = match files {
            Some(files) => {
                let skipped = files.skipped.iter().map(|(p, why)| format!("{p}: {why}")).collect();
                (files.write_tree_keeping(repo, &tip_tree)?, skipped)
            }
            None => (tip_tree.id(), Vec::new()),
        };
        Ok(Work { start, tip, current, current_commit: None, target, skipped })
    }

    fn landed_file(&self) -> Option<PathBuf> {
        self.private.as_ref().map(|p| p.join("landed.json"))
    }

    fn target_tip(&self, repo: &Repository, target: &str) -> Result<Oid> {
        repo.refname_to_id(&format!("refs/heads/{target}"))
            .map_err(|_| Error::not_found(format!("there is no branch {target:?} to land the work on")))
    }

    fn landing_checkout(&self, repo: &Repository, target: &str) -> Result<Option<PathBuf>> {
        Ok(landing_checkout(repo, target)?.and_then(|c| c.workdir().map(Path::to_path_buf)))
    }

    fn land(&self, repo: &Repository, plan: &LandPlan) -> Result<()> {
        let refname = format!("refs/heads/{}", plan.target);
        let (before, after) = (plan.before_id()?, plan.commit_id()?);
        let now = repo.refname_to_id(&refname).map_err(|e| ws_err(format!("reading {}: {e}", plan.target)))?;
        if now != before {
            return Err(Error::conflict(format!(
                "{} moved since the merge was planned (now at {}); nothing was changed",
                plan.target,
                &now.to_string()[..12]
            ))
            .hint("run the merge again"));
        }
        let checkout = landing_checkout(repo, &plan.target)?;
        if checkout.as_ref().and_then(Repository::workdir) != plan.checkout.as_deref() {
            return Err(Error::conflict(format!(
                "where {} is checked out changed since forage checked that no agent writes there; nothing was changed",
                plan.target
            ))
            .hint("run the merge again"));
        }
        let message = format!("forage: merge of sandbox {}", plan.sandbox);
        let move_branch = || {
            repo.reference_matching(&refname, after, true, before, &message)
                .map(|_| ())
                .map_err(|e| ws_err(format!("moving {}: {e}", plan.target)))
        };
        if plan.leaves_conflicts() {
            let Some(checkout) = checkout else {
                return Err(Error::usage(format!(
                    "--conflicts leaves them in the checkout that has {} checked out, and none has; nothing was changed",
                    plan.target
                ))
                .hint(format!("`git switch {}` in your checkout first", plan.target)));
            };
            refuse_dirty(&checkout, &plan.target)?;
            return self.leave_conflicts(repo, &checkout, plan);
        }
        let Some(checkout) = checkout else { return move_branch() };
        refuse_dirty(&checkout, &plan.target)?;
        let workdir = checkout.workdir().ok_or_else(|| ws_err("the checkout has no working directory"))?;
        let tree = |id: Oid| repo.find_commit(id).and_then(|c| c.tree()).map_err(ws_err);
        let change = Change::between(repo, &tree(before)?, &tree(after)?)?;
        change.refuse_in_the_way(workdir, &plan.target)?;
        self.rehearse(&checkout, &change, after)?;
        let commit = checkout.find_object(after, None).map_err(ws_err)?;
        check_out_all_or_nothing(&checkout, &change, &commit, &plan.target, move_branch)
    }

    fn conflicts_checkout(&self) -> Result<PathBuf> {
        Ok(self.left_conflicts()?.checkout)
    }

    fn abort_conflicts(&self, repo: &Repository) -> Result<Aborted> {
        let left = self.left_conflicts()?;
        GitWorkspace::abort_conflicts(self, repo, &left)
    }

    fn detached_head(&self, repo: &Repository) -> Result<Option<DetachedHead>> {
        let Some((private, git, refs)) = self.private_refs()? else { return Ok(None) };
        let Head::Detached(head) = refs.head else { return Ok(None) };
        let objects = git.dir("objects").map_err(ws_err)?;
        let found = super::import::look(repo, objects.as_ref(), &private.staging(), &[head])?;
        let summary = match found.commits.iter().find(|(id, _)| *id == head) {
            Some((_, summary)) => summary.clone(),
            None => repo
                .find_commit(head)
                .ok()
                .and_then(|c| c.summary().ok().flatten().map(str::to_owned))
                .unwrap_or_default(),
        };
        Ok(Some(DetachedHead {
            branch: self.branch.clone(),
            commit: head.to_string(),
            summary,
            unsynced: found.commits.iter().map(|(id, s)| super::super::commit_line(*id, s)).collect(),
        }))
    }

    fn apply(&self, repo: &Repository, work: &Work) -> Result<Vec<String>> {
        let Some(workdir) = repo.workdir() else {
            return Err(Error::usage(format!(
                "{} is a bare repository: it has no checkout to apply the work to",
                self.repo.display()
            )));
        };
        // The caller checked that no agent writes `self.repo`: apply there only.
        if resolved(workdir) != resolved(&self.repo) {
            return Err(Error::conflict(format!(
                "the working directory of {} is now {}, not the checkout forage checked; nothing was changed",
                self.repo.display(),
                workdir.display()
            )));
        }
        super::super::review::apply_to_workdir(
            repo,
            tree_of(repo, work.start)?,
            work.current,
            &format!("checkout {}", self.repo.display()),
            "commit or stash what you changed in those files, or land it with `merge`",
        )
    }
}

impl GitWorkspace {
    /// True when what `merge` landed is exactly the sandbox's files now (its
    /// branch and worktree), and still on a branch of the user's.
    pub(super) fn landed_covers(&self) -> Result<bool> {
        let Some(landed) = self.landed_file().and_then(|f| Landed::read(&f)) else { return Ok(false) };
        let repo = self.open()?;
        in_memory(&repo)?;
        let work = self.work(&repo)?;
        Ok(landed.covers(&repo, work.current, &self.other_branch_tips(&repo)))
    }

    /// The tips of every local branch but the sandbox's own.
    fn other_branch_tips(&self, repo: &Repository) -> Vec<Oid> {
        let Ok(branches) = repo.branches(Some(BranchType::Local)) else { return Vec::new() };
        branches
            .flatten()
            .filter(|(b, _)| b.name().ok().flatten() != Some(self.branch.as_str()))
            .filter_map(|(b, _)| b.get().target())
            .collect()
    }

    /// Rehearses `change` (see `checkout::rehearse`) in a directory of the
    /// sandbox's private directory, which no container mounts.
    pub(super) fn rehearse(&self, checkout: &Repository, change: &Change, commit: Oid) -> Result<()> {
        let private = self.private.as_deref().ok_or_else(|| ws_err("the sandbox has no private directory"))?;
        let scratch = private.join("merge-rehearsal");
        let clear = || remove_created_dir(&scratch, private).map_err(ws_err);
        clear()?;
        std::fs::DirBuilder::new().mode(0o700).create(&scratch).map_err(ws_err)?;
        let rehearsed = super::checkout::rehearse(checkout, &scratch, change, commit);
        let cleared = clear();
        rehearsed?;
        cleared
    }

    /// The branch the sandbox was made from, if it still exists.
    fn target_branch(&self, repo: &Repository) -> Option<String> {
        let name = self.base_ref.as_deref()?.strip_prefix("refs/heads/")?;
        repo.find_branch(name, BranchType::Local).ok().map(|_| name.to_owned())
    }
}

/// The checkout where landing on branch `target` writes files: the one
/// (main or linked worktree) that has it checked out, if any. Refuses a name
/// that is no branch name or a symbolic ref (which would land elsewhere than
/// it says), and a branch checked out in a forage sandbox's worktree.
pub(super) fn landing_checkout(repo: &Repository, target: &str) -> Result<Option<Repository>> {
    let refname = format!("refs/heads/{target}");
    if !git2::Reference::is_valid_name(&refname) {
        return Err(Error::usage(format!("{target:?} is not a valid branch name")));
    }
    if let Ok(r) = repo.find_reference(&refname) {
        if r.kind() == Some(ReferenceType::Symbolic) {
            let to = r.symbolic_target().ok().flatten().unwrap_or("another ref").to_owned();
            return Err(Error::usage(format!(
                "branch {target:?} is a symbolic ref to {to}; pass the branch it points to"
            )));
        }
    }
    refuse_sandbox_worktrees(repo, &refname, target)?;
    checked_out_in(repo, &refname)
}

/// Refuses `refname` when a linked worktree that is a forage sandbox's
/// (made by this FORAGE_HOME or another) has it checked out: the agent writes
/// there. Read from each worktree's entry in the repository (the host's),
/// never from the worktree's directory.
fn refuse_sandbox_worktrees(repo: &Repository, refname: &str, target: &str) -> Result<()> {
    let Ok(entries) = std::fs::read_dir(repo.commondir().join("worktrees")) else { return Ok(()) };
    for entry in entries.flatten() {
        let id = entry.file_name().to_string_lossy().into_owned();
        let head = std::fs::read_to_string(entry.path().join("HEAD")).unwrap_or_default();
        if head.trim_end().strip_prefix("ref: ") != Some(refname) {
            continue;
        }
        let gitdir = std::fs::read_to_string(entry.path().join("gitdir")).unwrap_or_default();
        let dir = Path::new(gitdir.trim_end()).parent().unwrap_or(Path::new("")).to_path_buf();
        if id.starts_with("forage-") || in_a_forage_home(&dir) {
            return Err(Error::conflict(format!(
                "{target} is checked out in {}, the worktree of a forage sandbox (worktree {id}), where its agent writes: forage never writes files there; nothing was changed",
                dir.display()
            ))
            .hint("land the work on another branch with --into BRANCH, or take that sandbox down first with the forage-ctl (and FORAGE_HOME) that made it"));
        }
    }
    Ok(())
}

/// True when `dir` lies under the `workspaces` directory of a FORAGE_HOME
/// (one that holds `sandboxes/` or `private/`), as it is named or really is.
fn in_a_forage_home(dir: &Path) -> bool {
    [dir.to_path_buf(), resolved(dir)].iter().any(|d| {
        d.ancestors().skip(1).filter(|a| a.file_name().is_some_and(|n| n == "workspaces")).any(|workspaces| {
            workspaces.parent().is_some_and(|home| home.join("sandboxes").is_dir() || home.join("private").is_dir())
        })
    })
}

/// The checkout (the main worktree or a linked one) that has `refname`
/// checked out, if any.
fn checked_out_in(repo: &Repository, refname: &str) -> Result<Option<Repository>> {
    let head_is = |r: &Repository| r.head().ok().is_some_and(|h| h.name().is_ok_and(|n| n == refname));
    if !repo.is_bare() && head_is(repo) {
        let top = repo.workdir().ok_or_else(|| ws_err("the repository has no working directory"))?;
        return Repository::open(top).map(Some).map_err(ws_err);
    }
    for name in repo.worktrees().map_err(ws_err)?.iter().flatten().flatten() {
        // Each linked worktree's HEAD is read from its entry in the repository
        // (the host's), and only the one holding `refname` is opened: a
        // sandbox's worktree directory, which its agent writes, is never opened
        // (its branch is forage's, never a place to land).
        let head =
            std::fs::read_to_string(repo.commondir().join("worktrees").join(name).join("HEAD")).unwrap_or_default();
        if head.trim_end().strip_prefix("ref: ") != Some(refname) {
            continue;
        }
        let Ok(worktree) = repo.find_worktree(name) else { continue };
        if worktree.validate().is_err() {
            continue;
        }
        if let Ok(linked) = Repository::open_from_worktree(&worktree) {
            if head_is(&linked) {
                return Ok(Some(linked));
            }
        }
    }
    Ok(None)
}

/// Refuses a checkout with staged or unstaged changes to tracked files.
fn refuse_dirty(checkout: &Repository, target: &str) -> Result<()> {
    let mut opts = StatusOptions::new();
    opts.include_untracked(false).include_ignored(false).exclude_submodules(true);
    let statuses = checkout.statuses(Some(&mut opts)).map_err(ws_err)?;
    let mut dirty: Vec<String> = statuses
        .iter()
        .filter(|s| s.status() != git2::Status::CURRENT)
        .filter_map(|s| s.path().ok().map(str::to_owned))
        .collect();
    if dirty.is_empty() {
        return Ok(());
    }
    dirty.sort();
    let shown: Vec<&str> = dirty.iter().take(10).map(String::as_str).collect();
    let where_ =
        checkout.workdir().map(|p| p.display().to_string().trim_end_matches('/').to_owned()).unwrap_or_default();
    Err(Error::conflict(format!(
        "{target} is checked out in {where_}, which has changes not committed ({}{}); nothing was changed",
        shown.join(", "),
        if dirty.len() > 10 { format!(" and {} more", dirty.len() - 10) } else { String::new() }
    ))
    .hint("commit or stash them first"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_symbolic_ref_or_a_name_git_refuses_is_no_place_to_land() {
        let dir = tempfile::tempdir().unwrap();
        let repo = Repository::init(dir.path()).unwrap();
        let sig = git2::Signature::now("t", "t@example.com").unwrap();
        let tree = repo.find_tree(repo.index().unwrap().write_tree().unwrap()).unwrap();
        let commit = repo.commit(None, &sig, &sig, "c", &tree, &[]).unwrap();
        repo.reference("refs/heads/feature-b", commit, true, "t").unwrap();
        repo.reference_symbolic("refs/heads/alias", "refs/heads/feature-b", true, "t").unwrap();
        let e = landing_checkout(&repo, "alias").err().unwrap();
        assert!(e.to_string().contains("is a symbolic ref to refs/heads/feature-b"), "{e}");
        let e = landing_checkout(&repo, "a..b").err().unwrap();
        assert!(e.to_string().contains("not a valid branch name"), "{e}");
        assert!(landing_checkout(&repo, "feature-b").unwrap().is_none(), "checked out nowhere");
    }

    #[test]
    fn a_worktree_under_any_forage_homes_workspaces_is_a_sandboxs() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("elsewhere/forage");
        std::fs::create_dir_all(home.join("sandboxes")).unwrap();
        std::fs::create_dir_all(home.join("workspaces/x")).unwrap();
        std::fs::create_dir_all(dir.path().join("mine/workspaces/y")).unwrap();
        assert!(in_a_forage_home(&home.join("workspaces/x")));
        assert!(in_a_forage_home(&home.join("workspaces/x/deeper")));
        // A directory named `workspaces` of the user's is no FORAGE_HOME's.
        assert!(!in_a_forage_home(&dir.path().join("mine/workspaces/y")));
        // Named through a symlink, it is where it really is.
        std::os::unix::fs::symlink(home.join("workspaces"), dir.path().join("link")).unwrap();
        assert!(in_a_forage_home(&dir.path().join("link/x")));
    }
}
