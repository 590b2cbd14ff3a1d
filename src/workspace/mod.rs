//! Workspaces: what the agent sees at /workspace. One module per mode; each knows
//! how to validate its input, what to mount, and how to tear itself down.

pub mod conflicts;
pub mod cow;
pub mod direct;
pub mod dirty_memo;
pub mod git;
pub mod jj;
pub mod reach;
pub mod review;
pub(crate) mod tree_lookup;
pub mod untrusted;
mod worktree_files;

use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::runtime::Mount;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    Direct,
    GitWorktree,
    Jj,
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::Direct => "direct",
            Mode::GitWorktree => "git-worktree",
            Mode::Jj => "jj",
        })
    }
}

/// One part of a workspace that `up` makes, journaled (as a `Step`) before it
/// is made, and undone in reverse by a rollback, `down` and `gc`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// git: the branch `forage-<name>` in the user's repository.
    GitBranch,
    /// git: the worktree of the user's repository on that branch.
    GitWorktree,
    /// FORAGE_HOME/private/<name>: the agent's private repository (made by the
    /// engine, filled by the workspace).
    PrivateRepo,
    /// jj: the agent's private jj repository and the workspace's files.
    JjRepository,
}

/// Where undoing may delete: FORAGE_HOME/workspaces, FORAGE_HOME/private and
/// FORAGE_HOME/secrets (and a worktree's admin entry in its repository),
/// nowhere else.
#[derive(Debug, Clone)]
pub struct Scope {
    pub workspaces_dir: PathBuf,
    pub private_dir: PathBuf,
    /// FORAGE_HOME/secrets: forage's copies of secret files, a directory per sandbox.
    pub secrets_dir: PathBuf,
    /// FORAGE_HOME/agent-state: what each sandbox was given of its agent's state.
    pub agent_state_dir: PathBuf,
    /// `down --keep-branch`: leave the branch where it is.
    pub keep_branch: bool,
}

/// What a command run inside the sandbox's container printed, for the
/// workspace to read (jj's snapshot and list of the agent's work), or why it
/// could not run; and when it started.
#[derive(Debug, Clone)]
pub struct Inside {
    pub output: std::result::Result<String, String>,
    pub since: (i64, i64),
}

/// What a sync brought over.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum Synced {
    Git(git::SyncReport),
    Jj(jj::JjSync),
}

/// Where a sandbox's work started: the commit (jj: commits) it is reviewed
/// against, and the branch (jj: bookmark) it lands on. An archive keeps it,
/// so that `restore --up` makes a sandbox whose `diff`, `log`, `merge` and
/// `list` show the restored work, not an empty change from the archive's tip.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Base {
    pub commits: Vec<String>,
    /// git: the full ref (`refs/heads/main`); jj: the bookmark's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on: Option<String>,
}

/// What `status` tells of a workspace with history.
#[derive(Debug, Clone, Serialize)]
pub struct WorkspaceStatus {
    /// The git branch or jj bookmark.
    pub branch: String,
    /// The base commit (jj: the base commits, comma-separated).
    pub base: String,
    pub base_ref: Option<String>,
    /// Commits on the branch not on the base (jj: the agent's changes).
    pub ahead: usize,
    /// Commits on the base (its current tip) not on the branch.
    pub behind: usize,
    /// Uncommitted files: staged, unstaged, untracked and not ignored.
    pub dirty: Vec<String>,
    /// git: paths of the worktree `down` would leave out of its archive, each
    /// with why (a FIFO, a file over 1 GiB, a name git refuses).
    pub not_archivable: Vec<String>,
}

/// A sandbox's workspace, whatever its mode: the sandbox engine orders the
/// steps, and each mode says what they mean for it. Every method may block (git2,
/// jj, the file system); the engine calls them on its blocking pool.
pub trait Workspace: Send + Sync {
    fn mode(&self) -> Mode;
    /// The host directory the agent works in.
    fn host_path(&self) -> &Path;
    /// The git branch, or the jj bookmark.
    fn branch(&self) -> Option<&str> {
        None
    }
    /// The repository whose lock serialises changes to it; `None` when the
    /// workspace shares nothing.
    fn repository_lock(&self) -> Option<&Path> {
        None
    }
    /// The user's repository (its top directory), as archives name it.
    fn repository(&self) -> Option<&Path> {
        None
    }
    /// Where the work started, as archives keep it (`None`: no history).
    fn base(&self) -> Option<Base> {
        None
    }
    /// Made by an older forage, which shared the repository with the agent.
    fn is_legacy(&self) -> bool {
        false
    }
    /// The bind mounts that make the workspace appear at /workspace.
    /// `guard` drops any borrowed object directory no agent may see.
    fn mounts(&self, read_only: bool, guard: &crate::host_paths::Guard) -> Vec<Mount>;
    /// Refuses a workspace whose host paths no agent may see.
    fn check_host_paths(&self, _guard: &crate::host_paths::Guard) -> Result<()> {
        Ok(())
    }
    /// Environment the agent's tools need (who commits).
    fn agent_env(&self) -> Vec<(String, String)> {
        Vec::new()
    }
    /// What `up` makes, in order.
    fn parts(&self) -> &'static [Part] {
        &[]
    }
    fn make(&self, part: Part) -> Result<()>;
    /// Undoes `part`, whether or not it was made.
    fn unmake(&self, part: Part, scope: &Scope) -> Result<()>;
    /// A command to run inside the container before the agent's work is read
    /// (jj: a snapshot); `for_sync` also has it take in the host's view.
    fn inside_command(&self, _for_sync: bool) -> Option<Vec<String>> {
        None
    }
    /// Brings the agent's work to the user's repository.
    fn sync(&self, inside: Option<Inside>) -> Result<Synced>;
    /// What only the sandbox holds (`None`: nothing is ever lost, a direct workspace).
    fn at_stake(&self, inside: Option<Inside>) -> Result<Option<AtStake>>;
    /// Keeps the agent's work reachable before anything is deleted.
    fn archive(
        &self,
        name: &crate::names::SandboxName,
        timestamp: &str,
        inside: Option<Inside>,
    ) -> Result<git::ArchiveOutcome>;
    fn status(&self) -> Result<Option<WorkspaceStatus>>;
    /// Lets the agent see the user's branches or bookmarks as they are now.
    fn refresh_view_of_host(&self) -> Result<()> {
        Ok(())
    }
    /// `update`: the script that brings the user's branch (jj: bookmark)
    /// `$1` into the agent's work, run inside as the agent would (git: a
    /// merge of the agent's view of it, `origin/$1`; jj: a rebase onto
    /// `$1@host`). It exits 3 when conflicts are left for the agent to
    /// resolve. `None`: the workspace has no history to update.
    fn update_script(&self) -> Option<&'static str> {
        None
    }
    /// What the review commands read and land (`None`: a direct workspace,
    /// which has no history).
    fn review(&self) -> Option<&dyn review::Review> {
        None
    }
    /// `list`'s counts, cheaply and without a sync (`None`: no history, or
    /// unreadable now). `shared` carries what sandboxes on one repository
    /// have in common (the opened repository, its ignore rules) from one
    /// call to the next.
    fn counts(&self, _shared: &mut Counting) -> Option<WorkCounts> {
        None
    }
}

/// What `counts` calls on one thread share: each host repository opened
/// once, with its own ignore rules (`info/exclude`, `core.excludesFile`)
/// read once. Kept for one `list`, never longer, so nothing in it goes stale.
#[derive(Default)]
pub struct Counting {
    repos: std::collections::HashMap<PathBuf, std::rc::Rc<(git2::Repository, worktree_files::HostRules)>>,
    /// Refs already resolved, by git directory and name (sandboxes of one
    /// repository mostly share their base branch).
    refs: std::collections::HashMap<(PathBuf, String), Option<git2::Oid>>,
    /// Commits ahead, by (tip, upstream).
    ahead: std::collections::HashMap<(git2::Oid, git2::Oid), usize>,
    /// Memos made since the last `take_memos`, each with the private
    /// directory it belongs in.
    memos: Vec<(PathBuf, dirty_memo::Memo)>,
}

impl Counting {
    /// What ref `name` of `repo` (whose git directory is `common_dir`) points at.
    fn ref_target(&mut self, common_dir: &Path, repo: &git2::Repository, name: &str) -> Option<git2::Oid> {
        *self.refs.entry((common_dir.to_path_buf(), name.to_owned())).or_insert_with(|| repo.refname_to_id(name).ok())
    }

    /// How many commits `tip` has that `upstream` has not.
    fn ahead(&mut self, repo: &git2::Repository, tip: git2::Oid, upstream: git2::Oid) -> Option<usize> {
        if let Some(n) = self.ahead.get(&(tip, upstream)) {
            return Some(*n);
        }
        let (n, _) = repo.graph_ahead_behind(tip, upstream).ok()?;
        self.ahead.insert((tip, upstream), n);
        Some(n)
    }

    fn remember(&mut self, private: &Path, memo: dirty_memo::Memo) {
        self.memos.push((private.to_path_buf(), memo));
    }

    /// The memos the last counts made, for the caller to save (under the
    /// sandbox's lock: see `query::counts_of`).
    pub fn take_memos(&mut self) -> Vec<(PathBuf, dirty_memo::Memo)> {
        std::mem::take(&mut self.memos)
    }

    /// The repository whose git directory is `common_dir`, opened once.
    pub fn repository(
        &mut self,
        common_dir: &Path,
    ) -> Result<std::rc::Rc<(git2::Repository, worktree_files::HostRules)>> {
        if let Some(r) = self.repos.get(common_dir) {
            return Ok(r.clone());
        }
        let repo = git2::Repository::open(common_dir)
            .map_err(|e| crate::error::Error::workspace(format!("opening {}: {e}", common_dir.display())))?;
        let rules = worktree_files::HostRules::of(&repo);
        let shared = std::rc::Rc::new((repo, rules));
        self.repos.insert(common_dir.to_path_buf(), shared.clone());
        Ok(shared)
    }
}

/// How much work a sandbox holds, as `list` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkCounts {
    /// git: the agent's commits since the base, synced or not (see
    /// `git::peek`); jj: the agent's changes the last sync brought.
    pub ahead: Count,
    /// git: files of the worktree that differ from the agent's HEAD, now;
    /// jj: files of the working-copy change, as of the last sync.
    pub dirty: Count,
}

/// One of `list`'s counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Count {
    Exact(usize),
    /// At least this many: counting stopped there (`N+`).
    AtLeast(usize),
    /// Not known without a sync, and why (`?`).
    Unknown(String),
}

/// What a record remembers of a sandbox's workspace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "kebab-case")]
pub enum WorkspaceRecord {
    /// A host directory mounted as is; forage never modifies or deletes it.
    Direct(direct::DirectWorkspace),
    /// A worktree of a git repository on a branch forage created.
    GitWorktree(git::GitWorkspace),
    /// A jj workspace forage created.
    Jj(jj::JjWorkspace),
}

impl WorkspaceRecord {
    /// The mode's implementation.
    pub fn get(&self) -> &dyn Workspace {
        match self {
            WorkspaceRecord::Direct(d) => d,
            WorkspaceRecord::GitWorktree(g) => g,
            WorkspaceRecord::Jj(j) => j,
        }
    }

    pub fn mode(&self) -> Mode {
        self.get().mode()
    }

    pub fn host_path(&self) -> &Path {
        self.get().host_path()
    }

    pub fn branch(&self) -> Option<&str> {
        self.get().branch()
    }

    pub fn mounts(&self, read_only: bool, guard: &crate::host_paths::Guard) -> Vec<Mount> {
        self.get().mounts(read_only, guard)
    }

    pub fn check_host_paths(&self, guard: &crate::host_paths::Guard) -> Result<()> {
        self.get().check_host_paths(guard)
    }

    /// Two workspaces of one repository, which see each other's work.
    pub fn same_repository(&self, other: &WorkspaceRecord) -> bool {
        self.mode() == other.mode()
            && self.get().repository_lock().is_some()
            && self.get().repository_lock() == other.get().repository_lock()
    }
}

/// `--repo REPO`: the nearest enclosing repository decides, jj if it holds `.jj/`
/// (colocated jj+git repositories included), else git.
pub fn detect_mode(repo: &Path) -> Mode {
    let start = repo.canonicalize().unwrap_or_else(|_| repo.to_path_buf());
    for dir in start.ancestors() {
        if dir.join(".jj").is_dir() {
            return Mode::Jj;
        }
        if dir.join(".git").exists() {
            return Mode::GitWorktree;
        }
    }
    Mode::GitWorktree
}

/// Fails clearly when the user may not read `repo` (rather than calling it "not a
/// repository", which is what git and jj would conclude).
pub fn ensure_readable(repo: &Path) -> crate::error::Result<()> {
    match std::fs::read_dir(repo) {
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => Err(crate::error::Error::workspace(format!(
            "repository path {:?} cannot be read ({e}); check its permissions",
            repo.display().to_string()
        ))),
        _ => Ok(()),
    }
}

/// Fails if the directory forage would create for sandbox `name`'s workspace is
/// already there: a sandbox of that name that was never cleaned up.
pub fn ensure_workspace_dir_free(path: &Path, name: &crate::names::SandboxName) -> crate::error::Result<()> {
    if path.exists() {
        return Err(crate::error::Error::conflict(format!(
            "{} already exists; a sandbox of this name was not cleaned up",
            path.display()
        ))
        .hint_run("remove what is left with {command}", ["down", name.as_str()]));
    }
    Ok(())
}

/// What only a sandbox holds, found nowhere else: what `down` archives, and what
/// `down --discard` throws away. Each entry names a commit ("id summary") or a file.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct AtStake {
    /// git: commits on the sandbox's branch that no other branch holds; jj: the
    /// agent's changes that are not empty and undescribed.
    pub commits: Vec<String>,
    /// git: commits in the agent's repository that the host does not have yet,
    /// with where they are ("branch forage-x: 1a2b3c4d5e6f fix the parser").
    pub unsynced: Vec<String>,
    /// git: files of the worktree that differ from the sandbox's branch on the
    /// host (its uncommitted work, and what unsynced commits changed).
    pub files: Vec<String>,
}

impl AtStake {
    pub fn is_empty(&self) -> bool {
        self.commits.is_empty() && self.unsynced.is_empty() && self.files.is_empty()
    }

    /// "2 commits (1a2b3c4d5e6f fix the parser; …), 1 commit not synced (…), 3 files (a, b, c)";
    /// in a jj sandbox's (`mode`), changes.
    pub fn describe(&self, mode: Mode) -> String {
        let list = |items: &[String], one: &str, many: &str| {
            let shown: Vec<&str> = items.iter().take(10).map(String::as_str).collect();
            let more = if items.len() > 10 { format!("; and {} more", items.len() - 10) } else { String::new() };
            format!("{} {} ({}{more})", items.len(), if items.len() == 1 { one } else { many }, shown.join("; "))
        };
        let mut parts = Vec::new();
        if !self.commits.is_empty() {
            parts.push(match mode {
                Mode::Jj => list(&self.commits, "change", "changes"),
                _ => list(&self.commits, "commit", "commits"),
            });
        }
        if !self.unsynced.is_empty() {
            parts.push(list(&self.unsynced, "commit not synced", "commits not synced"));
        }
        if !self.files.is_empty() {
            parts.push(list(&self.files, "file not on the branch", "files not on the branch"));
        }
        if parts.is_empty() {
            "nothing".into()
        } else {
            parts.join(", ")
        }
    }
}

/// `1a2b3c4d5e6f summary`.
pub(crate) fn commit_line(id: git2::Oid, summary: &str) -> String {
    format!("{} {summary}", &id.to_string()[..12])
}

/// A workspace the user asked for, validated but not yet created.
#[derive(Debug, Clone)]
pub enum WorkspaceRequest {
    Direct(direct::DirectWorkspace),
    GitWorktree(git::GitRequest),
    Jj(jj::JjRequest),
}
