//! `--git-worktree REPO`: the agent works in a private repository of its own, and
//! forage alone brings its commits to the host (SPEC §3a).
//!
//! On the host, the sandbox is a linked worktree of REPO on a new branch
//! `forage-<name>` under FORAGE_HOME/workspaces/<name>, so `git worktree list`,
//! `git log forage-NAME` and `git status` there work as usual and read only the
//! host's own config. Inside the container, `/workspace/.git` is a read-only link
//! to the private git directory (`private.rs`), which borrows the host's objects
//! read-only; no other part of the host's git directory is visible. `sync`
//! (`import.rs`) verifies and imports the agent's new objects and moves
//! `refs/heads/forage-<name>`, and nothing else.
//!
//! All repository changes go through git2, under the per-repository lock the
//! caller holds. forage only ever touches the branch and the worktree it created,
//! and never prunes other worktrees.

mod checkout;
mod conflicts;
mod counts;
mod fsck;
pub mod host_changes;
pub(crate) mod import;
pub(crate) mod peek;
pub mod private;
pub(crate) mod refs;
mod review;
pub mod review_branch;

use std::path::{Path, PathBuf};

use git2::{BranchType, ErrorCode, ObjectType, Oid, Repository, Signature};
use serde::{Deserialize, Serialize};

use super::cow::{self, CowLayers};
use super::tree_lookup::TreeLookup;
use super::untrusted::{remove_created_dir, Dir};
use super::worktree_files::{self, Known, Reading};
use super::{commit_line, AtStake, Inside, Mode, Part, Scope, Synced, Workspace, WorkspaceStatus};
use crate::error::{Error, Result};
use crate::host_paths::Guard;
use crate::names::SandboxName;
use crate::runtime::{Mount, WORKSPACE_TARGET};
use private::PrivateRepo;
use refs::{Head, PrivateRefs};

/// Where archived work is kept: `refs/forage/archive/<name>/<timestamp>`.
pub const ARCHIVE_PREFIX: &str = "refs/forage/archive";

fn ws_err(e: impl std::fmt::Display) -> Error {
    Error::workspace(e.to_string())
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
    /// FORAGE_HOME/private/<name>: the agent's private repository. `None` in
    /// records of sandboxes made before forage gave agents one.
    #[serde(default)]
    pub private: Option<PathBuf>,
    /// `up --include-uncommitted`: the worktree started with a copy of the
    /// uncommitted changes of the user's checkout (`host_changes`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub from_uncommitted: bool,
    /// The commit the branch was made at, when that is not the base: a
    /// sandbox `restore --up` made on archived work starts at the archive and
    /// keeps the archived sandbox's base, so that its work is reviewed whole.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<String>,
    /// `up --cow`: /workspace is an overlay on a base checkout shared with
    /// other sandboxes, and `path` holds this sandbox's own layer; there is
    /// no worktree of the repository on the host (docs/adr/0003).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cow: Option<CowLayers>,
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
        private_dir: PathBuf,
    ) -> Result<Self> {
        let (repo, top) = open_repository(raw)?;
        let common_dir = repo.commondir().canonicalize().map_err(ws_err)?;
        let (base_commit, base_ref) = resolve_base(&repo, &top, base)?;
        let branch = branch_name(branch, name)?;
        if repo.find_branch(&branch, BranchType::Local).is_ok() {
            return Err(Error::conflict(format!("branch {branch:?} already exists in {}", top.display())).hint(format!(
                "pass --branch with another name, or delete it first (`git -C {top:?} branch -D {branch}`) if nothing on it is needed"
            )));
        }
        let worktree_id = name.branch();
        if common_dir.join("worktrees").join(&worktree_id).exists() {
            return Err(Error::conflict(format!(
                "{} already has a worktree named {worktree_id}, made by a sandbox of this name in another FORAGE_HOME or left over",
                top.display()
            ))
            .hint(format!(
                "`git -C {top:?} worktree list` shows where it is checked out: remove it only once nothing there is needed, or pick another sandbox name"
            )));
        }
        super::ensure_workspace_dir_free(&worktree_path, name)?;
        super::ensure_workspace_dir_free(&private_dir, name)?;
        Ok(GitRequest {
            workspace: GitWorkspace {
                repo: top,
                common_dir,
                path: worktree_path,
                branch,
                worktree_id,
                base: base_commit.to_string(),
                base_ref,
                private: Some(private_dir),
                from_uncommitted: false,
                start: None,
                cow: None,
            },
        })
    }

    /// The uncommitted changes of the user's checkout (`None` for a bare
    /// repository, which has none).
    pub fn host_changes(&self) -> Result<Option<host_changes::HostChanges>> {
        if self.workspace.repo == self.workspace.common_dir {
            return Ok(None);
        }
        host_changes::HostChanges::read(&self.workspace.repo).map(Some)
    }

    /// `--include-uncommitted`: the worktree will start with a copy of the
    /// user's uncommitted changes, on HEAD (their changes are relative to it).
    pub fn include_uncommitted(mut self, base: Option<&str>) -> Result<Self> {
        if base.is_some() {
            return Err(Error::usage(
                "--include-uncommitted starts from your HEAD, to which your uncommitted changes belong; leave out --base",
            ));
        }
        if self.workspace.repo == self.workspace.common_dir {
            return Err(Error::usage(format!(
                "{} is a bare repository: it has no checkout, so no uncommitted changes to include",
                self.workspace.repo.display()
            )));
        }
        self.workspace.from_uncommitted = true;
        Ok(self)
    }

    /// The same request for `restore --up`: the branch starts at the archived
    /// commit `start`, and the work is reviewed against the archived
    /// sandbox's `base` (validated as `--base` was).
    pub fn starting_at(mut self, start: &str, base_ref: Option<String>) -> Result<Self> {
        let repo = Repository::open(&self.workspace.common_dir).map_err(ws_err)?;
        Oid::from_str(start).and_then(|id| repo.find_commit(id)).map_err(|_| {
            Error::not_found(format!("the archived commit {start} is no longer in {}", self.workspace.repo.display()))
        })?;
        self.workspace.start = (start != self.workspace.base).then(|| start.to_owned());
        self.workspace.base_ref = base_ref.filter(|r| repo.find_reference(r).is_ok());
        Ok(self)
    }

    /// `--cow`: the workspace becomes an overlay on the base checkout of the
    /// start commit's tree under `bases`; or, where that cannot be, the
    /// request as it was and why (`up` then says it made a full checkout).
    pub fn copy_on_write(mut self, home: &Path, bases: &Path) -> (Self, Option<String>) {
        if self.workspace.from_uncommitted {
            let why = "--include-uncommitted copies your changes into a full checkout".to_owned();
            return (self, Some(why));
        }
        if let Some(why) = cow::unusable_home(home) {
            return (self, Some(why));
        }
        match self.with_start_tree(|t| Ok(t.id())) {
            Ok(tree) => {
                self.workspace.cow = Some(CowLayers { base: bases.join(tree.to_string()) });
                (self, None)
            }
            Err(e) => (self, Some(e.to_string())),
        }
    }

    /// Whether the start commit's tree holds at least `n` files (symlinks and
    /// submodules count as files), counted only up to `n`: what deciding
    /// between a full and a copy-on-write checkout may cost, whatever the
    /// repository's size.
    pub fn has_at_least_files(&self, n: usize) -> Result<bool> {
        self.with_start_tree(|tree| {
            let mut count = 0;
            let walked = tree.walk(git2::TreeWalkMode::PreOrder, |_, entry| {
                if entry.kind() != Some(git2::ObjectType::Tree) {
                    count += 1;
                }
                if count >= n {
                    git2::TreeWalkResult::Abort
                } else {
                    git2::TreeWalkResult::Ok
                }
            });
            match walked {
                // Stopping the walk early is what `Abort` reports as an error.
                _ if count >= n => Ok(true),
                Ok(()) => Ok(false),
                Err(e) => Err(ws_err(format!("reading the tree of {}: {e}", self.workspace.repo.display()))),
            }
        })
    }

    /// `f` of the tree the sandbox starts from.
    fn with_start_tree<T>(&self, f: impl FnOnce(&git2::Tree<'_>) -> Result<T>) -> Result<T> {
        let repo = self.workspace.open()?;
        let tree = repo.find_commit(self.workspace.start_commit()?).and_then(|c| c.tree()).map_err(ws_err)?;
        f(&tree)
    }
}

/// The repository around `raw`, and its top directory (or, bare, itself).
fn open_repository(raw: &Path) -> Result<(Repository, PathBuf)> {
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
    let top = repo.workdir().unwrap_or_else(|| repo.path()).canonicalize().map_err(ws_err)?;
    if repo.is_shallow() {
        return Err(ws_err(format!(
            "{} is a shallow clone; forage needs the whole history to check the agent's commits (`git -C {top:?} fetch --unshallow`)",
            top.display()
        )));
    }
    Ok((repo, top))
}

/// The commit the branch starts from (`base`, else HEAD), and the branch it
/// was on, if any.
fn resolve_base(repo: &Repository, top: &Path, base: Option<&str>) -> Result<(Oid, Option<String>)> {
    if let Some(rev) = base {
        let obj = repo.revparse_single(rev).map_err(|_| {
            ws_err(format!("--base {rev:?} names no commit in {}; pass a branch, tag or commit id", top.display()))
        })?;
        let commit = obj.peel_to_commit().map_err(|_| ws_err(format!("--base {rev:?} is not a commit")))?;
        let full = repo.resolve_reference_from_short_name(rev).ok().and_then(|r| r.name().ok().map(str::to_owned));
        return Ok((commit.id(), full.filter(|n| n.starts_with("refs/heads/"))));
    }
    let head = repo.head().map_err(|e| match e.code() {
        ErrorCode::UnbornBranch | ErrorCode::NotFound => ws_err(format!(
            "repository {} has no commits yet; make a first commit (`git -C {top:?} commit --allow-empty -m init`) or pass --base",
            top.display()
        )),
        _ => ws_err(format!("cannot read HEAD of {}: {e}", top.display())),
    })?;
    let commit = head.peel_to_commit().map_err(ws_err)?;
    let name = head.is_branch().then(|| head.name().ok().map(str::to_owned)).flatten();
    Ok((commit.id(), name))
}

/// `--branch`, else `forage-<name>`, if git allows it.
fn branch_name(given: Option<&str>, name: &SandboxName) -> Result<String> {
    let branch = given.map(str::to_owned).unwrap_or_else(|| name.branch());
    if git2::Branch::name_is_valid(&branch).unwrap_or(false) {
        return Ok(branch);
    }
    Err(Error::usage(match given {
        Some(_) => format!("--branch {branch:?} is not a valid git branch name"),
        None => format!(
            "sandbox name {:?} makes the branch name {branch:?}, which git does not allow; pick another name or pass --branch",
            name.as_str()
        ),
    }))
}

/// How the agent's branch fared in a sync.
enum BranchSync {
    /// Brought over, or nothing to bring.
    Done,
    /// The agent's tip, left alone: the host's branch moved too.
    Diverged(Oid),
    /// The import refused the agent's commits; why.
    Refused(String),
}

/// What an archive kept, and what it could not.
#[derive(Debug, Clone, Default)]
pub struct ArchiveOutcome {
    /// The archives made, the sandbox branch's last.
    pub archived: Vec<Archived>,
    pub not_archived: Vec<NotArchived>,
    /// With `--discard`: what was thrown away instead.
    pub discarded: Option<AtStake>,
    /// jj: changes `merge` landed that the agent edited again since, which
    /// the user's jj shows as divergent.
    pub divergent: Vec<super::jj::Divergent>,
}

/// Work `down` could not keep, and why.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct NotArchived {
    /// What it was: "branch NAME", "stash@{0}", a path in the worktree.
    pub source: String,
    pub why: String,
}

/// What a `sync` did.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SyncReport {
    pub branch: String,
    /// The branch's tip on the host before and after.
    pub before: Option<String>,
    pub after: Option<String>,
    /// Commits now on the host's branch that were not before.
    pub new_commits: usize,
    /// Objects copied from the agent's repository into the host's.
    pub imported_objects: usize,
    /// Set when the agent's HEAD is not on the sandbox's branch, saying where it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_head: Option<String>,
}

impl GitWorkspace {
    fn open(&self) -> Result<Repository> {
        Repository::open(&self.common_dir).map_err(|e| ws_err(format!("opening {}: {e}", self.repo.display())))
    }

    /// The commit the branch was made at: its start, else the base.
    fn start_commit(&self) -> Result<Oid> {
        Oid::from_str(self.start.as_deref().unwrap_or(&self.base)).map_err(ws_err)
    }

    /// Creates the branch at its start. Fails (changing nothing) if it exists.
    pub fn create_branch(&self) -> Result<()> {
        let repo = self.open()?;
        let base = repo.find_commit(self.start_commit()?).map_err(ws_err)?;
        repo.branch(&self.branch, &base, false)
            .map_err(|e| ws_err(format!("creating branch {} in {}: {e}", self.branch, self.repo.display())))?;
        Ok(())
    }

    /// Adds the host's worktree on the branch and checks it out: the host's view
    /// of the sandbox, and the files the agent starts from.
    pub fn add_worktree(&self) -> Result<()> {
        if let Some(layers) = &self.cow {
            return self.add_layers(layers);
        }
        self.check_out_worktree()?;
        if self.from_uncommitted {
            host_changes::HostChanges::read(&self.repo)?.copy_into(&self.repo, &self.path)?;
        }
        Ok(())
    }

    /// `--cow`: the shared base checkout (made if it is not there yet, with
    /// this sandbox among its users) and this sandbox's own layer.
    fn add_layers(&self, layers: &CowLayers) -> Result<()> {
        let repo = self.open()?;
        let bases = layers.base.parent().ok_or_else(|| ws_err("a base checkout outside FORAGE_HOME/bases"))?;
        // Submodules as the host view's index has them (`hide_submodules`).
        cow::take_base(&repo, bases, layers.tree()?, &self.worktree_id, |index| hide_submodules(index).map(drop))?;
        cow::make_layers(&self.path)
    }

    /// The worktree, checked out at the branch.
    fn check_out_worktree(&self) -> Result<()> {
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
        if let Some(view) = self.view()? {
            let mut index = view.index().map_err(ws_err)?;
            if hide_submodules(&mut index)? {
                index.write().map_err(ws_err)?;
            }
        }
        Ok(())
    }

    /// `<common_dir>/worktrees/<id>`: the host worktree's own HEAD, index and logs.
    fn admin_dir(&self) -> PathBuf {
        self.common_dir.join("worktrees").join(&self.worktree_id)
    }

    fn private_repo(&self) -> Option<PrivateRepo<'_>> {
        self.private.as_deref().map(|dir| PrivateRepo { dir })
    }

    /// Makes the agent's private repository, on the branch at its start,
    /// with the index of the host's fresh checkout.
    pub fn create_private(&self) -> Result<()> {
        let Some(private) = self.private_repo() else { return Ok(()) };
        let repo = self.open()?;
        let index = match &self.cow {
            Some(layers) => layers.index(),
            None => self.admin_dir().join("index"),
        };
        private.create(&repo, &index, &self.branch, self.start_commit()?)?;
        if self.cow.is_some() {
            // The overlay shows the base's stat data unchanged but for the
            // device (ADR 0003); git then trusts size and mtime alone.
            private.trust_stat_minimally()?;
        }
        Ok(())
    }

    /// The mounts that make /workspace a git checkout of the private repository.
    /// A sandbox made before private repositories gets its worktree alone.
    pub fn bind_mounts(&self, read_only: bool, guard: &Guard) -> Vec<Mount> {
        let (source, overlay) = match &self.cow {
            Some(layers) => (cow::upper(&self.path), cow::overlay(layers, &self.path)),
            None => (self.path.clone(), None),
        };
        let mut mounts = vec![Mount { source, target: WORKSPACE_TARGET.into(), read_only, overlay }];
        if let (Some(private), Ok(repo)) = (self.private_repo(), self.open()) {
            mounts.extend(private.mounts(&repo, read_only, guard));
        }
        mounts
    }

    /// The host's view of the worktree, opened only once its `.git` link is seen
    /// to be the one git2 wrote (it is never visible inside the container).
    fn view(&self) -> Result<Option<Repository>> {
        let link = match std::fs::read_to_string(self.path.join(".git")) {
            Ok(link) => link,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(ws_err(format!("reading {}: {e}", self.path.join(".git").display()))),
        };
        let points_to = link.trim().strip_prefix("gitdir:").map(|p| PathBuf::from(p.trim()));
        let admin = self.admin_dir();
        if points_to.as_deref().and_then(|p| p.canonicalize().ok()) != admin.canonicalize().ok() {
            return Err(ws_err(format!("{} does not link to {}", self.path.join(".git").display(), admin.display())));
        }
        Repository::open(&self.path).map(Some).map_err(ws_err)
    }

    /// Removes the host's worktree: its admin entry in the repository and its
    /// directory, each only where the record says forage made it.
    pub fn remove_worktree(&self, workspaces_dir: &Path) -> Result<()> {
        if let Some(layers) = &self.cow {
            remove_created_dir(&self.path, workspaces_dir).map_err(ws_err)?;
            return cow::leave_base(layers, &self.worktree_id);
        }
        let admin = self.admin_dir();
        if admin.exists() {
            // Only the entry of *this* worktree: its `gitdir` names our directory.
            let gitdir = std::fs::read_to_string(admin.join("gitdir")).unwrap_or_default();
            let names = Path::new(gitdir.trim());
            let ours = self.path.join(".git");
            let same = names == ours
                || (names.canonicalize().ok().is_some() && names.canonicalize().ok() == ours.canonicalize().ok());
            if !same {
                return Err(ws_err(format!(
                    "refusing to delete {}: it is not the entry of worktree {} (its gitdir file names {:?})",
                    admin.display(),
                    self.path.display(),
                    gitdir.trim()
                )));
            }
            remove_created_dir(&admin, &self.common_dir.join("worktrees")).map_err(ws_err)?;
        }
        remove_created_dir(&self.path, workspaces_dir).map_err(ws_err)
    }

    /// Removes the private repository (only under `private_root`).
    pub fn remove_private(&self, private_root: &Path) -> Result<()> {
        match &self.private {
            // `list` writes its memo there holding the directory's lock.
            Some(dir) => super::untrusted::remove_locked_dir(dir, private_root).map_err(ws_err),
            None => Ok(()),
        }
    }

    pub fn delete_branch(&self) -> Result<()> {
        let repo = self.open()?;
        let found = repo.find_branch(&self.branch, BranchType::Local);
        match found {
            Ok(mut b) => b.delete().map_err(|e| ws_err(format!("deleting branch {}: {e}", self.branch))),
            Err(_) => Ok(()),
        }
    }

    /// The agent's refs, or `None` when there is no private repository (yet).
    fn private_refs(&self) -> Result<Option<(PrivateRepo<'_>, Dir, PrivateRefs)>> {
        let Some(private) = self.private_repo() else { return Ok(None) };
        let git = match Dir::open(&private.git_dir()) {
            Ok(d) => d,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(ws_err(format!("opening {}: {e}", private.git_dir().display()))),
        };
        let refs = PrivateRefs::read(&git)?;
        Ok(Some((private, git, refs)))
    }

    /// Imports the commits `tips` reach into the host repository (verified).
    fn import(
        &self,
        repo: &Repository,
        private: &PrivateRepo<'_>,
        git: &Dir,
        tips: &[Oid],
    ) -> Result<import::Imported> {
        let objects = git.dir("objects").map_err(ws_err)?;
        let imported = import::import(repo, objects.as_ref(), &private.staging(), tips)?;
        for tip in tips {
            require_commit(repo, *tip)?;
        }
        Ok(imported)
    }

    /// Brings the agent's branch to the host: imports its new commits (each
    /// object verified) and moves `refs/heads/<branch>`, and nothing else, to
    /// its tip; keeps the host worktree's index on that tip; and refreshes the
    /// agent's view of the host's branches.
    ///
    /// Only a branch the agent moved since the last sync is brought over, and
    /// only onto a host branch nobody moved meanwhile (or one the agent's tip
    /// descends from): commits made on the host's side of the branch are never
    /// dropped. When both moved, nothing moves and the error says so; `down`
    /// then archives both.
    pub fn sync_to_host(&self) -> Result<SyncReport> {
        let (report, outcome) = self.sync_branch()?;
        match outcome {
            BranchSync::Done => Ok(report),
            BranchSync::Refused(why) => Err(Error::workspace(why)),
            BranchSync::Diverged(agent_tip) => Err(Error::conflict(format!(
                "branch {} was changed in {} since the last sync, and the agent committed too ({}); nothing was moved",
                self.branch,
                self.repo.display(),
                &agent_tip.to_string()[..12],
            ))
            .hint(format!("merge or reset one side (`git -C {:?} log {}` shows the host's)", self.repo, self.branch))
            .hint_run("or {command} archives both", ["down"])),
        }
    }

    /// `sync`, saying why the agent's branch was not brought over (rather than
    /// failing) when that is the agent's doing: its objects were refused, or it
    /// and the host's branch both moved.
    fn sync_branch(&self) -> Result<(SyncReport, BranchSync)> {
        let repo = self.open()?;
        let before = self.tip(&repo);
        let mut report = SyncReport {
            branch: self.branch.clone(),
            before: before.map(|o| o.to_string()),
            after: before.map(|o| o.to_string()),
            new_commits: 0,
            imported_objects: 0,
            agent_head: None,
        };
        let Some((private, git, refs)) = self.private_refs()? else { return Ok((report, BranchSync::Done)) };
        report.agent_head = match &refs.head {
            Head::Branch(b) if *b == self.branch => None,
            Head::Branch(b) => Some(format!("on branch {b}")),
            Head::Detached(id) => Some(format!("detached at {}", &id.to_string()[..12])),
            Head::Unknown => Some("unreadable".into()),
        };
        let last = private.last_synced().or_else(|| self.start_commit().ok());
        let mut outcome = BranchSync::Done;
        if let Some(tip) = refs.branches.get(&self.branch).copied().filter(|t| Some(*t) != last) {
            report.imported_objects = match self.import(&repo, &private, &git, &[tip]) {
                Ok(imported) => imported.objects,
                Err(e) => {
                    private.refresh_remotes(&repo)?;
                    return Ok((report, BranchSync::Refused(e.to_string())));
                }
            };
            let host_unmoved = before.is_none() || before == last || before == Some(tip);
            let fast_forward = || before.is_some_and(|b| repo.graph_descendant_of(tip, b).unwrap_or(false));
            if host_unmoved || fast_forward() {
                if before != Some(tip) {
                    let name = format!("refs/heads/{}", self.branch);
                    let message = "forage: sync from the sandbox's repository";
                    match before {
                        Some(old) => repo.reference_matching(&name, tip, true, old, message),
                        None => repo.reference(&name, tip, false, message),
                    }
                    .map_err(|e| ws_err(format!("moving {name} (did it change on the host meanwhile?): {e}")))?;
                    report.after = Some(tip.to_string());
                    report.new_commits = count_new(&repo, tip, before)?;
                    self.reset_view_index(&repo, tip)?;
                }
                private.set_last_synced(tip)?;
            } else {
                outcome = BranchSync::Diverged(tip);
            }
        }
        private.refresh_remotes(&repo)?;
        Ok((report, outcome))
    }

    /// Points the host worktree's index at `tip`'s tree (stat data kept for the
    /// files that did not change), so that `git status` there shows the agent's
    /// uncommitted work only.
    fn reset_view_index(&self, repo: &Repository, tip: Oid) -> Result<()> {
        let Some(view) = self.view()? else { return Ok(()) };
        let tree = repo.find_commit(tip).and_then(|c| c.tree()).map_err(ws_err)?;
        let mut index = view.index().map_err(ws_err)?;
        index.read_tree(&tree).map_err(ws_err)?;
        hide_submodules(&mut index)?;
        index.write().map_err(ws_err)
    }

    /// Refreshes the agent's view of the host's branches (after another
    /// sandbox's sync moved one).
    pub fn refresh_origin(&self) -> Result<()> {
        match self.private_repo() {
            Some(private) if private.dir.join("remotes").is_dir() => private.refresh_remotes(&self.open()?),
            _ => Ok(()),
        }
    }

    /// Uncommitted work in the worktree, relative to the branch's tip on the
    /// host: changed, added and removed files that are not ignored.
    pub fn dirty_files(&self) -> Result<Vec<String>> {
        Ok(self.uncommitted()?.0)
    }

    /// `dirty_files`, and the paths `down` could not archive ("path: why").
    fn uncommitted(&self) -> Result<(Vec<String>, Vec<String>)> {
        let repo = self.open()?;
        self.uncommitted_in(&repo, &worktree_files::HostRules::of(&repo))
    }

    /// `uncommitted`, in the host repository `repo` already opened. The host
    /// view's index is opened by itself: its stat data tells which files
    /// changed, and the host repository's excludes apply (the same as opening
    /// the view, for half the work: `list` counts every sandbox this way).
    fn uncommitted_in(
        &self,
        repo: &Repository,
        rules: &worktree_files::HostRules,
    ) -> Result<(Vec<String>, Vec<String>)> {
        let tree = self.tip(repo).map(|t| repo.find_commit(t).and_then(|c| c.tree())).transpose().map_err(ws_err)?;
        if let Some(tree) = &tree {
            let committed = TreeLookup::in_host(repo, tree.id());
            if let Some(changes) = self.changed_layers(repo, rules, &committed)? {
                return Ok(changes);
            }
        }
        let Some((files, _)) = self.read_worktree(repo, rules, false)? else { return Ok(Default::default()) };
        let changed = files.changed_since(repo, tree.as_ref())?;
        let skipped = files.skipped.into_iter().map(|(path, why)| format!("{path}: {why}")).collect();
        Ok((changed, skipped))
    }

    /// The worktree's files, read with the host view's index (its stat data
    /// tells which files changed) and the host repository's excludes, and
    /// (with `observe`) what decided them; `None` when the worktree is gone.
    fn read_worktree(
        &self,
        repo: &Repository,
        rules: &worktree_files::HostRules,
        observe: bool,
    ) -> Result<Option<(worktree_files::WorktreeFiles, super::dirty_memo::Observed)>> {
        if self.cow.is_some() {
            // Read in O(changed files), so worth no memo.
            let mut observed = super::dirty_memo::Observed::default();
            observed.lost();
            return Ok(self.read_layers(repo, rules, Reading::Look)?.map(|files| (files, observed)));
        }
        if !self.path.join(".git").exists() {
            return Ok(None);
        }
        let index_file = self.admin_dir().join("index");
        let index = match git2::Index::open(&index_file) {
            Ok(index) => index,
            Err(e) => return Err(ws_err(format!("reading {}: {e}", index_file.display()))),
        };
        let known = Known::Index(index);
        Ok(Some(if observe {
            worktree_files::read_observed(repo, rules, &self.path, known, Reading::Look)?
        } else {
            (worktree_files::read_with(repo, rules, &self.path, known, Reading::Look)?, Default::default())
        }))
    }

    /// Copy-on-write: the agent's files as its overlay shows them, from the
    /// base tree and the upper layer (`worktree_files::read_layered`), never
    /// from the base checkout; `None` when the upper layer is gone (or this
    /// is no copy-on-write sandbox).
    pub(crate) fn read_layers(
        &self,
        repo: &Repository,
        rules: &worktree_files::HostRules,
        how: Reading,
    ) -> Result<Option<worktree_files::WorktreeFiles>> {
        let Some(layers) = &self.cow else { return Ok(None) };
        let upper = cow::upper(&self.path);
        if !upper.is_dir() {
            return Ok(None);
        }
        let lower_tree = repo.find_tree(layers.tree()?).map_err(ws_err)?;
        let lower = worktree_files::tree_files(repo, &lower_tree)?;
        let committed = match self.tip(repo) {
            Some(tip) => {
                let tree = repo.find_commit(tip).and_then(|c| c.tree()).map_err(ws_err)?;
                worktree_files::tree_files(repo, &tree)?
            }
            None => lower.clone(),
        };
        worktree_files::read_layered(repo, rules, &upper, lower, committed, how).map(Some)
    }

    /// Copy-on-write: the paths by which the agent's files differ from
    /// `committed`, and what could not be read ("path: why"), in O(changed
    /// files) (`worktree_files::changed_layered`); `None` when this is no
    /// copy-on-write sandbox. With its upper layer gone, nothing differs.
    pub(crate) fn changed_layers(
        &self,
        repo: &Repository,
        rules: &worktree_files::HostRules,
        committed: &TreeLookup<'_>,
    ) -> Result<Option<(Vec<String>, Vec<String>)>> {
        let Some(layers) = &self.cow else { return Ok(None) };
        let upper = cow::upper(&self.path);
        if !upper.is_dir() {
            return Ok(Some(Default::default()));
        }
        let lower = TreeLookup::in_host(repo, layers.tree()?);
        worktree_files::changed_layered(repo, rules, &upper, &lower, committed).map(Some)
    }

    /// What a memo of the DIRTY count is valid for, besides the worktree's own
    /// files: the commit whose tree they are compared with (the agent's HEAD),
    /// the host view's index (which files are tracked, which are submodules)
    /// and the host's ignore files.
    fn memo_key(&self, compared: Option<Oid>, rules: &worktree_files::HostRules) -> super::dirty_memo::MemoKey {
        use sha1::Digest;
        let mut digest = sha1::Sha1::new();
        digest.update(compared.unwrap_or(Oid::ZERO_SHA1).as_bytes());
        digest.update(rules.digest());
        super::dirty_memo::digest_file(&mut digest, &self.admin_dir().join("index"));
        super::dirty_memo::MemoKey(digest.finalize().into())
    }

    /// The branch's tip, if the branch still exists.
    fn tip(&self, repo: &Repository) -> Option<Oid> {
        repo.find_branch(&self.branch, BranchType::Local).ok()?.get().target()
    }

    /// Commits `tip` reaches that no local branch but `except` does, and that are
    /// not behind `base`.
    fn commits_on_no_branch(&self, repo: &Repository, tip: Oid, except: Option<&str>) -> Result<Vec<Oid>> {
        let mut walk = repo.revwalk().map_err(ws_err)?;
        walk.push(tip).map_err(ws_err)?;
        if let Ok(base) = Oid::from_str(&self.base) {
            let _ = walk.hide(base);
        }
        for b in repo.branches(Some(BranchType::Local)).map_err(ws_err)? {
            let (b, _) = b.map_err(ws_err)?;
            if except.is_none() || b.name().ok().flatten() != except {
                if let Some(t) = b.get().target() {
                    walk.hide(t).map_err(ws_err)?;
                }
            }
        }
        walk.map(|id| id.map_err(ws_err)).collect()
    }

    /// What only this sandbox holds (see `AtStake`), reading everything and
    /// changing nothing: the host's branch as it is, the agent's repository
    /// checked as `sync` would check it.
    pub fn stake(&self) -> Result<AtStake> {
        let repo = self.open()?;
        let mut out = AtStake::default();
        if self.landed_covers()? {
            return Ok(out);
        }
        if let Some(tip) = self.tip(&repo) {
            for id in self.commits_on_no_branch(&repo, tip, Some(&self.branch))? {
                let commit = repo.find_commit(id).map_err(ws_err)?;
                out.commits.push(commit_line(commit.id(), commit.summary().ok().flatten().unwrap_or("")));
            }
        }
        if let Some((private, git, refs)) = self.private_refs()? {
            let (mut places, left_out) = places_in(&refs, None);
            if let Some(tip) = refs.branches.get(&self.branch) {
                places.insert(0, Place { slug: String::new(), source: format!("branch {}", self.branch), tip: *tip });
            }
            let staged = import::Staged::new(git.dir("objects").map_err(ws_err)?.as_ref(), &private.staging())?;
            let mut seen = std::collections::HashSet::new();
            for place in places {
                match staged.look(&repo, &[place.tip]) {
                    Ok(found) => out.unsynced.extend(
                        found
                            .commits
                            .iter()
                            .filter(|(id, _)| seen.insert(*id))
                            .map(|(id, s)| format!("{}: {}", place.source, commit_line(*id, s))),
                    ),
                    Err(e) => out.unsynced.push(format!("{}: unreadable ({e})", place.source)),
                }
            }
            if left_out > 0 {
                out.unsynced.push(format!("{left_out} more branches and stashes, not looked at"));
            }
        }
        out.files = self.dirty_files()?;
        Ok(out)
    }

    /// Commits on the branch since its base that no other branch contains.
    pub fn unique_commits(&self) -> Result<usize> {
        let repo = self.open()?;
        match self.tip(&repo) {
            Some(tip) => Ok(self.commits_on_no_branch(&repo, tip, Some(&self.branch))?.len()),
            None => Ok(0),
        }
    }

    /// Commits ahead of / behind the base (the base branch's current tip if there
    /// was one, else the base commit).
    pub fn ahead_behind(&self) -> Result<Option<(usize, usize)>> {
        self.ahead_behind_in(&self.open()?)
    }

    fn ahead_behind_in(&self, repo: &Repository) -> Result<Option<(usize, usize)>> {
        let Some(tip) = self.tip(repo) else {
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

    /// Keeps all of the agent's work reachable before anything is deleted. First
    /// a `sync`; then whatever the agent committed elsewhere in its repository (a
    /// detached HEAD, other branches, stashes) and no host branch holds, each as
    /// its own archive ref; last the sandbox's branch: a commit of the worktree's
    /// uncommitted files on top of its tip, or the tip itself if it holds commits
    /// found on no other branch. Returns the archives made, the branch's last.
    ///
    /// Whatever cannot be kept (commits the import refuses, a place whose archive
    /// ref cannot be written, files git cannot store) is listed as not archived,
    /// and the rest is still kept: the files of the worktree always are, so an
    /// agent cannot make `down` lose them by breaking its own repository.
    pub fn archive_work(&self, name: &SandboxName, timestamp: &str) -> Result<ArchiveOutcome> {
        let repo = self.open()?;
        let mut out = ArchiveOutcome::default();
        // The agent is gone: give the user back what it locked them out of.
        if let Some(dir) = &self.private {
            if let Ok(private) = Dir::open(dir) {
                super::untrusted::restore_permissions(&private).map_err(ws_err)?;
            }
        }
        let (_, synced) = self.sync_branch()?;
        self.archive_elsewhere(&repo, synced, name, timestamp, &mut out)?;
        // Files and commits a `merge` landed, still on a branch, need no archive.
        if !self.landed_covers()? {
            self.archive_branch(&repo, name, timestamp, &mut out)?;
        }
        Ok(out)
    }

    /// Archives the work in the agent's repository outside its branch (and its
    /// branch too, when the host's moved since the last sync).
    fn archive_elsewhere(
        &self,
        repo: &Repository,
        synced: BranchSync,
        name: &SandboxName,
        timestamp: &str,
        out: &mut ArchiveOutcome,
    ) -> Result<()> {
        let Some((private, git, refs)) = self.private_refs()? else { return Ok(()) };
        let (mut places, left_out) = places_in(&refs, Some(&self.branch));
        match synced {
            BranchSync::Done => {}
            BranchSync::Diverged(tip) => places.insert(
                0,
                Place { slug: "sandbox-branch".into(), source: format!("branch {} in the sandbox", self.branch), tip },
            ),
            BranchSync::Refused(why) => out
                .not_archived
                .push(NotArchived { source: format!("commits on branch {} since the last sync", self.branch), why }),
        }
        if left_out > 0 {
            out.not_archived.push(NotArchived {
                source: format!("{left_out} more branches and stashes"),
                why: format!("more than {MAX_PLACES} places in the agent's repository"),
            });
        }
        let staged = import::Staged::new(git.dir("objects").map_err(ws_err)?.as_ref(), &private.staging())?;
        for place in places {
            if let Err(e) = self.archive_place(repo, &staged, &place, name, timestamp, out) {
                out.not_archived.push(NotArchived { source: place.source, why: e.to_string() });
            }
        }
        Ok(())
    }

    /// Imports what `place` reaches and, if any of it is on no host branch,
    /// points an archive ref at it.
    fn archive_place(
        &self,
        repo: &Repository,
        staged: &import::Staged,
        place: &Place,
        name: &SandboxName,
        timestamp: &str,
        out: &mut ArchiveOutcome,
    ) -> Result<()> {
        staged.import(repo, &[place.tip])?;
        require_commit(repo, place.tip)?;
        let commits = self.commits_on_no_branch(repo, place.tip, None)?.len();
        if commits > 0 {
            let wanted = format!("{ARCHIVE_PREFIX}/{name}/{timestamp}-{}", place.slug);
            let refname = archive_ref(repo, &wanted, place.tip, name)?;
            out.archived.push(Archived {
                refname,
                commit: place.tip.to_string(),
                commits,
                dirty_files: Vec::new(),
                source: Some(place.source.clone()),
            });
        }
        Ok(())
    }

    /// Archives the sandbox's branch: the worktree's uncommitted files as a
    /// commit on its tip, or the tip if it holds commits no other branch has.
    fn archive_branch(
        &self,
        repo: &Repository,
        name: &SandboxName,
        timestamp: &str,
        out: &mut ArchiveOutcome,
    ) -> Result<()> {
        let tip = self.tip(repo);
        let unique = self.unique_commits()?;
        let (dirty, tree) = match self.archive_layers(repo, tip, out)? {
            Some(layered) => layered,
            None => self.archive_files(repo, tip, out)?,
        };
        if tree.is_none() && unique == 0 {
            return Ok(());
        }
        let target = match tree {
            Some(tree) => {
                let parent = tip.or_else(|| self.start_commit().ok());
                match archived_files(repo, name, tree, parent, &self.files_message(name))? {
                    Some(commit) => commit,
                    None => self.commit_files(repo, tree, parent, name)?,
                }
            }
            None => tip.ok_or_else(|| ws_err("branch vanished while archiving"))?,
        };
        let refname = archive_ref(repo, &format!("{ARCHIVE_PREFIX}/{name}/{timestamp}"), target, name)?;
        out.archived.push(Archived {
            refname,
            commit: target.to_string(),
            commits: unique,
            dirty_files: dirty,
            source: None,
        });
        Ok(())
    }

    /// The worktree's files that differ from the branch's tip, read (and
    /// taken over) in full, and their tree if any differ.
    fn archive_files(
        &self,
        repo: &Repository,
        tip: Option<Oid>,
        out: &mut ArchiveOutcome,
    ) -> Result<(Vec<String>, Option<Oid>)> {
        let files = match self.view()? {
            _ if self.cow.is_some() => {
                self.read_layers(repo, &worktree_files::HostRules::of(repo), Reading::TakeOver)?
            }
            Some(view) => {
                let index = view.index().map_err(ws_err)?;
                Some(worktree_files::read(&view, &self.path, Known::Index(index), Reading::TakeOver)?)
            }
            None => None,
        };
        Ok(match files {
            Some(files) => {
                let parent_tree =
                    tip.map(|t| repo.find_commit(t).and_then(|c| c.tree())).transpose().map_err(ws_err)?;
                let dirty = files.changed_since(repo, parent_tree.as_ref())?;
                let tree = match (&parent_tree, dirty.is_empty()) {
                    (_, true) => None,
                    (Some(parent), false) => Some(files.write_tree_keeping(repo, parent)?),
                    (None, false) => Some(files.write_tree(repo)?),
                };
                for (source, why) in files.skipped {
                    out.not_archived.push(NotArchived { source, why });
                }
                (dirty, tree)
            }
            None => (Vec::new(), None),
        })
    }

    /// `archive_files` for a copy-on-write workspace on a branch with a tip:
    /// the changes read from the layers and made a tree in O(changed files)
    /// (`LayeredChanges`); `None` for any other workspace.
    fn archive_layers(
        &self,
        repo: &Repository,
        tip: Option<Oid>,
        out: &mut ArchiveOutcome,
    ) -> Result<Option<(Vec<String>, Option<Oid>)>> {
        let (Some(layers), Some(tip)) = (&self.cow, tip) else { return Ok(None) };
        let upper = cow::upper(&self.path);
        if !upper.is_dir() {
            return Ok(Some((Vec::new(), None)));
        }
        let parent = repo.find_commit(tip).and_then(|c| c.tree()).map_err(ws_err)?;
        let (lower, committed) = (TreeLookup::in_host(repo, layers.tree()?), TreeLookup::in_host(repo, parent.id()));
        let rules = worktree_files::HostRules::of(repo);
        let mut changes =
            worktree_files::LayeredChanges::read(repo, &rules, &upper, &lower, &committed, Reading::TakeOver)?;
        let dirty = changes.changed();
        let tree = if dirty.is_empty() { None } else { Some(changes.write_tree(repo, &lower, &parent)?) };
        for (source, why) in changes.take_skipped() {
            out.not_archived.push(NotArchived { source, why });
        }
        Ok(Some((dirty, tree)))
    }

    /// A commit of `tree` (the worktree's files) as a child of `parent`, touching
    /// no branch, index or file.
    fn commit_files(&self, repo: &Repository, tree: Oid, parent: Option<Oid>, name: &SandboxName) -> Result<Oid> {
        let tree = repo.find_tree(tree).map_err(ws_err)?;
        let sig = repo.signature().or_else(|_| Signature::now("forage", "forage@localhost")).map_err(ws_err)?;
        let parent = parent.map(|p| repo.find_commit(p)).transpose().map_err(ws_err)?;
        let parents: Vec<&git2::Commit> = parent.iter().collect();
        repo.commit(None, &sig, &sig, &self.files_message(name), &tree, &parents).map_err(ws_err)
    }

    /// The message of `commit_files`' commits.
    fn files_message(&self, name: &SandboxName) -> String {
        format!("forage: uncommitted work of sandbox {name}\n\nArchived by forage-ctl from {}.\n", self.path.display())
    }
}

impl Workspace for GitWorkspace {
    fn mode(&self) -> Mode {
        Mode::GitWorktree
    }

    fn host_path(&self) -> &Path {
        &self.path
    }

    fn branch(&self) -> Option<&str> {
        Some(&self.branch)
    }

    fn repository_lock(&self) -> Option<&Path> {
        Some(&self.common_dir)
    }

    fn repository(&self) -> Option<&Path> {
        Some(&self.repo)
    }

    fn base(&self) -> Option<super::Base> {
        Some(super::Base { commits: vec![self.base.clone()], on: self.base_ref.clone() })
    }

    fn is_legacy(&self) -> bool {
        self.private.is_none()
    }

    fn mounts(&self, read_only: bool, guard: &Guard) -> Vec<Mount> {
        self.bind_mounts(read_only, guard)
    }

    fn check_host_paths(&self, guard: &Guard) -> Result<()> {
        match Repository::open(&self.common_dir) {
            Ok(host) => private::check_object_dirs(&host, guard),
            Err(_) => Ok(()),
        }
    }

    fn agent_env(&self) -> Vec<(String, String)> {
        identity_env(&self.repo)
    }

    fn parts(&self) -> &'static [Part] {
        &[Part::GitBranch, Part::GitWorktree, Part::PrivateRepo]
    }

    fn make(&self, part: Part) -> Result<()> {
        match part {
            Part::GitBranch => self.create_branch(),
            Part::GitWorktree => self.add_worktree(),
            Part::PrivateRepo => self.create_private(),
            Part::JjRepository => Ok(()),
        }
    }

    fn unmake(&self, part: Part, scope: &Scope) -> Result<()> {
        match part {
            Part::GitBranch if scope.keep_branch => Ok(()),
            Part::GitBranch => self.delete_branch(),
            Part::GitWorktree => self.remove_worktree(&scope.workspaces_dir),
            Part::PrivateRepo => self.remove_private(&scope.private_dir),
            Part::JjRepository => Ok(()),
        }
    }

    fn sync(&self, _inside: Option<Inside>) -> Result<Synced> {
        self.sync_to_host().map(Synced::Git)
    }

    fn at_stake(&self, _inside: Option<Inside>) -> Result<Option<AtStake>> {
        self.stake().map(Some)
    }

    fn archive(&self, name: &SandboxName, timestamp: &str, _inside: Option<Inside>) -> Result<ArchiveOutcome> {
        self.archive_work(name, timestamp)
    }

    fn status(&self) -> Result<Option<WorkspaceStatus>> {
        let (ahead, behind) = self.ahead_behind()?.unwrap_or((0, 0));
        let (dirty, not_archivable) = self.uncommitted()?;
        Ok(Some(WorkspaceStatus {
            branch: self.branch.clone(),
            base: self.base.clone(),
            base_ref: self.base_ref.clone(),
            ahead,
            behind,
            dirty,
            not_archivable,
        }))
    }

    fn refresh_view_of_host(&self) -> Result<()> {
        self.refresh_origin()
    }

    fn update_script(&self) -> Option<&'static str> {
        (!self.is_legacy()).then_some(UPDATE_SCRIPT)
    }

    fn review(&self) -> Option<&dyn super::review::Review> {
        (!self.is_legacy()).then_some(self as &dyn super::review::Review)
    }

    fn counts(&self, shared: &mut super::Counting) -> Option<super::WorkCounts> {
        self.list_counts(shared)
    }
}

/// `update` inside a git sandbox: merges the agent's view of the user's
/// branch `$1` into its branch, its uncommitted files stashed around the
/// merge and put back after (`--autostash`); exits 3 when files are left
/// conflicting (by the merge, or by putting the files back).
const UPDATE_SCRIPT: &str = r#"cd /workspace || exit 2
git merge --no-edit --autostash "refs/remotes/origin/$1"
code=$?
if [ -n "$(git diff --name-only --diff-filter=U)" ]; then exit 3; fi
exit $code"#;

/// Marks every submodule (gitlink) entry of the host view's index
/// `skip-worktree`, so that git on the host never looks into the submodule's
/// directory in the worktree: the agent can put a `.git` there, whose config
/// (`core.fsmonitor`) the user's `git status` would run. True if any was marked.
fn hide_submodules(index: &mut git2::Index) -> Result<bool> {
    const EXTENDED: u16 = 0x4000;
    const SKIP_WORKTREE: u16 = 1 << 14;
    let gitlinks: Vec<git2::IndexEntry> =
        index.iter().filter(|e| e.mode == 0o160000 && e.flags_extended & SKIP_WORKTREE == 0).collect();
    let any = !gitlinks.is_empty();
    for mut entry in gitlinks {
        entry.flags |= EXTENDED;
        entry.flags_extended |= SKIP_WORKTREE;
        index.add(&entry).map_err(ws_err)?;
    }
    Ok(any)
}

/// At most this many places (branches, stashes) of the agent's repository are
/// looked at or archived: the agent chooses how many there are.
const MAX_PLACES: usize = 256;

/// A place in the agent's repository where its work may be.
struct Place {
    /// What its archive ref is named after: `head`, `branch-NAME`, `stash-N`.
    slug: String,
    /// How `down` names it: "detached HEAD", "branch NAME", "stash@{N}".
    source: String,
    tip: Oid,
}

/// The detached HEAD, the branches but `except`, and the stashes in `refs`, at
/// most `MAX_PLACES`; and how many more there were.
fn places_in(refs: &PrivateRefs, except: Option<&str>) -> (Vec<Place>, usize) {
    let mut places = Vec::new();
    if let Head::Detached(id) = refs.head {
        places.push(Place { slug: "head".into(), source: "detached HEAD".into(), tip: id });
    }
    for (b, id) in refs.branches.iter().filter(|(b, _)| Some(b.as_str()) != except) {
        places.push(Place { slug: format!("branch-{}", ref_safe(b)), source: format!("branch {b}"), tip: *id });
    }
    for (i, id) in refs.stash.iter().enumerate() {
        places.push(Place { slug: format!("stash-{i}"), source: format!("stash@{{{i}}}"), tip: *id });
    }
    let left_out = places.len().saturating_sub(MAX_PLACES);
    places.truncate(MAX_PLACES);
    (places, left_out)
}

/// A name the agent chose, as one component of a ref name: no `/` (which would
/// nest refs, and a ref and a directory of one name cannot both be), and no `.`
/// (`..` and a `.lock` ending are not allowed in ref names).
fn ref_safe(name: &str) -> String {
    name.chars().map(|c| if c.is_ascii_alphanumeric() || matches!(c, '-' | '_') { c } else { '-' }).collect()
}

/// Creates the archive ref `wanted` (or `wanted-N` if that exists: two downs of
/// one name within a second) at `target`.
/// Points an archive ref of sandbox `name` at `target`: `wanted`, or
/// `wanted-N` if that is taken; or the archive ref of the sandbox that already
/// points there, so that a `down` that failed after archiving and is run
/// again makes no second archive of the same work.
fn archive_ref(repo: &Repository, wanted: &str, target: Oid, name: &SandboxName) -> Result<String> {
    if let Some((existing, _)) = archives_of(repo, name)?.into_iter().find(|(_, at)| *at == target) {
        return Ok(existing);
    }
    let mut refname = wanted.to_owned();
    let mut n = 1;
    while repo.find_reference(&refname).is_ok() {
        refname = format!("{wanted}-{n}");
        n += 1;
    }
    repo.reference(&refname, target, false, &format!("forage: archive of sandbox {name}"))
        .map_err(|e| ws_err(format!("writing {refname}: {e}")))?;
    Ok(refname)
}

/// The archive refs of sandbox `name`, with the commits they point at.
fn archives_of(repo: &Repository, name: &SandboxName) -> Result<Vec<(String, Oid)>> {
    let refs = repo.references_glob(&format!("{ARCHIVE_PREFIX}/{name}/*")).map_err(ws_err)?;
    let mut out = Vec::new();
    for r in refs {
        let r = r.map_err(ws_err)?;
        if let (Ok(refname), Some(target)) = (std::str::from_utf8(r.name_bytes()), r.target()) {
            out.push((refname.to_owned(), target));
        }
    }
    Ok(out)
}

/// A commit of the worktree's files `tree` on `parent`, with `message`, that
/// an archive ref of sandbox `name` already holds (a `down` that failed after
/// archiving them).
fn archived_files(
    repo: &Repository,
    name: &SandboxName,
    tree: Oid,
    parent: Option<Oid>,
    message: &str,
) -> Result<Option<Oid>> {
    let same = |commit: &git2::Commit<'_>| {
        commit.tree_id() == tree && commit.parent_ids().eq(parent) && commit.message_bytes() == message.as_bytes()
    };
    Ok(archives_of(repo, name)?.into_iter().filter_map(|(_, at)| repo.find_commit(at).ok()).find(same).map(|c| c.id()))
}

/// Refuses a ref target of the agent's that is a tree, blob or tag rather than
/// a commit: git would take it for a branch only to fail on it later.
fn require_commit(repo: &Repository, tip: Oid) -> Result<()> {
    let kind = repo.find_object(tip, None).map_err(ws_err)?.kind();
    match kind {
        Some(ObjectType::Commit) => Ok(()),
        other => {
            let kind = other.map_or("an unknown object".to_owned(), |k| format!("a {k}"));
            Err(ws_err(format!("the agent's ref points at {kind} ({tip}), not a commit")))
        }
    }
}

/// Commits `tip` reaches that `before` does not.
fn count_new(repo: &Repository, tip: Oid, before: Option<Oid>) -> Result<usize> {
    let mut walk = repo.revwalk().map_err(ws_err)?;
    walk.push(tip).map_err(ws_err)?;
    if let Some(b) = before {
        walk.hide(b).map_err(ws_err)?;
    }
    Ok(walk.count())
}

/// Creates `branch` at `commit`, the commit `down` recorded in the archive index
/// (not whatever the archive ref points to now).
pub fn restore_branch(common_dir: &Path, commit: &str, branch: &str) -> Result<()> {
    let repo = Repository::open(common_dir).map_err(|e| ws_err(format!("opening {}: {e}", common_dir.display())))?;
    let commit = Oid::from_str(commit).and_then(|id| repo.find_commit(id)).map_err(|_| {
        Error::not_found(format!("the archived commit {commit} is no longer in {}", common_dir.display()))
    })?;
    if repo.find_branch(branch, BranchType::Local).is_ok() {
        return Err(Error::conflict(format!(
            "branch {branch:?} already exists in {}; pass --branch with another name",
            common_dir.display()
        )));
    }
    repo.branch(branch, &commit, false).map_err(|e| ws_err(format!("creating branch {branch}: {e}")))?;
    Ok(())
}

/// Deletes archive ref `refname` (one of `refs/forage/archive/`) if it still
/// points at `commit`: true when deleted, false when it is gone already.
/// One that moved is someone else's now, and refused.
pub fn delete_archive_ref(common_dir: &Path, refname: &str, commit: &str) -> Result<bool> {
    if !refname.starts_with(&format!("{ARCHIVE_PREFIX}/")) {
        return Err(ws_err(format!("{refname} is not an archive ref of forage's; left alone")));
    }
    let repo = Repository::open(common_dir).map_err(|e| ws_err(format!("opening {}: {e}", common_dir.display())))?;
    let mut reference = match repo.find_reference(refname) {
        Ok(r) => r,
        Err(e) if e.code() == ErrorCode::NotFound => return Ok(false),
        Err(e) => return Err(ws_err(format!("reading {refname}: {e}"))),
    };
    if reference.target().map(|t| t.to_string()).as_deref() != Some(commit) {
        return Err(Error::conflict(format!("{refname} no longer points at the archived commit; left alone")));
    }
    reference.delete().map_err(|e| ws_err(format!("deleting {refname}: {e}")))?;
    Ok(true)
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
    /// Where in the agent's repository the work was, when it was not on the
    /// sandbox's branch: "detached HEAD", "branch NAME", "stash@{N}".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
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
        ("JJ_EMAIL".into(), email.clone()),
        // No automatic gc or maintenance inside: repacking the host's repository is
        // the user's business, not the agent's, and it would race other sandboxes.
        ("GIT_CONFIG_COUNT".into(), "4".into()),
        ("GIT_CONFIG_KEY_0".into(), "gc.auto".into()),
        ("GIT_CONFIG_VALUE_0".into(), "0".into()),
        ("GIT_CONFIG_KEY_1".into(), "maintenance.auto".into()),
        ("GIT_CONFIG_VALUE_1".into(), "false".into()),
        // The identity as config too: agents that read `git config user.name`
        // rather than committing through git (Aider) otherwise find none and write
        // a placeholder ("Your Name") into the agent's repository.
        ("GIT_CONFIG_KEY_2".into(), "user.name".into()),
        ("GIT_CONFIG_VALUE_2".into(), name),
        ("GIT_CONFIG_KEY_3".into(), "user.email".into()),
        ("GIT_CONFIG_VALUE_3".into(), email),
    ]
}
