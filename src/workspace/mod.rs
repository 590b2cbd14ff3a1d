//! Workspaces: what the agent sees at /workspace. One module per mode; each knows
//! how to validate its input, what to mount, and how to tear itself down.

pub mod direct;
pub mod git;
pub mod jj;
pub mod untrusted;
mod worktree_files;

use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::runtime::{Mount, WORKSPACE_TARGET};

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

/// What a record remembers of a sandbox's workspace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "kebab-case")]
pub enum WorkspaceRecord {
    /// A host directory mounted as is; forage never modifies or deletes it.
    Direct { path: PathBuf },
    /// A worktree of a git repository on a branch forage created.
    GitWorktree(git::GitWorkspace),
    /// A jj workspace forage created.
    Jj(jj::JjWorkspace),
}

impl WorkspaceRecord {
    pub fn mode(&self) -> Mode {
        match self {
            WorkspaceRecord::Direct { .. } => Mode::Direct,
            WorkspaceRecord::GitWorktree(_) => Mode::GitWorktree,
            WorkspaceRecord::Jj(_) => Mode::Jj,
        }
    }

    /// The host directory the agent works in.
    pub fn host_path(&self) -> &Path {
        match self {
            WorkspaceRecord::Direct { path } => path,
            WorkspaceRecord::GitWorktree(g) => &g.path,
            WorkspaceRecord::Jj(j) => &j.path,
        }
    }

    /// The git branch, or the jj bookmark.
    pub fn branch(&self) -> Option<&str> {
        match self {
            WorkspaceRecord::Direct { .. } => None,
            WorkspaceRecord::GitWorktree(g) => Some(&g.branch),
            WorkspaceRecord::Jj(j) if j.is_legacy() => Some(&j.workspace),
            WorkspaceRecord::Jj(j) => Some(&j.bookmark),
        }
    }

    /// Refuses a workspace whose repository keeps or borrows its objects where
    /// no agent may look (they are mounted read-only): checked by `up` and
    /// `reset` before anything is made.
    pub fn check_host_paths(&self, forage_home: &Path) -> crate::error::Result<()> {
        let host = match self {
            WorkspaceRecord::Direct { .. } => return Ok(()),
            WorkspaceRecord::GitWorktree(g) => git2::Repository::open(&g.common_dir),
            WorkspaceRecord::Jj(j) => match &j.git_dir {
                Some(dir) => git2::Repository::open(dir),
                None => return Ok(()),
            },
        };
        match host {
            Ok(host) => git::private::check_object_dirs(&host, forage_home),
            Err(_) => Ok(()),
        }
    }

    /// The bind mounts that make the workspace appear at /workspace.
    pub fn mounts(&self, read_only: bool) -> Vec<Mount> {
        match self {
            WorkspaceRecord::Direct { path } => {
                vec![Mount { source: path.clone(), target: WORKSPACE_TARGET.into(), read_only }]
            }
            WorkspaceRecord::GitWorktree(g) => g.mounts(read_only),
            WorkspaceRecord::Jj(j) => j.mounts(read_only),
        }
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
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => Err(crate::error::Error::Workspace(format!(
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
        return Err(crate::error::Error::Conflict(format!(
            "{} already exists; a sandbox of this name was not cleaned up (`forage-ctl down {name}`)",
            path.display()
        )));
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

    /// "2 commits (1a2b3c4d5e6f fix the parser; …), 1 commit not synced (…), 3 files (a, b, c)".
    pub fn describe(&self) -> String {
        let list = |items: &[String], one: &str, many: &str| {
            let shown: Vec<&str> = items.iter().take(10).map(String::as_str).collect();
            let more = if items.len() > 10 { format!("; and {} more", items.len() - 10) } else { String::new() };
            format!("{} {} ({}{more})", items.len(), if items.len() == 1 { one } else { many }, shown.join("; "))
        };
        let mut parts = Vec::new();
        if !self.commits.is_empty() {
            parts.push(list(&self.commits, "commit", "commits"));
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
    Direct(direct::DirectPath),
    GitWorktree(git::GitRequest),
    Jj(jj::JjRequest),
}
