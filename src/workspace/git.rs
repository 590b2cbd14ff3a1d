//! `--git-worktree REPO`: a linked worktree of REPO on a new branch `forage-<name>`,
//! under FORAGE_HOME/workspaces/<name>. git runs inside the container against the
//! host's repository, so commits land on the host's branch; the mounts expose only
//! what a commit needs as writable, never the hooks or the config.
//!
//! All repository changes go through git2, under the per-repository lock the
//! caller holds. forage only ever touches the branch and the worktree it created,
//! and never prunes other worktrees.

use std::path::{Path, PathBuf};

use git2::{BranchType, ErrorCode, IndexAddOption, Oid, Repository, Signature, StatusOptions};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::names::SandboxName;
use crate::runtime::{Mount, WORKSPACE_TARGET};

/// Where archived work is kept: `refs/forage/archive/<name>/<timestamp>`.
pub const ARCHIVE_PREFIX: &str = "refs/forage/archive";

fn ws_err(e: impl std::fmt::Display) -> Error {
    Error::Workspace(e.to_string())
}

/// A git-worktree sandbox as its record remembers it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GitWorkspace {
    /// The repository: its top-level directory, or the bare repository itself.
    pub repo: PathBuf,
    /// The repository's git directory shared by all worktrees (`.git`).
    pub common_dir: PathBuf,
    /// The worktree, under FORAGE_HOME/workspaces.
    pub path: PathBuf,
    pub branch: String,
    /// The worktree's id under `<common_dir>/worktrees/`.
    pub worktree_id: String,
    /// The commit the branch started from.
    pub base: String,
    /// The branch HEAD was on when the sandbox was made, if any.
    pub base_ref: Option<String>,
}

/// Validated input for a new git-worktree sandbox; nothing is created yet.
#[derive(Debug, Clone)]
pub struct GitRequest {
    pub workspace: GitWorkspace,
}

impl GitRequest {
    /// Checks the repository, the base revision and the branch name. `raw` may be
    /// any directory inside the repository: forage uses the repository around it.
    pub fn validate(
        raw: &Path,
        base: Option<&str>,
        branch: Option<&str>,
        name: &SandboxName,
        worktree_path: PathBuf,
    ) -> Result<Self> {
        let shown = raw.display();
        if !raw.exists() {
            return Err(ws_err(format!("repository path {shown:?} does not exist; pass the path of a git repository")));
        }
        super::ensure_readable(raw)?;
        let repo = Repository::discover(raw).map_err(|_| {
            ws_err(format!(
                "{shown:?} is not inside a git repository; run `git init` there first, or mount it as it is with --workspace"
            ))
        })?;
        let top = match repo.workdir() {
            Some(w) => w.to_path_buf(),
            None => repo.path().to_path_buf(),
        };
        let top = top.canonicalize().map_err(ws_err)?;
        let common_dir = repo.commondir().canonicalize().map_err(ws_err)?;

        let (base_commit, base_ref) = match base {
            Some(rev) => {
                let obj = repo.revparse_single(rev).map_err(|_| {
                    ws_err(format!(
                        "--base {rev:?} names no commit in {}; pass a branch, tag or commit id",
                        top.display()
                    ))
                })?;
                let commit = obj.peel_to_commit().map_err(|_| ws_err(format!("--base {rev:?} is not a commit")))?;
                let full = repo.resolve_reference_from_short_name(rev).ok().and_then(|r| r.name().map(str::to_owned));
                (commit, full.filter(|n| n.starts_with("refs/heads/")))
            }
            None => {
                let head = repo.head().map_err(|e| match e.code() {
                    ErrorCode::UnbornBranch | ErrorCode::NotFound => ws_err(format!(
                        "repository {} has no commits yet; make a first commit (`git -C {:?} commit --allow-empty -m init`) or pass --base",
                        top.display(),
                        top
                    )),
                    _ => ws_err(format!("cannot read HEAD of {}: {e}", top.display())),
                })?;
                let commit = head.peel_to_commit().map_err(ws_err)?;
                let name = head.is_branch().then(|| head.name().map(str::to_owned)).flatten();
                (commit, name)
            }
        };

        let given_branch = branch.is_some();
        let branch = branch.map(str::to_owned).unwrap_or_else(|| name.branch());
        if !git2::Branch::name_is_valid(&branch).unwrap_or(false) {
            return Err(Error::Usage(match given_branch {
                true => format!("--branch {branch:?} is not a valid git branch name"),
                false => format!(
                    "sandbox name {name:?} makes the branch name {branch:?}, which git does not allow; pick another name or pass --branch"
                ),
            }));
        }
        if repo.find_branch(&branch, BranchType::Local).is_ok() {
            return Err(Error::Conflict(format!(
                "branch {branch:?} already exists in {}; pass --branch with another name, or delete it first (`git -C {:?} branch -D {branch}`) if nothing on it is needed",
                top.display(),
                top
            )));
        }
        let worktree_id = name.branch();
        if common_dir.join("worktrees").join(&worktree_id).exists() {
            return Err(Error::Conflict(format!(
                "{} already has a worktree named {worktree_id}, made by a sandbox of this name in another FORAGE_HOME or left over; `git -C {:?} worktree list` shows where it is checked out: remove it only once nothing there is needed, or pick another sandbox name",
                top.display(),
                top
            )));
        }
        super::ensure_workspace_dir_free(&worktree_path, name)?;
        Ok(GitRequest {
            workspace: GitWorkspace {
                repo: top,
                common_dir,
                path: worktree_path,
                branch,
                worktree_id,
                base: base_commit.id().to_string(),
                base_ref,
            },
        })
    }
}

impl GitWorkspace {
    fn open(&self) -> Result<Repository> {
        Repository::open(&self.common_dir).map_err(|e| ws_err(format!("opening {}: {e}", self.repo.display())))
    }

    /// Creates the branch at the base commit. Fails (changing nothing) if it exists.
    pub fn create_branch(&self) -> Result<()> {
        let repo = self.open()?;
        let base = repo.find_commit(Oid::from_str(&self.base).map_err(ws_err)?).map_err(ws_err)?;
        repo.branch(&self.branch, &base, false)
            .map_err(|e| ws_err(format!("creating branch {} in {}: {e}", self.branch, self.repo.display())))?;
        Ok(())
    }

    /// Adds the worktree on the branch and checks it out.
    pub fn add_worktree(&self) -> Result<()> {
        let repo = self.open()?;
        if let Some(parent) = self.path.parent() {
            std::fs::create_dir_all(parent).map_err(ws_err)?;
        }
        let branch = repo.find_branch(&self.branch, BranchType::Local).map_err(ws_err)?;
        let reference = branch.into_reference();
        let mut opts = git2::WorktreeAddOptions::new();
        opts.reference(Some(&reference));
        repo.worktree(&self.worktree_id, &self.path, Some(&opts))
            .map_err(|e| ws_err(format!("adding worktree {} of {}: {e}", self.path.display(), self.repo.display())))?;
        self.create_guarded_paths(&repo)
    }

    /// `<common_dir>/worktrees/<id>`: the worktree's own HEAD, index and logs.
    fn admin_dir(&self) -> PathBuf {
        self.common_dir.join("worktrees").join(&self.worktree_id)
    }

    /// The mounts that let git work in /workspace: the repository's git directory at
    /// its host path (so the worktree's `gitdir:` link resolves), guarded as
    /// `git_dir_mounts` describes, with this worktree's admin entry writable and
    /// its `.git` link read-only.
    pub fn mounts(&self, read_only: bool) -> Vec<Mount> {
        let mut mounts = vec![Mount { source: self.path.clone(), target: WORKSPACE_TARGET.into(), read_only }];
        mounts.extend(git_dir_mounts(&self.common_dir, &self.common_dir, read_only));
        let admin = self.admin_dir();
        let worktree_config = admin.join("config.worktree");
        if worktree_config.exists() {
            mounts.push(Mount {
                target: worktree_config.display().to_string(),
                source: worktree_config,
                read_only: true,
            });
        }
        mounts.push(Mount { target: admin.display().to_string(), source: admin, read_only });
        // The worktree's `gitdir:` link: were it writable, an agent could point it at
        // a repository of its own, with config that runs when the host uses git there.
        mounts.push(Mount {
            source: self.path.join(".git"),
            target: format!("{WORKSPACE_TARGET}/.git"),
            read_only: true,
        });
        mounts
    }

    /// Makes sure the paths `mounts` guards exist, so that an agent cannot create
    /// them: an empty hooks/ where the repository has none, and empty
    /// config.worktree files where git would read them.
    fn create_guarded_paths(&self, repo: &Repository) -> Result<()> {
        ensure_hooks_dir(&self.common_dir)?;
        std::fs::write(self.admin_dir().join("config.worktree"), b"").map_err(ws_err)?;
        let per_worktree_config = repo
            .config()
            .and_then(|mut c| c.snapshot())
            .and_then(|c| c.get_bool("extensions.worktreeConfig"))
            .unwrap_or(false);
        let main_worktree_config = self.common_dir.join("config.worktree");
        if per_worktree_config && !main_worktree_config.exists() {
            std::fs::write(&main_worktree_config, b"").map_err(ws_err)?;
        }
        Ok(())
    }

    /// Removes this worktree (its directory and its admin entry), and nothing else.
    pub fn remove_worktree(&self, workspaces_dir: &Path) -> Result<()> {
        let repo = self.open()?;
        if let Ok(wt) = repo.find_worktree(&self.worktree_id) {
            let mut opts = git2::WorktreePruneOptions::new();
            opts.valid(true).locked(false).working_tree(true);
            wt.prune(Some(&mut opts)).map_err(|e| ws_err(format!("removing worktree {}: {e}", self.path.display())))?;
        }
        // Only a path forage made (under its workspaces dir) is ever deleted.
        if self.path.starts_with(workspaces_dir) && self.path.exists() {
            std::fs::remove_dir_all(&self.path)
                .map_err(|e| ws_err(format!("removing {}: {e}", self.path.display())))?;
        }
        Ok(())
    }

    pub fn delete_branch(&self) -> Result<()> {
        let repo = self.open()?;
        let found = repo.find_branch(&self.branch, BranchType::Local);
        match found {
            Ok(mut b) => b.delete().map_err(|e| ws_err(format!("deleting branch {}: {e}", self.branch))),
            Err(_) => Ok(()),
        }
    }

    /// Uncommitted work in the worktree: staged, unstaged and untracked files that
    /// are not ignored. Empty when the worktree is gone.
    pub fn dirty_files(&self) -> Result<Vec<String>> {
        if !self.path.join(".git").exists() {
            return Ok(Vec::new());
        }
        let repo = Repository::open(&self.path).map_err(ws_err)?;
        let mut opts = StatusOptions::new();
        opts.include_untracked(true).recurse_untracked_dirs(true).include_ignored(false);
        let statuses = repo.statuses(Some(&mut opts)).map_err(ws_err)?;
        Ok(statuses.iter().filter_map(|s| s.path().map(str::to_owned)).collect())
    }

    /// The branch's tip, if the branch still exists.
    fn tip(&self, repo: &Repository) -> Option<Oid> {
        repo.find_branch(&self.branch, BranchType::Local).ok()?.get().target()
    }

    /// Commits on the branch since its base that no other branch contains.
    pub fn unique_commits(&self) -> Result<usize> {
        let repo = self.open()?;
        let Some(tip) = self.tip(&repo) else {
            return Ok(0);
        };
        let mut walk = repo.revwalk().map_err(ws_err)?;
        walk.push(tip).map_err(ws_err)?;
        if let Ok(base) = Oid::from_str(&self.base) {
            let _ = walk.hide(base);
        }
        for b in repo.branches(Some(BranchType::Local)).map_err(ws_err)? {
            let (b, _) = b.map_err(ws_err)?;
            if b.name().ok().flatten() != Some(self.branch.as_str()) {
                if let Some(t) = b.get().target() {
                    walk.hide(t).map_err(ws_err)?;
                }
            }
        }
        Ok(walk.count())
    }

    /// Commits ahead of / behind the base (the base branch's current tip if there
    /// was one, else the base commit).
    pub fn ahead_behind(&self) -> Result<Option<(usize, usize)>> {
        let repo = self.open()?;
        let Some(tip) = self.tip(&repo) else {
            return Ok(None);
        };
        let upstream = self
            .base_ref
            .as_deref()
            .and_then(|r| repo.refname_to_id(r).ok())
            .or_else(|| Oid::from_str(&self.base).ok());
        match upstream {
            Some(up) => repo.graph_ahead_behind(tip, up).map(Some).map_err(ws_err),
            None => Ok(None),
        }
    }

    /// Keeps the agent's work reachable before anything is deleted: if the worktree
    /// is dirty, a commit of the dirty tree on top of the branch tip; if the branch
    /// holds commits found on no other branch, the tip itself. Returns `None` when
    /// there is nothing that would be lost.
    pub fn archive(&self, name: &SandboxName, timestamp: &str) -> Result<Option<Archived>> {
        let dirty = self.dirty_files()?;
        let unique = self.unique_commits()?;
        if dirty.is_empty() && unique == 0 {
            return Ok(None);
        }
        let repo = self.open()?;
        let tip = self.tip(&repo);
        let target = if dirty.is_empty() {
            tip.ok_or_else(|| ws_err("branch vanished while archiving"))?
        } else {
            self.commit_dirty_tree(tip, name)?
        };
        // Two downs of one name within a second get distinct refs.
        let mut refname = format!("{ARCHIVE_PREFIX}/{name}/{timestamp}");
        let mut n = 1;
        while repo.find_reference(&refname).is_ok() {
            refname = format!("{ARCHIVE_PREFIX}/{name}/{timestamp}-{n}");
            n += 1;
        }
        repo.reference(&refname, target, false, &format!("forage: archive of sandbox {name}"))
            .map_err(|e| ws_err(format!("writing {refname}: {e}")))?;
        Ok(Some(Archived { refname, commit: target.to_string(), commits: unique, dirty_files: dirty }))
    }

    /// Commits everything in the worktree that git would see (not ignored files)
    /// as a child of `parent`, without touching the worktree, its index or any branch.
    fn commit_dirty_tree(&self, parent: Option<Oid>, name: &SandboxName) -> Result<Oid> {
        let wt_repo = Repository::open(&self.path).map_err(ws_err)?;
        let mut index = wt_repo.index().map_err(ws_err)?;
        index.add_all(["*"], IndexAddOption::DEFAULT, None).map_err(ws_err)?;
        index.update_all(["*"], None).map_err(ws_err)?;
        let tree_id = index.write_tree().map_err(ws_err)?;
        let tree = wt_repo.find_tree(tree_id).map_err(ws_err)?;
        let sig = wt_repo.signature().or_else(|_| Signature::now("forage", "forage@localhost")).map_err(ws_err)?;
        let parent = parent.map(|p| wt_repo.find_commit(p)).transpose().map_err(ws_err)?;
        let parents: Vec<&git2::Commit> = parent.iter().collect();
        let message = format!(
            "forage: uncommitted work of sandbox {name}\n\nArchived by `forage-ctl down` from {}.\n",
            self.path.display()
        );
        wt_repo.commit(None, &sig, &sig, &message, &tree, &parents).map_err(ws_err)
    }
}

/// A git directory mounted at `target` inside the container, writable (commits
/// need objects/, refs/, logs/ and lock files beside packed-refs), with read-only
/// binds over everything through which code could later run on the host (config,
/// config.worktree, hooks) and everything that belongs to other checkouts (the
/// main HEAD and index, the worktrees' admin entries). A read-only bind cannot be
/// replaced either: git's lockfile-and-rename fails on a mount point.
pub fn git_dir_mounts(host: &Path, target: &Path, read_only: bool) -> Vec<Mount> {
    let mut mounts = vec![Mount { source: host.to_path_buf(), target: target.display().to_string(), read_only }];
    for guarded in ["config", "config.worktree", "hooks", "HEAD", "index", "worktrees"] {
        let source = host.join(guarded);
        if source.exists() {
            mounts.push(Mount { source, target: target.join(guarded).display().to_string(), read_only: true });
        }
    }
    mounts
}

/// An empty hooks/ where a repository has none, so that an agent cannot create it.
pub fn ensure_hooks_dir(git_dir: &Path) -> Result<()> {
    let hooks = git_dir.join("hooks");
    if !hooks.exists() {
        std::fs::create_dir(&hooks).map_err(ws_err)?;
    }
    Ok(())
}

/// Creates `branch` at the commit `archive_ref` points to.
pub fn restore_branch(common_dir: &Path, archive_ref: &str, branch: &str) -> Result<()> {
    let repo = Repository::open(common_dir).map_err(|e| ws_err(format!("opening {}: {e}", common_dir.display())))?;
    let commit = repo
        .find_reference(archive_ref)
        .and_then(|r| r.peel_to_commit())
        .map_err(|_| Error::NotFound(format!("{archive_ref} no longer exists in {}", common_dir.display())))?;
    if repo.find_branch(branch, BranchType::Local).is_ok() {
        return Err(Error::Conflict(format!(
            "branch {branch:?} already exists in {}; pass --branch with another name",
            common_dir.display()
        )));
    }
    repo.branch(branch, &commit, false).map_err(|e| ws_err(format!("creating branch {branch}: {e}")))?;
    Ok(())
}

/// What `down` archived.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Archived {
    /// The git ref (`refs/forage/archive/…`) or jj bookmark (`forage/archive/…`).
    pub refname: String,
    pub commit: String,
    /// git: commits on the branch found on no other branch; jj: non-empty changes.
    pub commits: usize,
    /// Uncommitted files captured in the archive commit.
    pub dirty_files: Vec<String>,
}

/// The author identity git and jj use inside the container, taken from the host's
/// git config so commits look like the user's own; a neutral one if there is none.
pub fn identity_env(repo: &Path) -> Vec<(String, String)> {
    let config = Repository::open(repo).and_then(|r| r.config()).or_else(|_| git2::Config::open_default());
    let get = |key: &str| config.as_ref().ok().and_then(|c| c.get_string(key).ok());
    let name = get("user.name").unwrap_or_else(|| "forage agent".into());
    let email = get("user.email").unwrap_or_else(|| "agent@forage.invalid".into());
    vec![
        ("GIT_AUTHOR_NAME".into(), name.clone()),
        ("GIT_AUTHOR_EMAIL".into(), email.clone()),
        ("GIT_COMMITTER_NAME".into(), name.clone()),
        ("GIT_COMMITTER_EMAIL".into(), email.clone()),
        ("JJ_USER".into(), name.clone()),
        ("JJ_EMAIL".into(), email),
        // No automatic gc or maintenance inside: repacking the host's repository is
        // the user's business, not the agent's, and it would race other sandboxes.
        ("GIT_CONFIG_COUNT".into(), "2".into()),
        ("GIT_CONFIG_KEY_0".into(), "gc.auto".into()),
        ("GIT_CONFIG_VALUE_0".into(), "0".into()),
        ("GIT_CONFIG_KEY_1".into(), "maintenance.auto".into()),
        ("GIT_CONFIG_VALUE_1".into(), "false".into()),
    ]
}
