//! `--jj REPO`: a new jj workspace `forage-<name>` of REPO under
//! FORAGE_HOME/workspaces/<name>, through the jj CLI (its library is not a stable
//! API). jj runs inside the container against the host's repository.
//!
//! jj ≥ 0.39 links a workspace to its repository by a *relative* path in
//! `.jj/repo`; inside the container that path is resolved from /workspace/.jj, so
//! the repository is mounted wherever it resolves to (and a colocated git
//! directory wherever the store's `git_target` resolves to).

use std::path::{Component, Path, PathBuf};
use std::process::Command;

use serde::{Deserialize, Serialize};

use super::git::Archived;
use crate::error::{Error, Result};
use crate::names::SandboxName;
use crate::runtime::{Mount, WORKSPACE_TARGET};

/// Archive bookmarks: `forage/archive/<name>/<timestamp>`.
pub const ARCHIVE_PREFIX: &str = "forage/archive";

fn ws_err(e: impl std::fmt::Display) -> Error {
    Error::Workspace(e.to_string())
}

/// Runs jj with output meant for parsing; returns stdout, or jj's own error.
fn jj(cwd: Option<&Path>, args: &[&str]) -> Result<String> {
    let mut cmd = Command::new("jj");
    cmd.args(["--no-pager", "--color=never"]).args(args);
    if let Some(dir) = cwd {
        cmd.current_dir(dir);
    }
    let out = cmd.output().map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => Error::Workspace(
            "jj is not installed (no `jj` on PATH); install it (`cargo install jj-cli --locked`, or your package manager) or use --git-worktree".into(),
        ),
        _ => ws_err(format!("running jj: {e}")),
    })?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        return Err(ws_err(format!("`jj {}` failed: {}", args.join(" "), stderr.trim())));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A jj sandbox as its record remembers it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JjWorkspace {
    /// The repository's root (its default workspace).
    pub repo: PathBuf,
    /// `<repo>/.jj/repo`: the store, operation log and index all workspaces share.
    pub repo_dir: PathBuf,
    /// The workspace, under FORAGE_HOME/workspaces.
    pub path: PathBuf,
    /// `forage-<name>`.
    pub workspace: String,
    /// The commits the workspace's first change sits on.
    pub base: Vec<String>,
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
    pub fn validate(raw: &Path, base: Option<&str>, name: &SandboxName, path: PathBuf) -> Result<Self> {
        let shown = raw.display();
        let start = raw.canonicalize().map_err(|_| {
            ws_err(format!("repository path {shown:?} does not exist; pass the path of a jj repository"))
        })?;
        super::ensure_readable(&start)?;
        let root = jj_root(&start).ok_or_else(|| {
            ws_err(format!("{shown:?} is not inside a jj repository; run `jj git init` there first, or use --git-worktree / --workspace"))
        })?;
        let root_str = root.to_str().ok_or_else(|| ws_err("the repository path is not UTF-8"))?;
        let repo_dir = resolve_repo_dir(&root)?;
        let workspace = name.branch();
        let existing = jj(None, &["-R", root_str, "workspace", "list", "-T", "name ++ \"\\n\""])?;
        // After the first jj call, so that "jj is not installed" is said plainly.
        let revset = base.unwrap_or("@-");
        let base: Vec<String> =
            jj(None, &["-R", root_str, "log", "-r", revset, "--no-graph", "-T", "commit_id ++ \"\\n\""])
                .map_err(|e| match base {
                    Some(b) => ws_err(format!("--base {b:?} names no commit in {}: {e}", root.display())),
                    None => e,
                })?
                .lines()
                .map(str::to_owned)
                .collect();
        if base.is_empty() {
            return Err(ws_err(format!("--base {revset:?} names no commit in {}", root.display())));
        }
        if existing.lines().any(|w| w == workspace) {
            return Err(Error::Conflict(format!(
                "{} already has a jj workspace named {workspace}, made by a sandbox of this name in another FORAGE_HOME or left over; `jj -R {:?} workspace list` shows it",
                root.display(),
                root
            )));
        }
        super::ensure_workspace_dir_free(&path, name)?;
        Ok(JjRequest { workspace: JjWorkspace { repo: root, repo_dir, path, workspace, base } })
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

/// Lexically joins `rel` onto `base`, as the kernel resolves `..` (never above /).
fn join_lexically(base: &Path, rel: &str) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in base.join(rel).components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(n) => out.push(n),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

impl JjWorkspace {
    fn repo_str(&self) -> &str {
        self.repo.to_str().expect("validated as UTF-8")
    }

    pub fn add(&self) -> Result<()> {
        if let Some(parent) = self.path.parent() {
            std::fs::create_dir_all(parent).map_err(ws_err)?;
        }
        let path = self.path.to_str().ok_or_else(|| ws_err("the workspace path is not UTF-8"))?;
        let mut args = vec!["-R", self.repo_str(), "workspace", "add", "--name", &self.workspace];
        for b in &self.base {
            args.extend(["-r", b.as_str()]);
        }
        args.push(path);
        jj(None, &args)?;
        if let Some(git_dir) = self.git_dir() {
            ensure_hooks_dir(&git_dir)?;
        }
        Ok(())
    }

    /// The git directory behind the store (colocated or internal), if any.
    fn git_dir(&self) -> Option<PathBuf> {
        let target = std::fs::read_to_string(self.repo_dir.join("store/git_target")).ok()?;
        self.repo_dir.join("store").join(target.trim()).canonicalize().ok()
    }

    /// Where the repository appears inside the container: wherever the workspace's
    /// `.jj/repo` link resolves from /workspace/.jj.
    fn repo_dir_inside(&self) -> PathBuf {
        let link = std::fs::read_to_string(self.path.join(".jj/repo")).unwrap_or_default();
        let link = link.trim();
        if link.is_empty() {
            self.repo_dir.clone()
        } else {
            join_lexically(&Path::new(WORKSPACE_TARGET).join(".jj"), link)
        }
    }

    /// The workspace at /workspace with its `.jj` read-only except the working
    /// copy state (so the agent cannot redirect the repository link or plant
    /// workspace config); the repository where the link resolves, writable (new
    /// commits and operations), with its config files read-only; a colocated git
    /// directory where the store's `git_target` resolves, guarded as in git mode.
    pub fn mounts(&self, read_only: bool) -> Vec<Mount> {
        let ro =
            |source: PathBuf, target: PathBuf| Mount { source, target: target.display().to_string(), read_only: true };
        let inside = self.repo_dir_inside();
        let mut mounts = vec![
            Mount { source: self.path.clone(), target: WORKSPACE_TARGET.into(), read_only },
            ro(self.path.join(".jj"), Path::new(WORKSPACE_TARGET).join(".jj")),
            Mount {
                source: self.path.join(".jj/working_copy"),
                target: format!("{WORKSPACE_TARGET}/.jj/working_copy"),
                read_only,
            },
            Mount { source: self.repo_dir.clone(), target: inside.display().to_string(), read_only },
        ];
        for guarded in ["config.toml", "config-id"] {
            let source = self.repo_dir.join(guarded);
            if source.exists() {
                mounts.push(ro(source, inside.join(guarded)));
            }
        }
        if let (Some(git_dir), Ok(target)) =
            (self.git_dir(), std::fs::read_to_string(self.repo_dir.join("store/git_target")))
        {
            let git_inside = join_lexically(&inside.join("store"), target.trim());
            let guarded = git_dir_mounts(&git_dir, &git_inside, read_only);
            if git_inside.starts_with(&inside) {
                // Inside the repository's mount already: only its guards are added.
                mounts.extend(guarded.into_iter().skip(1));
            } else {
                mounts.extend(guarded);
            }
        }
        mounts
    }

    /// Records the working copy's current state as a commit (jj snapshots on any
    /// command run in the workspace).
    fn snapshot(&self) -> Result<()> {
        if self.path.join(".jj").is_dir() {
            // jj skips new files above snapshot.max-new-file-size (1 MiB by default)
            // with only a warning; an archive must not.
            jj(Some(&self.path), &["--config", "snapshot.max-new-file-size=1099511627776", "status"])?;
        }
        Ok(())
    }

    /// The revset of the agent's work: changes since the base that are not empty
    /// and undescribed.
    fn work_revset(&self) -> String {
        let bases = self.base.join(" | ");
        format!("(({bases})..{}@) ~ (empty() & description(exact:\"\"))", self.workspace)
    }

    /// Snapshots the working copy, then keeps non-empty work reachable with a
    /// bookmark. `None` when there is no work.
    pub fn archive(&self, name: &SandboxName, timestamp: &str) -> Result<Option<Archived>> {
        // A workspace the repository no longer knows has no working copy left to
        // archive: forage forgets one only after archiving it (a teardown cut short
        // and run again), and one forgotten by hand took its work with it.
        if !self.is_listed()? {
            tracing::warn!("jj workspace {} is gone from {}; nothing to archive", self.workspace, self.repo.display());
            return Ok(None);
        }
        self.snapshot()?;
        let work = self.work_revset();
        let commits =
            jj(None, &["-R", self.repo_str(), "log", "-r", &work, "--no-graph", "-T", "commit_id ++ \"\\n\""])?;
        let count = commits.lines().count();
        if count == 0 {
            return Ok(None);
        }
        let target = format!("latest(heads({work}))");
        let mut bookmark = format!("{ARCHIVE_PREFIX}/{name}/{timestamp}");
        let existing = jj(None, &["-R", self.repo_str(), "bookmark", "list", "-T", "name ++ \"\\n\""])?;
        let mut n = 1;
        while existing.lines().any(|b| b == bookmark) {
            bookmark = format!("{ARCHIVE_PREFIX}/{name}/{timestamp}-{n}");
            n += 1;
        }
        jj(None, &["-R", self.repo_str(), "bookmark", "create", &bookmark, "-r", &target])?;
        let commit = jj(None, &["-R", self.repo_str(), "log", "-r", &bookmark, "--no-graph", "-T", "commit_id"])?;
        Ok(Some(Archived {
            refname: bookmark,
            commit: commit.trim().to_owned(),
            commits: count,
            dirty_files: Vec::new(),
            source: None,
        }))
    }

    /// True while the repository knows this workspace.
    fn is_listed(&self) -> Result<bool> {
        let listed = jj(None, &["-R", self.repo_str(), "workspace", "list", "-T", "name ++ \"\\n\""])?;
        Ok(listed.lines().any(|w| w == self.workspace))
    }

    /// Forgets the workspace in the repository and deletes its directory (only
    /// under FORAGE_HOME/workspaces).
    pub fn remove(&self, workspaces_dir: &Path) -> Result<()> {
        if self.is_listed()? {
            jj(None, &["-R", self.repo_str(), "workspace", "forget", &self.workspace])?;
        }
        if self.path.starts_with(workspaces_dir) && self.path.exists() {
            std::fs::remove_dir_all(&self.path)
                .map_err(|e| ws_err(format!("removing {}: {e}", self.path.display())))?;
        }
        Ok(())
    }

    /// Files changed in the workspace's working-copy commit (after a snapshot).
    pub fn changed_files(&self) -> Result<Vec<String>> {
        self.snapshot()?;
        let rev = format!("{}@", self.workspace);
        // Run in the workspace, so paths are relative to its root.
        let out = jj(Some(&self.path), &["diff", "-r", &rev, "--summary"])?;
        Ok(out.lines().map(|l| l.trim().to_owned()).collect())
    }

    /// How many non-empty changes the workspace has made since its base.
    pub fn work_count(&self) -> Result<usize> {
        let out = jj(
            None,
            &["-R", self.repo_str(), "log", "-r", &self.work_revset(), "--no-graph", "-T", "commit_id ++ \"\\n\""],
        )?;
        Ok(out.lines().count())
    }
}

/// Creates bookmark `name` at `commit` (restore without --up).
pub fn restore_bookmark(repo: &Path, commit: &str, name: &str) -> Result<()> {
    let repo = repo.to_str().ok_or_else(|| ws_err("the repository path is not UTF-8"))?;
    let existing = jj(None, &["-R", repo, "bookmark", "list", "-T", "name ++ \"\\n\""])?;
    if existing.lines().any(|b| b == name) {
        return Err(Error::Conflict(format!(
            "bookmark {name:?} already exists in {repo}; pass --branch with another name"
        )));
    }
    jj(None, &["-R", repo, "bookmark", "create", name, "-r", commit]).map(|_| ())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_links_resolve_like_the_kernel() {
        let base = Path::new("/workspace/.jj");
        assert_eq!(join_lexically(base, "../../../../home/u/repo/.jj/repo"), PathBuf::from("/home/u/repo/.jj/repo"));
        assert_eq!(join_lexically(base, "../../repo/.jj/repo"), PathBuf::from("/repo/.jj/repo"));
        assert_eq!(join_lexically(base, "/abs/repo"), PathBuf::from("/abs/repo"));
        assert_eq!(join_lexically(Path::new("/r/.jj/repo/store"), "../../../.git"), PathBuf::from("/r/.git"));
    }
}
