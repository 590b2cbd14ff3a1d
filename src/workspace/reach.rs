//! What the agents of a FORAGE_HOME hold and can write, so that `merge` and
//! `apply` never land work there: a sandbox's branch moved by `merge` would
//! be checked out in the sandbox's own worktree, and files written where an
//! agent writes go wherever the symlinks it plants mid-checkout point.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::WorkspaceRecord;
use crate::error::{Error, Result};

/// A sandbox's branch (git) or bookmark (jj), in the repository whose git
/// directory is `git_dir`.
#[derive(Debug, Clone)]
struct Held {
    sandbox: String,
    branch: String,
    git_dir: PathBuf,
}

/// A host directory a sandbox's agent can write.
#[derive(Debug, Clone)]
struct Writable {
    sandbox: String,
    path: PathBuf,
    /// "workspace" or "writable mount".
    what: &'static str,
}

/// Every branch the sandboxes of one FORAGE_HOME work on, and every host
/// directory their agents can write (workspaces and writable mounts), as
/// their records and containers say.
#[derive(Debug, Clone, Default)]
pub struct AgentReach {
    held: Vec<Held>,
    writable: Vec<Writable>,
}

impl AgentReach {
    /// Adds sandbox `name`: its workspace `ws` (its branch, its directory and
    /// the mounts it makes, each as if writable) and `mounts`, the other
    /// writable host directories its container has.
    pub fn add(&mut self, name: &str, ws: &WorkspaceRecord, mounts: impl IntoIterator<Item = PathBuf>) {
        if let (Some(branch), Some(git_dir)) = (ws.branch(), git_dir_of(ws)) {
            self.held.push(Held { sandbox: name.to_owned(), branch: branch.to_owned(), git_dir });
        }
        let workspace = ws.host_path().to_path_buf();
        self.writable.push(Writable { sandbox: name.to_owned(), path: workspace, what: "workspace" });
        for path in mounts {
            self.writable.push(Writable { sandbox: name.to_owned(), path, what: "writable mount" });
        }
    }

    /// Refuses to land on `target` of the repository whose git directory is
    /// `git_dir` when it is a sandbox's branch (or bookmark): `merge` would
    /// move it under the sandbox, and check its files out where the agent
    /// works. Compared ignoring ASCII case, as a case-insensitive file system
    /// finds one ref file for both.
    pub fn refuse_branch(&self, git_dir: &Path, target: &str) -> Result<()> {
        let Some(held) =
            self.held.iter().find(|h| h.branch.eq_ignore_ascii_case(target) && same_dir(&h.git_dir, git_dir))
        else {
            return Ok(());
        };
        Err(Error::conflict(format!(
            "{target:?} is the branch of sandbox {}, whose agent works on it: forage never lands work on a sandbox's branch; nothing was changed",
            held.sandbox
        ))
        .hint("land it on a branch of yours with --into BRANCH")
        .hint_run("or take that sandbox down first with {command}", ["down", held.sandbox.as_str()]))
    }

    /// Refuses to write files in `dir` (`what` says what it is, e.g. "main is
    /// checked out in /repo") when it is, holds or lies inside a directory an
    /// agent can write: the agent could swap any directory there for a symlink
    /// while forage writes. Every directory on the way to `dir` counts as
    /// where it really is, so a path that reaches an agent's directory through
    /// a symlink, or that goes through a directory an agent could have
    /// replaced by one, is caught too.
    pub fn refuse_checkout(&self, dir: &Path, what: &str) -> Result<()> {
        let Some((w, relation)) = self.writer_near(dir) else { return Ok(()) };
        Err(Error::conflict(format!(
            "{what}, which {relation} the {} of sandbox {} ({}): its agent could plant symlinks there while forage writes; nothing was changed",
            w.what,
            w.sandbox,
            w.path.display()
        ))
        .hint("land the work on a branch checked out where no sandbox writes (--into BRANCH)")
        .hint_run("or take that sandbox down first with {command}", ["down", w.sandbox.as_str()]))
    }

    /// Refuses to read files in `dir` (`what` says what it is) when it is,
    /// holds or lies inside a directory an agent can write, as
    /// `refuse_checkout` finds them: the agent could plant symlinks and FIFOs
    /// there while forage reads.
    pub fn refuse_reading(&self, dir: &Path, what: &str) -> Result<()> {
        let Some((w, relation)) = self.writer_near(dir) else { return Ok(()) };
        Err(Error::conflict(format!(
            "{what}, which {relation} the {} of sandbox {} ({}): its agent could plant symlinks and FIFOs there while forage reads; nothing was made",
            w.what,
            w.sandbox,
            w.path.display()
        ))
        .hint_run("take that sandbox down first with {command}", ["down", w.sandbox.as_str()]))
    }

    /// The first directory an agent writes that `dir` is, holds or lies
    /// inside (every directory on the way to `dir` counted where it really
    /// is), and which of the three.
    fn writer_near(&self, dir: &Path) -> Option<(&Writable, &'static str)> {
        let on_the_way = resolved_ancestors(dir);
        let real = crate::host_paths::resolved(dir);
        self.writable.iter().find_map(|w| {
            let w_real = crate::host_paths::resolved(&w.path);
            let inside = on_the_way.iter().any(|a| a.starts_with(&w_real) || a.starts_with(&w.path));
            let holds = w_real.starts_with(&real) || w.path.starts_with(dir);
            if !inside && !holds {
                return None;
            }
            let relation = if real == w_real {
                "is"
            } else if holds {
                "holds"
            } else {
                "lies inside"
            };
            Some((w, relation))
        })
    }
}

/// The git directory of the repository a workspace's branch is in (git: the
/// repository's; jj: its git store).
pub fn git_dir_of(ws: &WorkspaceRecord) -> Option<PathBuf> {
    match ws {
        WorkspaceRecord::GitWorktree(g) => Some(g.common_dir.clone()),
        WorkspaceRecord::Jj(j) => j.git_dir.clone(),
        WorkspaceRecord::Direct(_) => None,
    }
}

/// `dir` and each directory above it, each where it really is (symlinks
/// resolved): where every step of the way to `dir` is looked up.
fn resolved_ancestors(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = dir.ancestors().map(crate::host_paths::resolved).collect();
    out.push(dir.to_path_buf());
    out
}

/// True when `a` and `b` are one directory (the same file, or failing that
/// the same path).
fn same_dir(a: &Path, b: &Path) -> bool {
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => (x.dev(), x.ino()) == (y.dev(), y.ino()),
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workspace::direct::DirectWorkspace;
    use crate::workspace::git::GitWorkspace;

    #[test]
    fn a_sandboxs_branch_in_the_same_repository_is_refused_in_any_case() {
        let dir = tempfile::tempdir().unwrap();
        let (git_dir, other) = (dir.path().join("repo/.git"), dir.path().join("other/.git"));
        std::fs::create_dir_all(&git_dir).unwrap();
        std::fs::create_dir_all(&other).unwrap();
        std::os::unix::fs::symlink(&git_dir, dir.path().join("link")).unwrap();
        let ws = WorkspaceRecord::GitWorktree(GitWorkspace {
            repo: dir.path().join("repo"),
            common_dir: git_dir.clone(),
            path: dir.path().join("home/workspaces/b"),
            branch: "feature-b".into(),
            worktree_id: "forage-b".into(),
            base: "0".repeat(40),
            base_ref: None,
            private: None,
            from_uncommitted: false,
            start: None,
            cow: None,
        });
        let mut reach = AgentReach::default();
        reach.add("b", &ws, []);
        for (git_dir, target) in
            [(&git_dir, "feature-b"), (&git_dir, "Feature-B"), (&dir.path().join("link"), "feature-b")]
        {
            let e = reach.refuse_branch(git_dir, target).unwrap_err();
            assert!(e.to_string().contains("is the branch of sandbox b") && e.exit_code() == 4, "{e}");
        }
        assert!(reach.refuse_branch(&git_dir, "feature-c").is_ok());
        assert!(reach.refuse_branch(&other, "feature-b").is_ok(), "another repository's branch of that name");
    }

    fn direct(path: &Path) -> WorkspaceRecord {
        WorkspaceRecord::Direct(DirectWorkspace { path: path.to_path_buf() })
    }

    #[test]
    fn a_checkout_that_is_holds_or_lies_inside_what_an_agent_writes_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let top = dir.path().canonicalize().unwrap();
        for d in ["repo/sub", "ws", "mount", "elsewhere", "other"] {
            std::fs::create_dir_all(top.join(d)).unwrap();
        }
        let mut reach = AgentReach::default();
        reach.add("d", &direct(&top.join("ws")), [top.join("mount")]);
        let refused = |p: &Path| reach.refuse_checkout(p, "main is checked out in x").err().map(|e| e.to_string());
        assert_eq!(refused(&top.join("elsewhere")), None);
        // The workspace itself, a checkout inside it, one holding it.
        let e = refused(&top.join("ws")).unwrap();
        assert!(e.contains("which is the workspace of sandbox d") && e.contains("nothing was changed"), "{e}");
        std::fs::create_dir(top.join("ws/repo")).unwrap();
        assert!(refused(&top.join("ws/repo")).unwrap().contains("lies inside the workspace"));
        assert!(refused(&top).unwrap().contains("holds the workspace"));
        assert!(refused(&top.join("mount")).unwrap().contains("is the writable mount of sandbox d"));
        // Reached through a symlink of the user's, and through one the agent
        // made inside its workspace (resolving only the end would miss it).
        std::os::unix::fs::symlink(top.join("ws"), top.join("link")).unwrap();
        assert!(refused(&top.join("link/repo")).unwrap().contains("lies inside the workspace"));
        std::os::unix::fs::symlink(top.join("other"), top.join("ws/planted")).unwrap();
        assert!(refused(&top.join("link/planted")).unwrap().contains("lies inside the workspace"));
        // A workspace inside the checkout.
        let mut nested = AgentReach::default();
        nested.add("n", &direct(&top.join("repo/sub")), []);
        let e = nested.refuse_checkout(&top.join("repo"), "main is checked out in x").unwrap_err();
        assert!(e.to_string().contains("holds the workspace of sandbox n"), "{e}");
        assert_eq!(e.exit_code(), 4);
    }
}
