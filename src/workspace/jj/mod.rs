//! `--jj REPO`: the agent works in a private jj repository of its own, and forage
//! alone brings its work to REPO, as bookmark `forage/<name>` (SPEC §3a).
//!
//! forage makes the private repository at `up`, before anything runs inside, by
//! running jj on the host in the new workspace directory: `jj git init` on a git
//! store forage prepared (it borrows REPO's objects through `alternates`, holds
//! the host's bookmarks as remote bookmarks `NAME@host`, and has the base as
//! HEAD, on which jj's init makes the first change; a merge base takes a `jj new`). Its `.jj` then
//! moves to FORAGE_HOME/private/<name>/jj, which is mounted over /workspace/.jj:
//! on the host, the workspace directory holds only the files, so no jj run there
//! can pick up the agent's repository.
//!
//! From then on forage never runs jj on the host against the private repository.
//! It runs jj *inside* (`state.rs`: the agent's config can only harm the agent) to
//! snapshot the working copy and list the agent's commits (or, when jj inside
//! cannot, reads them from the repository itself: `store`), imports them into
//! REPO's git store with the same verification as git mode, and has REPO's jj,
//! whose config the agent can no longer touch, take them in and move the bookmark
//! `forage/<name>` onto them without ever importing a move itself (`bookmarks`).
//! Change ids survive: jj writes them into the git commits it makes.

mod bookmarks;
mod ownership;
mod review;
pub mod state;
mod store;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use git2::{Oid, Repository, Signature};
use serde::{Deserialize, Serialize};

use super::git::{import, ArchiveOutcome, Archived, NotArchived};
use super::untrusted::{remove_created_dir, Dir};
use super::worktree_files::{self, Known, Reading};
use super::{AtStake, Inside, Mode, Part, Scope, Synced, Workspace, WorkspaceStatus};
use crate::error::{Error, Result};
use crate::host_paths::Guard;
use crate::names::SandboxName;
use crate::runtime::{Mount, WORKSPACE_TARGET};
pub use review::Divergent;
pub use state::AgentState;

/// FORAGE_HOME/private/<name>/initial-working-copy: the working copy's commit
/// id when `up` made the sandbox (a sandbox never synced is compared with it).
const INITIAL_WORKING_COPY: &str = "initial-working-copy";

/// Archive bookmarks: `forage/archive/<name>/<timestamp>`.
pub const ARCHIVE_PREFIX: &str = "forage/archive";
/// A sandbox's further work heads: `forage-heads/<name>/<n>` (n from 2).
const HEADS_PREFIX: &str = "forage-heads";
/// The most work heads of a sandbox's that get bookmarks (and so are synced
/// and archived): each is a bookmark in the user's repository. The working
/// copy's comes first, then the newest; `sync` and `down` name how many more
/// there were.
pub const MAX_HEADS: usize = 32;
/// The remote the agent sees the host's bookmarks under.
const HOST_REMOTE: &str = "host";
/// Where the private jj repository's git store lies, under its `.jj`.
const STORE_GIT: &str = "repo/store/git";

fn ws_err(e: impl std::fmt::Display) -> Error {
    Error::workspace(e.to_string())
}

/// `update` inside a jj sandbox: has jj take in the host's bookmarks as
/// they are now, then rebases the agent's changes (the working copy's
/// branch) onto `$1@host`; exits 3 when a change of the agent's is left
/// conflicted (jj records conflicts in the changes).
const UPDATE_SCRIPT: &str = r#"cd /workspace || exit 2
jj git import --quiet >/dev/null 2>&1
target="remote_bookmarks(exact:"$(printf '%s' "$1" | sed 's/[\"]/\&/g')", remote=exact:"host")"
jj rebase -b @ -d "$target" || exit $?
if [ -n "$(jj log --no-graph -r "conflicts() & ($target)..@" -T '"x"')" ]; then exit 3; fi"#;

/// Runs jj with output meant for parsing; returns stdout, or jj's own error.
fn jj(cwd: Option<&Path>, args: &[&str]) -> Result<String> {
    let mut cmd = Command::new("jj");
    cmd.args(["--no-pager", "--color=never"]).args(args);
    if let Some(dir) = cwd {
        cmd.current_dir(dir);
    }
    let out = cmd.output().map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => Error::workspace(
            "jj is not installed (no `jj` on PATH); install it (`cargo install jj-cli --locked`, or your package manager) or use --git-worktree",
        ),
        _ => ws_err(format!("running jj: {e}")),
    })?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        return Err(ws_err(format!("`jj {}` failed: {}", args.join(" "), stderr.trim())));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs jj in the user's repository `repo`: without touching their working copy
/// (forage is not the user, and the user may be editing), and with jj's import
/// neither abandoning nor rewriting anything (see `ownership`).
fn jj_on_host(repo: &str, args: &[&str]) -> Result<String> {
    let mut all = vec!["-R", repo, "--ignore-working-copy", "--config", "git.abandon-unreachable-commits=false"];
    all.extend_from_slice(args);
    jj(None, &all)
}

/// A jj sandbox as its record remembers it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JjWorkspace {
    /// The repository's root (the directory holding `.jj/`).
    pub repo: PathBuf,
    /// `<repo>/.jj/repo`, resolved.
    pub repo_dir: PathBuf,
    /// The repository's git store (colocated `.git`, or `.jj/repo/store/git`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git_dir: Option<PathBuf>,
    /// The workspace, under FORAGE_HOME/workspaces.
    pub path: PathBuf,
    /// `forage/<name>`: the agent's work as a bookmark of the repository.
    #[serde(default)]
    pub bookmark: String,
    /// Records of sandboxes made before jj sandboxes had a private repository:
    /// the jj workspace `forage-<name>` of the repository itself.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub workspace: String,
    /// The commits the agent's first change sits on.
    pub base: Vec<String>,
    /// The bookmark the base was on when the sandbox was made: where `merge`
    /// lands the work by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_bookmark: Option<String>,
    /// FORAGE_HOME/private/<name>. `None` in those older records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private: Option<PathBuf>,
    /// The repository's bookmarks as `up` read them a moment before making the
    /// private repository, so that `create` need not run jj again for them.
    #[serde(skip)]
    pub bookmarks_seen: Option<BTreeMap<String, Oid>>,
    /// Set when `restore --up` made the sandbox on archived work (its `base`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restored: Option<RestoredWork>,
}

/// The archived work a restored jj sandbox starts on. Its first change sits
/// on the archive, so jj inside counts only what the agent does from there
/// (and the archived commits, its previous life's, never get the new
/// sandbox's bookmark or count as its own: `ownership`); but its work is
/// reviewed, counted and landed from where the archived sandbox started.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RestoredWork {
    /// The archived sandbox's base commits.
    pub base: Vec<String>,
    /// The changes the archive holds (as `down` counted them).
    pub changes: usize,
}

/// Validated input for a new jj sandbox; nothing is created yet.
#[derive(Debug, Clone)]
pub struct JjRequest {
    pub workspace: JjWorkspace,
}

/// The nearest directory at or above `start` that holds `.jj/`.
fn jj_root(start: &Path) -> Option<PathBuf> {
    start.ancestors().find(|d| d.join(".jj").is_dir()).map(Path::to_path_buf)
}

impl JjRequest {
    pub fn validate(
        raw: &Path,
        base: Option<&str>,
        name: &SandboxName,
        path: PathBuf,
        private: PathBuf,
    ) -> Result<Self> {
        let shown = raw.display();
        let start = raw.canonicalize().map_err(|_| {
            ws_err(format!("repository path {shown:?} does not exist; pass the path of a jj repository"))
        })?;
        super::ensure_readable(&start)?;
        let root = jj_root(&start).ok_or_else(|| {
            ws_err(format!("{shown:?} is not inside a jj repository; run `jj git init` there first, or use --git-worktree / --workspace"))
        })?;
        if root.to_str().is_none() {
            return Err(ws_err(format!("the repository path {shown:?} is not UTF-8, which jj's command line needs; move the repository to a UTF-8 path")));
        }
        if name.as_str() == "archive" {
            return Err(Error::usage(
                "a jj sandbox cannot be named \"archive\": its bookmark forage/archive would clash with the archive bookmarks forage/archive/…; pick another name",
            ));
        }
        let repo_dir = resolve_repo_dir(&root)?;
        let git_dir = git_store(&repo_dir)?;
        let bookmark = name.bookmark();
        let found = base_and_bookmarks(&root, base)?;
        if found.taken.contains(&bookmark) {
            return Err(Error::conflict(format!(
                "{} already has a bookmark {bookmark}, made by a sandbox of this name in another FORAGE_HOME or left over; `jj -R {:?} log -r {bookmark}` shows it: delete it once nothing on it is needed, or pick another sandbox name",
                root.display(),
                root
            )));
        }
        if found.base.is_empty() {
            return Err(ws_err(format!("--base {:?} names no commit in {}", base.unwrap_or("@-"), root.display())));
        }
        super::ensure_workspace_dir_free(&path, name)?;
        super::ensure_workspace_dir_free(&private, name)?;
        Ok(JjRequest {
            workspace: JjWorkspace {
                repo: root,
                repo_dir,
                git_dir: Some(git_dir),
                path,
                bookmark,
                workspace: String::new(),
                base_bookmark: bookmark_at(&found.bookmarks, &found.base),
                base: found.base,
                private: Some(private),
                bookmarks_seen: Some(found.bookmarks),
                restored: None,
            },
        })
    }

    /// The same request for `restore --up` on an archive of `changes`
    /// changes, whose sandbox started at `base` (unknown for an older
    /// forage's archive: the archive is then the base).
    pub fn restored(mut self, base: Option<&super::Base>, changes: usize) -> Self {
        if let Some(base) = base {
            let ws = &mut self.workspace;
            ws.restored = Some(RestoredWork { base: base.commits.clone(), changes });
            ws.base_bookmark = base.on.clone().or(ws.base_bookmark.take());
        }
        self
    }
}

/// `<root>/.jj/repo` is the repository itself, or (in a secondary workspace) a file
/// that points at it.
fn resolve_repo_dir(root: &Path) -> Result<PathBuf> {
    let link = root.join(".jj/repo");
    if link.is_dir() {
        return link.canonicalize().map_err(ws_err);
    }
    let text = std::fs::read_to_string(&link).map_err(|e| ws_err(format!("reading {}: {e}", link.display())))?;
    root.join(".jj").join(text.trim()).canonicalize().map_err(ws_err)
}

/// The git store behind a jj repository (`store/git_target`, a file of the user's
/// own repository, which no agent can reach).
fn git_store(repo_dir: &Path) -> Result<PathBuf> {
    let target_file = repo_dir.join("store/git_target");
    let target = std::fs::read_to_string(&target_file).map_err(|_| {
        ws_err(format!(
            "{} is not backed by git (no {}); forage needs a git-backed jj repository (`jj git init`)",
            repo_dir.display(),
            target_file.display()
        ))
    })?;
    repo_dir
        .join("store")
        .join(target.trim())
        .canonicalize()
        .map_err(|e| ws_err(format!("the git store of {}: {e}", repo_dir.display())))
}

/// The bookmark of the user's that points at the (single) base: `main`,
/// `master` or `trunk` if one does, else the only one.
fn bookmark_at(bookmarks: &BTreeMap<String, Oid>, base: &[String]) -> Option<String> {
    let [base] = base else { return None };
    let at: Vec<&String> = bookmarks
        .iter()
        .filter(|(name, id)| id.to_string() == *base && !name.starts_with("forage"))
        .map(|(name, _)| name)
        .collect();
    let usual = at.iter().find(|b| ["main", "master", "trunk"].contains(&b.as_str()));
    match (usual, at.as_slice()) {
        (Some(b), _) => Some((*b).clone()),
        (None, [only]) => Some((*only).clone()),
        _ => None,
    }
}

/// The repository's local bookmarks that point at one commit, by name.
fn host_bookmarks(root: &Path) -> Result<BTreeMap<String, Oid>> {
    let root = root.to_str().ok_or_else(|| ws_err("the repository path is not UTF-8"))?;
    let template = r#"if(!remote && normal_target, name ++ " " ++ normal_target.commit_id() ++ "\n")"#;
    let out = jj_on_host(root, &["bookmark", "list", "-T", template])?;
    Ok(out
        .lines()
        .filter_map(|l| l.split_once(' '))
        .filter_map(|(n, id)| Some((n.to_owned(), Oid::from_str(id).ok()?)))
        .collect())
}

/// What `up` reads of the repository, in one jj run (each costs ~30 ms).
struct BaseAndBookmarks {
    /// The commits of the base revset, newest first.
    base: Vec<String>,
    /// Local bookmarks that point at one commit, by name.
    bookmarks: BTreeMap<String, Oid>,
    /// Every local bookmark's name, conflicted ones included.
    taken: HashSet<String>,
}

/// The commits of `base` (default `@-`) and the repository's local bookmarks.
fn base_and_bookmarks(root: &Path, base: Option<&str>) -> Result<BaseAndBookmarks> {
    let root_str = root.to_str().ok_or_else(|| ws_err("the repository path is not UTF-8"))?;
    let revset = base.unwrap_or("@-");
    let quoted = revset.replace('\\', "\\\\").replace('"', "\\\"");
    let template = format!(
        r#"if(self.contained_in("{quoted}"), "base " ++ commit_id ++ "\n") ++ local_bookmarks.map(|b| if(b.conflict(), "conflicted ", "bookmark ") ++ b.name() ++ " " ++ commit_id ++ "\n").join("")"#
    );
    let query = format!("({revset}) | bookmarks()");
    // The first jj call of `up`, so that "jj is not installed" is said plainly.
    let out = jj_on_host(root_str, &["log", "--no-graph", "-r", &query, "-T", &template]).map_err(|e| match base {
        Some(b) => ws_err(format!("--base {b:?} names no commit in {}: {e}", root.display())),
        None => e,
    })?;
    let mut found = BaseAndBookmarks { base: Vec::new(), bookmarks: BTreeMap::new(), taken: HashSet::new() };
    for line in out.lines() {
        let mut words = line.split(' ');
        match (words.next(), words.next(), words.next(), words.next()) {
            (Some("base"), Some(id), None, None) => found.base.push(id.to_owned()),
            (Some("bookmark"), Some(name), Some(id), None) => {
                found.taken.insert(name.to_owned());
                if let Ok(id) = Oid::from_str(id) {
                    found.bookmarks.insert(name.to_owned(), id);
                }
            }
            (Some("conflicted"), Some(name), Some(_), None) => {
                found.taken.insert(name.to_owned());
            }
            _ => {}
        }
    }
    Ok(found)
}

impl JjWorkspace {
    /// The repository's path for jj's command line (`up` refused any other).
    fn repo_str(&self) -> Result<&str> {
        self.repo.to_str().ok_or_else(|| ws_err(format!("the repository path {:?} is not UTF-8", self.repo)))
    }

    /// Made before jj sandboxes had a private repository (see `archive`).
    pub fn is_legacy(&self) -> bool {
        self.private.is_none()
    }

    fn private_jj(&self) -> Option<PathBuf> {
        self.private.as_ref().map(|p| p.join("jj"))
    }

    fn host_refs(&self) -> Option<PathBuf> {
        self.private.as_ref().map(|p| p.join("host-refs"))
    }

    /// FORAGE_HOME/private/<name>/no-git: a file mounted read-only over
    /// /workspace/.git, so that the agent cannot plant a git repository (and its
    /// config, which git would run) at the top of the workspace, where on the
    /// host a user's `git status` would find it.
    fn no_git(&self) -> Option<PathBuf> {
        self.private.as_ref().map(|p| p.join("no-git"))
    }

    fn git_dir(&self) -> Result<&Path> {
        self.git_dir.as_deref().ok_or_else(|| ws_err("this jj sandbox has no recorded git store"))
    }

    fn open_host(&self) -> Result<Repository> {
        let dir = self.git_dir()?;
        Repository::open(dir).map_err(|e| ws_err(format!("opening {}: {e}", dir.display())))
    }

    /// Makes the private repository, in the new workspace directory (nothing runs
    /// inside yet), then moves its `.jj` to FORAGE_HOME/private/<name>/jj.
    ///
    /// Its git store is prepared first (the host's objects as alternates, the
    /// base as tags, the host's bookmarks as `refs/remotes/host/*`) so that
    /// `jj git init --git-repo` imports them in the same run; the store is then
    /// moved inside `.jj` where `jj git init --no-colocate` would have put it, so
    /// that it is found at the same relative place inside the container.
    pub fn create(&self) -> Result<()> {
        let (Some(private), Some(private_jj), Some(host_refs)) = (&self.private, self.private_jj(), self.host_refs())
        else {
            return Ok(());
        };
        std::fs::create_dir_all(self.path.parent().expect("a workspace has a parent")).map_err(ws_err)?;
        std::fs::create_dir(&self.path).map_err(|e| ws_err(format!("creating {}: {e}", self.path.display())))?;
        let ws = self.path.to_str().ok_or_else(|| ws_err("the workspace path is not UTF-8"))?;
        let view = match &self.bookmarks_seen {
            Some(seen) => self.view_of(seen.clone()),
            None => self.host_view()?,
        };
        let staged = private.join("store.git");
        self.prepare_store(&staged, &view)?;
        let staged_str = staged.to_str().ok_or_else(|| ws_err("the FORAGE_HOME path is not UTF-8"))?;
        jj(None, &["git", "init", "--git-repo", staged_str, ws])?;
        let store = self.path.join(".jj/repo/store");
        std::fs::rename(&staged, store.join("git")).map_err(ws_err)?;
        std::fs::write(store.join("git_target"), "git").map_err(ws_err)?;
        // jj's init checked out a first change on the store's HEAD, the base, if
        // there is one base and it has files; a merge base (or a jj that did not)
        // takes a `jj new`.
        let checked_out = self.base.len() == 1
            && std::fs::read_dir(&self.path).map_err(ws_err)?.flatten().any(|e| e.file_name() != ".jj");
        if !checked_out {
            let mut new = vec!["-R", ws, "new"];
            new.extend(self.base.iter().map(String::as_str));
            jj(None, &new)?;
        }
        if let Some(no_git) = self.no_git() {
            std::fs::write(no_git, "forage: a jj sandbox has no git repository here\n").map_err(ws_err)?;
        }
        std::fs::rename(self.path.join(".jj"), &private_jj).map_err(ws_err)?;
        // An empty directory to mount the repository on; on the host, nothing.
        std::fs::create_dir(self.path.join(".jj")).map_err(ws_err)?;
        // The working copy as made, before any agent ran: what `list` tells
        // work recorded before the first sync from.
        let made = Dir::open(&private_jj).ok().and_then(|d| store::read(&d).ok()).and_then(|f| f.working_copy);
        if let Some(wc) = made {
            std::fs::write(private.join(INITIAL_WORKING_COPY), wc.to_string()).map_err(ws_err)?;
        }
        super::git::private::write_ref_dir(&host_refs, &view)
    }

    /// A bare git repository borrowing the host's objects, with the base as tags
    /// `forage-base[-N]` (and HEAD, detached, when it is one commit) and `view`
    /// as the remote `host`'s branches.
    fn prepare_store(&self, dir: &Path, view: &BTreeMap<String, Oid>) -> Result<()> {
        Repository::init_bare(dir).map_err(|e| ws_err(format!("making {}: {e}", dir.display())))?;
        let host = self.open_host()?;
        let objects = host.path().join("objects").canonicalize().map_err(ws_err)?;
        for sub in ["objects/info", "refs/tags"] {
            std::fs::create_dir_all(dir.join(sub)).map_err(ws_err)?;
        }
        std::fs::write(dir.join("objects/info/alternates"), format!("{}\n", objects.display())).map_err(ws_err)?;
        for (i, base) in self.base.iter().enumerate() {
            let tag = if i == 0 { "forage-base".to_owned() } else { format!("forage-base-{}", i + 1) };
            std::fs::write(dir.join("refs/tags").join(tag), format!("{base}\n")).map_err(ws_err)?;
        }
        if let [base] = self.base.as_slice() {
            std::fs::write(dir.join("HEAD"), format!("{base}\n")).map_err(ws_err)?;
        }
        super::git::private::write_ref_dir(&dir.join("refs/remotes").join(HOST_REMOTE), view)
    }

    /// The host's bookmarks as the agent sees them (`NAME@host`): all but the
    /// sandbox's own, and only names git can store as refs.
    fn host_view(&self) -> Result<BTreeMap<String, Oid>> {
        Ok(self.view_of(host_bookmarks(&self.repo)?))
    }

    fn view_of(&self, bookmarks: BTreeMap<String, Oid>) -> BTreeMap<String, Oid> {
        let mine = |b: &str| b == self.bookmark || b.starts_with(&format!("{HEADS_PREFIX}/{}/", self.bookmark_name()));
        bookmarks
            .into_iter()
            .filter(|(b, _)| !mine(b) && git2::Reference::is_valid_name(&format!("refs/remotes/{HOST_REMOTE}/{b}")))
            .collect()
    }

    /// The sandbox name, from `forage/<name>`.
    fn bookmark_name(&self) -> &str {
        self.bookmark.strip_prefix("forage/").unwrap_or(&self.bookmark)
    }

    /// Refreshes the agent's view of the host's bookmarks (read-only inside).
    pub fn refresh_host_view(&self) -> Result<()> {
        match self.host_refs() {
            Some(dir) if dir.is_dir() => super::git::private::write_ref_dir(&dir, &self.host_view()?),
            _ => Ok(()),
        }
    }

    /// The workspace's files at /workspace, the private repository at
    /// /workspace/.jj, the host's bookmarks read-only inside it, and the host's
    /// objects read-only at their own path.
    pub fn bind_mounts(&self, read_only: bool, guard: &Guard) -> Vec<Mount> {
        let mut mounts =
            vec![Mount { source: self.path.clone(), target: WORKSPACE_TARGET.into(), read_only, overlay: None }];
        let (Some(private_jj), Some(host_refs), Ok(host)) = (self.private_jj(), self.host_refs(), self.open_host())
        else {
            return mounts;
        };
        let inside = format!("{WORKSPACE_TARGET}/.jj");
        mounts.push(Mount { source: private_jj, target: inside.clone(), read_only, overlay: None });
        if let Some(no_git) = self.no_git().filter(|p| p.is_file()) {
            mounts.push(Mount {
                source: no_git,
                target: format!("{WORKSPACE_TARGET}/.git"),
                read_only: true,
                overlay: None,
            });
        }
        mounts.push(Mount {
            source: host_refs,
            target: format!("{inside}/{STORE_GIT}/refs/remotes/{HOST_REMOTE}"),
            read_only: true,
            overlay: None,
        });
        for dir in super::git::private::mountable_object_dirs(&host, guard) {
            mounts.push(Mount { target: dir.display().to_string(), source: dir, read_only: true, overlay: None });
        }
        mounts
    }

    /// The script `state::AgentState` parses, to be run inside (in /workspace);
    /// `import_host_view` also has jj inside take in the host's bookmarks.
    pub fn state_command(&self, import_host_view: bool) -> Vec<String> {
        let mut hidden: Vec<String> =
            vec![format!("remote_bookmarks(remote=exact:\"{HOST_REMOTE}\")"), "root()".into()];
        hidden.extend(self.base.iter().cloned());
        vec!["sh".into(), "-c".into(), state::state_script(&hidden.join(" | "), import_host_view)]
    }

    /// Brings the agent's work to the repository: imports its first
    /// `MAX_HEADS` heads and its working copy (every object verified), points
    /// `forage/<name>` at the first head and `forage-heads/<name>/<n>` at the
    /// others (`bookmarks`). Records what it brought, for `status` while the
    /// sandbox is stopped.
    pub fn bring_to_host(&self, state: &AgentState) -> Result<JjSync> {
        let host = self.open_host()?;
        let owned_file = self.owned_file()?;
        let mut owned = ownership::Owned::read(&owned_file);
        let mut heads = state.heads();
        let left_out = heads.len().saturating_sub(MAX_HEADS);
        heads.truncate(MAX_HEADS);
        let mut tips = heads.clone();
        tips.push(state.working_copy());
        let imported = self.import(&host, &tips, &owned)?;
        owned.add(&owned_file, imported.commits.iter().map(|(id, _)| *id))?;
        // Only the sandbox's own commits get its bookmarks: jj inside may name
        // any commit of the repository's.
        let (heads, foreign): (Vec<Oid>, Vec<Oid>) = heads.into_iter().partition(|h| owned.contains(h));
        let mut wanted: BTreeMap<String, Oid> = BTreeMap::new();
        for (i, head) in heads.iter().enumerate() {
            let name = match i {
                0 => self.bookmark.clone(),
                n => format!("{HEADS_PREFIX}/{}/{}", self.bookmark_name(), n + 1),
            };
            wanted.insert(name, *head);
        }
        self.point_bookmarks(&host, &wanted, &owned, false)?;
        let agents: Vec<Oid> = state.commits.iter().map(|c| c.id).collect();
        let divergent = self.divergent(&host, &agents).unwrap_or_else(|e| {
            tracing::warn!("looking for landed changes the agent edited again: {e}");
            Vec::new()
        });
        let sync = JjSync {
            bookmark: self.bookmark.clone(),
            heads: heads.iter().map(Oid::to_string).collect(),
            changes: state.work_count(),
            working_copy: state.working_copy().to_string(),
            since: state.since,
            not_the_agents: foreign.iter().map(Oid::to_string).collect(),
            heads_left_out: left_out,
            jj_failed: None,
            divergent,
        };
        if let Some(private) = &self.private {
            let json = serde_json::to_vec(&sync).map_err(ws_err)?;
            std::fs::write(private.join("synced.json"), json).map_err(ws_err)?;
        }
        Ok(sync)
    }

    /// What jj inside said, or, if it could not say (`why`), the agent's
    /// commits as its repository keeps them (`store`), with `why` kept for
    /// the report.
    fn state_or_store(
        &self,
        said: std::result::Result<AgentState, String>,
    ) -> std::result::Result<(AgentState, Option<String>), String> {
        let why = match said {
            Ok(state) => return Ok((state, None)),
            Err(why) => why,
        };
        match self.state_from_store() {
            Ok(state) => Ok((state, Some(why))),
            Err(e) => Err(format!("{why}; and {e}")),
        }
    }

    /// The agent's commits read from its repository without jj (`store`),
    /// imported (every object verified) and described as jj inside would: its
    /// own commits reachable from what the repository keeps, newest first, each
    /// work unless empty and undescribed. The working copy is the one its
    /// operation log names, or else the base; its files are then compared
    /// whole (`since` the epoch).
    fn state_from_store(&self) -> Result<AgentState> {
        let private_jj = self.private_jj().ok_or_else(|| ws_err("no private repository"))?;
        let found = store::read(&Dir::open(&private_jj).map_err(ws_err)?)?;
        let host = self.open_host()?;
        let owned_file = self.owned_file()?;
        let mut owned = ownership::Owned::read(&owned_file);
        let working_copy = found.working_copy.unwrap_or(Oid::from_str(&self.base[0]).map_err(ws_err)?);
        let mut tips = found.tips.clone();
        tips.push(working_copy);
        let imported = self
            .import(&host, &tips, &owned)
            .map_err(|e| ws_err(format!("the commits named by {}: {e}", found.source)))?;
        owned.add(&owned_file, imported.commits.iter().map(|(id, _)| *id))?;
        Ok(state::from_commits(&host, &tips, working_copy, |id| owned.contains(id), found.all_versions))
    }

    /// FORAGE_HOME/private/<name>/owned (see `ownership`).
    fn owned_file(&self) -> Result<PathBuf> {
        self.private.as_ref().map(|p| p.join("owned")).ok_or_else(|| ws_err("no private repository"))
    }

    /// What the last `bring_to_host` brought, if any.
    /// Why the counts of the last sync are stale, when they are: the agent's
    /// jj has recorded another working-copy commit since (read from its
    /// operation log without jj, bounded as `store` reads it). Edits that no
    /// jj command has snapshotted yet are not seen, as jj itself does not see them.
    fn recorded_since_sync(&self) -> Option<String> {
        let synced = match self.last_sync() {
            Some(sync) => sync.working_copy,
            None => std::fs::read_to_string(self.private.as_ref()?.join(INITIAL_WORKING_COPY)).ok()?,
        };
        let found = store::read(&Dir::open(&self.private_jj()?).ok()?).ok()?;
        (found.working_copy?.to_string() != synced)
            .then(|| "the agent's jj recorded work since up or the last sync; `forage-ctl sync` counts it".to_owned())
    }

    pub fn last_sync(&self) -> Option<JjSync> {
        let bytes = std::fs::read(self.private.as_ref()?.join("synced.json")).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// Imports what `tips` reach, every object verified, and no commit whose
    /// change id is one of the repository's own (checked before anything is
    /// written, so that a refused commit never reaches the repository).
    fn import(&self, host: &Repository, tips: &[Oid], owned: &ownership::Owned) -> Result<import::Imported> {
        let private = self.private.as_ref().ok_or_else(|| ws_err("no private repository"))?;
        let objects = Dir::open(private)
            .and_then(|d| d.dir_path(format!("jj/{STORE_GIT}/objects")))
            .map_err(|e| ws_err(format!("reading the agent's repository: {e}")))?;
        let staging = private.join("import");
        let found = import::look(host, objects.as_ref(), &staging, tips)?;
        ownership::check_change_ids(self.repo_str()?, &found.change_ids, owned)?;
        let imported = import::import(host, objects.as_ref(), &staging, tips)?;
        for tip in tips {
            host.find_commit(*tip).map_err(|_| ws_err(format!("the agent's commit {tip} is not a commit")))?;
        }
        Ok(imported)
    }

    /// Files of the workspace that changed after jj's snapshot `since` (or that
    /// jj did not track although no ignore rule says so), as a commit on top of
    /// `working_copy`; `None` when the snapshot has them all.
    fn files_after_snapshot(
        &self,
        host: &Repository,
        working_copy: Oid,
        since: (i64, i64),
        name: &SandboxName,
    ) -> Result<Option<LateFiles>> {
        let parent = host.find_commit(working_copy).map_err(ws_err)?;
        let tree = parent.tree().map_err(ws_err)?;
        let files = worktree_files::tree_files(host, &tree)?;
        // The repository's view of the workspace, for its ignore rules; in memory only.
        let view = Repository::open(self.git_dir()?).map_err(ws_err)?;
        view.set_workdir(&self.path, false).map_err(ws_err)?;
        let read = worktree_files::read(&view, &self.path, Known::Snapshot { files, since }, Reading::TakeOver)?;
        let changed = read.changed_since(host, Some(&tree))?;
        if changed.is_empty() {
            return Ok(None);
        }
        let tree = host.find_tree(read.write_tree(host)?).map_err(ws_err)?;
        let sig = Signature::now("forage", "forage@localhost").map_err(ws_err)?;
        let message = format!("forage: files of sandbox {name} changed after jj's last snapshot\n");
        let commit = host.commit(None, &sig, &sig, &message, &tree, &[&parent]).map_err(ws_err)?;
        Ok(Some(LateFiles { commit, changed, skipped: read.skipped }))
    }

    /// Keeps the agent's work reachable before anything is deleted: brings what
    /// jj inside said (`state`) to the repository, adds a commit of the files
    /// changed since that snapshot, and makes bookmarks `forage/archive/<name>/<ts>`
    /// (and `…-head-N` for further heads); then removes the sandbox's own
    /// bookmarks. Without a state (jj could not run inside: `why`), the files are
    /// archived on top of what the last sync brought, or of the base.
    pub fn archive_work(
        &self,
        name: &SandboxName,
        timestamp: &str,
        state: std::result::Result<AgentState, String>,
    ) -> Result<ArchiveOutcome> {
        let mut out = ArchiveOutcome::default();
        if self.is_legacy() {
            out.not_archived.push(self.legacy_left_alone());
            return Ok(out);
        }
        let host = self.open_host()?;
        let ToArchive { heads, working_copy, since, work } = self.work_to_archive(state, &mut out);
        let working_copy = Oid::from_str(&working_copy).map_err(ws_err)?;
        // Work a bookmark of the user's holds (a `merge` landed it) needs no archive.
        let landed = self.landed_covers(Some(working_copy))?;
        // (jj is asked for the user's bookmarks only when there is work to check.)
        let tips: Vec<Oid> = if heads.is_empty() && work.is_empty() {
            Vec::new()
        } else {
            self.user_bookmarks()?.into_values().collect()
        };
        // The changes counted as `stake` (`down --dry-run`) counts them: the
        // agent's work that no bookmark of the user's holds.
        let changes = match landed {
            true => 0,
            false => work.len() - reached_from(&host, &work, &tips)?.len(),
        };
        let mut heads: Vec<Oid> = heads
            .iter()
            .filter_map(|h| Oid::from_str(h).ok())
            .filter(|h| !landed && !super::review::held_by(&host, *h, &tips))
            .collect();
        let late = self.files_after_snapshot(&host, working_copy, since, name)?;
        let mut dirty_files = Vec::new();
        if let Some(LateFiles { commit, changed, skipped }) = late {
            // The files sit on the working copy, so they carry the work under it.
            heads.retain(|h| !host.graph_descendant_of(working_copy, *h).unwrap_or(false) && *h != working_copy);
            heads.insert(0, commit);
            dirty_files = changed;
            for (source, why) in skipped {
                out.not_archived.push(NotArchived { source, why });
            }
        }
        let archives = self.archive_bookmarks(&host, name, timestamp, &heads)?;
        // The archive bookmarks (fresh refs) now keep the work; the sandbox's
        // own go, and the repository's jj takes both in (`bookmarks`).
        let owned = ownership::Owned::read(&self.owned_file()?);
        self.point_bookmarks(&host, &BTreeMap::new(), &owned, !archives.is_empty())?;
        // The first head's archive last, as the one `restore` takes by default.
        for (i, (refname, commit)) in archives.into_iter().enumerate().rev() {
            let (commits, dirty) = if i == 0 { (changes, std::mem::take(&mut dirty_files)) } else { (0, Vec::new()) };
            let source = (i > 0).then(|| format!("head {}", i + 1));
            out.archived.push(Archived { refname, commit: commit.to_string(), commits, dirty_files: dirty, source });
        }
        Ok(out)
    }

    /// The agent's work as `archive_work` takes it: what jj inside said
    /// (`state`), brought to the repository; or, when that failed (said in
    /// `out`), what the last sync brought, as `stake` takes it without jj.
    fn work_to_archive(&self, state: std::result::Result<AgentState, String>, out: &mut ArchiveOutcome) -> ToArchive {
        let last = self.last_sync();
        let brought = self.state_or_store(state).and_then(|(state, jj_failed)| {
            let work: Vec<Oid> = state.commits.iter().filter(|c| c.work).map(|c| c.id).collect();
            self.bring_to_host(&state).map(|sync| (sync, jj_failed, work)).map_err(|e| e.to_string())
        });
        match brought {
            Ok((sync, jj_failed, work)) => {
                if let Some(why) = jj_failed {
                    out.not_archived.push(read_without_jj(why));
                }
                if sync.heads_left_out > 0 {
                    out.not_archived.push(heads_left_out(sync.heads_left_out));
                }
                out.divergent = sync.divergent;
                ToArchive { heads: sync.heads, working_copy: sync.working_copy, since: sync.since, work }
            }
            Err(why) => {
                out.not_archived.push(NotArchived { source: "the agent's jj changes since the last sync".into(), why });
                match last {
                    Some(s) => {
                        let work = s.heads.iter().filter_map(|h| Oid::from_str(h).ok()).collect();
                        ToArchive { heads: s.heads, working_copy: s.working_copy, since: s.since, work }
                    }
                    None => ToArchive {
                        heads: Vec::new(),
                        working_copy: self.base[0].clone(),
                        since: (0, 0),
                        work: Vec::new(),
                    },
                }
            }
        }
    }

    /// What `down` says of an older forage's jj workspace, which it leaves alone.
    fn legacy_left_alone(&self) -> NotArchived {
        NotArchived {
            source: format!("jj workspace {} of {}", self.workspace, self.repo.display()),
            why: format!(
                "made by an older forage that shared the repository with the agent, so forage does not run jj there; {} is left as it is: look at it, then `jj -R {:?} workspace forget {}` and remove the directory",
                self.path.display(),
                self.repo,
                self.workspace
            ),
        }
    }

    /// Bookmarks `forage/archive/<name>/<timestamp>` (and `…-head-N` for further
    /// heads) on `heads`, as git refs of the repository's store.
    fn archive_bookmarks(
        &self,
        host: &Repository,
        name: &SandboxName,
        timestamp: &str,
        heads: &[Oid],
    ) -> Result<Vec<(String, Oid)>> {
        let mut archives = Vec::new();
        if heads.is_empty() {
            return Ok(archives);
        }
        // Names jj has too (a repository not colocated may not have exported
        // them): an archive is always a fresh ref, which any jj imports harmlessly.
        let pattern = format!("glob:{ARCHIVE_PREFIX}/{name}/*");
        let listed = jj_on_host(self.repo_str()?, &["bookmark", "list", "-T", "name ++ \"\\n\"", &pattern])?;
        let taken: HashSet<&str> = listed.lines().collect();
        for (i, head) in heads.iter().enumerate() {
            let stem = match i {
                0 => format!("{ARCHIVE_PREFIX}/{name}/{timestamp}"),
                n => format!("{ARCHIVE_PREFIX}/{name}/{timestamp}-head-{}", n + 1),
            };
            let mut bookmark = stem.clone();
            let mut n = 1;
            while taken.contains(bookmark.as_str()) || host.find_reference(&format!("refs/heads/{bookmark}")).is_ok() {
                bookmark = format!("{stem}-{n}");
                n += 1;
            }
            host.reference(&format!("refs/heads/{bookmark}"), *head, false, "forage: archive")
                .map_err(|e| ws_err(format!("writing bookmark {bookmark}: {e}")))?;
            archives.push((bookmark, *head));
        }
        Ok(archives)
    }

    /// Deletes the workspace directory (only under `workspaces_dir`). A workspace
    /// of an older forage's is left alone (see `archive`).
    pub fn remove_workspace(&self, workspaces_dir: &Path) -> Result<()> {
        if self.is_legacy() {
            return Ok(());
        }
        remove_created_dir(&self.path, workspaces_dir).map_err(ws_err)
    }

    pub fn remove_private(&self, private_root: &Path) -> Result<()> {
        match &self.private {
            Some(dir) => remove_created_dir(dir, private_root).map_err(ws_err),
            None => Ok(()),
        }
    }

    /// What only this sandbox holds (see `AtStake`), changing nothing: the
    /// agent's changes, as jj inside just said (`state`) or, without, as the last
    /// sync brought them.
    pub fn stake(&self, state: Option<&AgentState>) -> Result<AtStake> {
        let mut out = AtStake::default();
        let Some(private) = &self.private else { return Ok(out) };
        let host = self.open_host()?;
        let work: Vec<Oid> = match state {
            Some(s) => s.commits.iter().filter(|c| c.work).map(|c| c.id).collect(),
            None => self
                .last_sync()
                .map(|s| s.heads)
                .unwrap_or_default()
                .iter()
                .filter_map(|h| Oid::from_str(h).ok())
                .collect(),
        };
        // Work a bookmark of the user's holds (a `merge` landed it) is not at stake.
        if self.landed_covers(state.map(AgentState::working_copy))? {
            return Ok(out);
        }
        let tips: Vec<Oid> = if work.is_empty() { Vec::new() } else { self.user_bookmarks()?.into_values().collect() };
        let held = reached_from(&host, &work, &tips)?;
        let work: Vec<Oid> = work.into_iter().filter(|id| !held.contains(id)).collect();
        let objects = Dir::open(private)
            .and_then(|d| d.dir_path(format!("jj/{STORE_GIT}/objects")))
            .map_err(|e| ws_err(format!("reading the agent's repository: {e}")))?;
        let unsynced = import::look(&host, objects.as_ref(), &private.join("import"), &work)?;
        let summaries: HashMap<Oid, String> = unsynced.commits.into_iter().collect();
        for id in work {
            let summary = match summaries.get(&id) {
                Some(s) => s.clone(),
                None => host
                    .find_commit(id)
                    .map(|c| c.summary().ok().flatten().unwrap_or("").to_owned())
                    .unwrap_or_default(),
            };
            out.commits.push(super::commit_line(id, if summary.is_empty() { "(no description)" } else { &summary }));
        }
        Ok(out)
    }

    /// Where the work is reviewed from: the base, or a restored sandbox's
    /// archived sandbox's base.
    pub fn review_base(&self) -> &[String] {
        match &self.restored {
            Some(r) if !r.base.is_empty() => &r.base,
            _ => &self.base,
        }
    }

    /// The agent's changes as of the last sync, and those of the archive a
    /// restored sandbox started on.
    fn changes(&self) -> usize {
        self.last_sync().map_or(0, |s| s.changes) + self.restored.as_ref().map_or(0, |r| r.changes)
    }

    /// The files the working-copy commit changes, from what the last sync brought.
    pub fn changed_files(&self) -> Result<Vec<String>> {
        let Some(sync) = self.last_sync() else { return Ok(Vec::new()) };
        let host = self.open_host()?;
        let wc = Oid::from_str(&sync.working_copy).and_then(|id| host.find_commit(id)).map_err(ws_err)?;
        let parent_tree = wc.parents().next().map(|p| p.tree()).transpose().map_err(ws_err)?;
        let tree = wc.tree().map_err(ws_err)?;
        let diff = host.diff_tree_to_tree(parent_tree.as_ref(), Some(&tree), None).map_err(ws_err)?;
        Ok(diff
            .deltas()
            .filter_map(|d| d.new_file().path().or_else(|| d.old_file().path()).map(|p| p.display().to_string()))
            .collect())
    }
}

impl JjWorkspace {
    /// What jj inside said (`Inside`), parsed; or why there is nothing to read.
    fn agent_state(inside: Option<Inside>) -> std::result::Result<AgentState, String> {
        let inside = inside.ok_or_else(|| "jj was not run in the sandbox".to_owned())?;
        AgentState::parse(&inside.output?, inside.since)
    }
}

impl Workspace for JjWorkspace {
    fn mode(&self) -> Mode {
        Mode::Jj
    }

    fn host_path(&self) -> &Path {
        &self.path
    }

    fn branch(&self) -> Option<&str> {
        Some(if self.is_legacy() { &self.workspace } else { &self.bookmark })
    }

    fn repository_lock(&self) -> Option<&Path> {
        Some(&self.repo_dir)
    }

    fn repository(&self) -> Option<&Path> {
        Some(&self.repo)
    }

    fn base(&self) -> Option<super::Base> {
        Some(super::Base { commits: self.review_base().to_vec(), on: self.base_bookmark.clone() })
    }

    fn is_legacy(&self) -> bool {
        JjWorkspace::is_legacy(self)
    }

    fn mounts(&self, read_only: bool, guard: &Guard) -> Vec<Mount> {
        self.bind_mounts(read_only, guard)
    }

    fn check_host_paths(&self, guard: &Guard) -> Result<()> {
        match self.git_dir.as_ref().map(Repository::open) {
            Some(Ok(host)) => super::git::private::check_object_dirs(&host, guard),
            _ => Ok(()),
        }
    }

    fn agent_env(&self) -> Vec<(String, String)> {
        super::git::identity_env(&self.repo)
    }

    fn parts(&self) -> &'static [Part] {
        &[Part::PrivateRepo, Part::JjRepository]
    }

    fn make(&self, part: Part) -> Result<()> {
        match part {
            Part::JjRepository => self.create(),
            _ => Ok(()),
        }
    }

    fn unmake(&self, part: Part, scope: &Scope) -> Result<()> {
        match part {
            Part::JjRepository => {
                // Bookmarks an archive has not taken over (`down --discard`, a
                // rollback) go first, with the work only they kept.
                self.drop_bookmarks()?;
                self.remove_workspace(&scope.workspaces_dir)
            }
            Part::PrivateRepo => self.remove_private(&scope.private_dir),
            _ => Ok(()),
        }
    }

    fn inside_command(&self, for_sync: bool) -> Option<Vec<String>> {
        (!self.is_legacy()).then(|| self.state_command(for_sync))
    }

    fn sync(&self, inside: Option<Inside>) -> Result<Synced> {
        if self.is_legacy() {
            return Err(Error::usage(
                "the sandbox was made by an older forage, whose jj sandboxes shared the repository with the agent: there is nothing to sync",
            ));
        }
        let (state, jj_failed) = self.state_or_store(Self::agent_state(inside)).map_err(Error::workspace)?;
        let sync = self.bring_to_host(&state)?;
        Ok(Synced::Jj(JjSync { jj_failed, ..sync }))
    }

    fn at_stake(&self, inside: Option<Inside>) -> Result<Option<AtStake>> {
        if self.is_legacy() {
            return Ok(None);
        }
        self.stake(Self::agent_state(inside).ok().as_ref()).map(Some)
    }

    fn archive(&self, name: &SandboxName, timestamp: &str, inside: Option<Inside>) -> Result<ArchiveOutcome> {
        self.archive_work(name, timestamp, Self::agent_state(inside))
    }

    fn status(&self) -> Result<Option<WorkspaceStatus>> {
        Ok(Some(WorkspaceStatus {
            branch: Workspace::branch(self).unwrap_or_default().to_owned(),
            base: self.review_base().join(","),
            base_ref: None,
            ahead: self.changes(),
            behind: 0,
            dirty: self.changed_files()?,
            not_archivable: Vec::new(),
        }))
    }

    fn refresh_view_of_host(&self) -> Result<()> {
        self.refresh_host_view()
    }

    fn update_script(&self) -> Option<&'static str> {
        (!self.is_legacy()).then_some(UPDATE_SCRIPT)
    }

    fn review(&self) -> Option<&dyn super::review::Review> {
        (!self.is_legacy()).then_some(self as &dyn super::review::Review)
    }

    fn counts(&self, _shared: &mut super::Counting) -> Option<super::WorkCounts> {
        if self.is_legacy() {
            return None;
        }
        if let Some(why) = self.recorded_since_sync() {
            return Some(super::WorkCounts {
                ahead: super::Count::Unknown(why.clone()),
                dirty: super::Count::Unknown(why),
            });
        }
        Some(super::WorkCounts {
            ahead: super::Count::Exact(self.changes()),
            dirty: super::Count::Exact(self.changed_files().ok()?.len()),
        })
    }
}

/// Which of `commits` one of `tips` (the user's bookmarks) is or descends from,
/// in one walk down from the tips that stops at the commits `commits` sit on:
/// linear, where asking for each commit (`review::held_by`) is quadratic in a
/// long chain. (One of `commits` under a commit it sits on, which only a user
/// building on the agent's work and the agent building on that makes, counts as
/// not reached: said to be at stake, never lost.)
fn reached_from(host: &Repository, commits: &[Oid], tips: &[Oid]) -> Result<HashSet<Oid>> {
    let set: HashSet<Oid> = commits.iter().copied().collect();
    if set.is_empty() || tips.is_empty() {
        return Ok(HashSet::new());
    }
    let mut walk = host.revwalk().map_err(ws_err)?;
    for tip in tips {
        walk.push(*tip).map_err(ws_err)?;
    }
    for commit in commits.iter().filter_map(|id| host.find_commit(*id).ok()) {
        for parent in commit.parent_ids().filter(|p| !set.contains(p)) {
            walk.hide(parent).map_err(ws_err)?;
        }
    }
    Ok(walk.filter_map(std::result::Result::ok).filter(|id| set.contains(id)).collect())
}

/// What `down` says when jj inside could not run (`why`) and the agent's
/// commits were read from its repository instead (`state_from_store`).
fn read_without_jj(why: String) -> NotArchived {
    NotArchived {
        source: "jj's snapshot in the sandbox".into(),
        why: format!("{why}; the agent's commits were read from its repository instead, and its files as they are now"),
    }
}

/// What `down` says of work heads beyond `MAX_HEADS`.
fn heads_left_out(n: usize) -> NotArchived {
    NotArchived {
        source: format!("{n} further work head{} of the agent's", if n == 1 { "" } else { "s" }),
        why: format!(
            "forage keeps at most {MAX_HEADS} heads of a sandbox's (the working copy's first, then the newest)"
        ),
    }
}

/// The agent's work `down` archives (see `work_to_archive`).
struct ToArchive {
    /// Its heads (commit ids), the working copy's first.
    heads: Vec<String>,
    working_copy: String,
    /// When jj snapshotted the working copy.
    since: (i64, i64),
    /// Its changes that are work (not empty and undescribed).
    work: Vec<Oid>,
}

/// The files of a workspace that jj's snapshot had not seen, as a commit.
struct LateFiles {
    commit: Oid,
    /// The paths that differ from the snapshot.
    changed: Vec<String>,
    /// Paths not kept, and why.
    skipped: Vec<(String, String)>,
}

/// What a jj sync brought to the repository.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct JjSync {
    pub bookmark: String,
    /// The agent's work heads, the working copy's first (commit ids).
    pub heads: Vec<String>,
    /// Changes of the agent's that are not empty and undescribed.
    pub changes: usize,
    pub working_copy: String,
    /// When the snapshot was taken (seconds and nanoseconds since the epoch).
    pub since: (i64, i64),
    /// Commits jj inside named as the agent's that are the repository's own
    /// (its history, another sandbox's work): given no bookmark.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_the_agents: Vec<String>,
    /// Work heads beyond `MAX_HEADS`, which got no bookmark.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub heads_left_out: usize,
    /// Why jj inside could not say what the agent's commits were, when they
    /// were read from its repository instead (`state_from_store`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jj_failed: Option<String>,
    /// Changes `merge` landed that the agent edited again since: divergent
    /// in the user's jj.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub divergent: Vec<Divergent>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// Deletes archive bookmark `name` (one of `forage/archive/`) if it still
/// points at `commit`: true when deleted, false when it is gone already. One
/// that moved is someone else's now, and refused.
pub fn delete_archive_bookmark(repo: &Path, name: &str, commit: &str) -> Result<bool> {
    if !name.starts_with(&format!("{ARCHIVE_PREFIX}/")) {
        return Err(ws_err(format!("{name} is not an archive bookmark of forage's; left alone")));
    }
    let repo = repo.to_str().ok_or_else(|| ws_err("the repository path is not UTF-8"))?;
    let template = r#"if(!remote, name ++ " " ++ if(normal_target, normal_target.commit_id(), "conflicted") ++ "\n")"#;
    let listed = jj_on_host(repo, &["bookmark", "list", "-T", template])?;
    let Some(target) = listed.lines().find_map(|l| l.strip_prefix(&format!("{name} "))) else { return Ok(false) };
    if target != commit {
        return Err(Error::conflict(format!("bookmark {name} no longer points at the archived commit; left alone")));
    }
    jj_on_host(repo, &["bookmark", "delete", name]).map(|_| true)
}

/// Creates bookmark `name` at `commit` (restore without --up).
pub fn restore_bookmark(repo: &Path, commit: &str, name: &str) -> Result<()> {
    let repo = repo.to_str().ok_or_else(|| ws_err("the repository path is not UTF-8"))?;
    let existing = jj_on_host(repo, &["bookmark", "list", "-T", "name ++ \"\\n\""])?;
    if existing.lines().any(|b| b == name) {
        return Err(Error::conflict(format!(
            "bookmark {name:?} already exists in {repo}; pass --branch with another name"
        )));
    }
    jj_on_host(repo, &["bookmark", "create", name, "-r", commit]).map(|_| ())
}
