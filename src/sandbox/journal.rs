//! The steps of `up`, each with its undo written next to it. A step is recorded in
//! the sandbox's record *before* its effect happens, so after a crash at any point
//! the record names everything that might exist. Every undo is idempotent: it
//! succeeds whether or not the effect happened.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::runtime::Runtime;
use crate::store::Record;
use crate::workspace::WorkspaceRecord;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "step", rename_all = "kebab-case")]
pub enum Step {
    /// The git branch named in the record's workspace.
    GitBranch,
    /// The git worktree named in the record's workspace.
    GitWorktree,
    /// The jj repository forage makes for the agent: the workspace directory's
    /// files and the repository in FORAGE_HOME/private/<name>/jj. (In records of
    /// an older forage: a jj workspace of the user's repository.)
    JjWorkspace,
    /// FORAGE_HOME/private/<name>: the agent's private repository.
    PrivateRepo,
    /// A container named `name` (created, maybe started).
    Container { name: String },
}

/// How far an undo may go.
pub struct UndoScope<'a> {
    /// FORAGE_HOME/workspaces and FORAGE_HOME/private: the only places forage
    /// deletes directories (and a worktree's admin entry in its repository).
    pub workspaces_dir: &'a Path,
    pub private_dir: &'a Path,
    /// `down --keep-branch`: leave the branch where it is.
    pub keep_branch: bool,
}

impl Step {
    pub async fn undo<R: Runtime>(&self, record: &Record, runtime: &R, scope: &UndoScope<'_>) -> Result<()> {
        match (self, &record.workspace) {
            (Step::Container { name }, _) => runtime.remove(name).await,
            (Step::GitWorktree, WorkspaceRecord::GitWorktree(g)) => g.remove_worktree(scope.workspaces_dir),
            (Step::JjWorkspace, WorkspaceRecord::Jj(j)) => {
                // Bookmarks an archive has not taken over (`down --discard`, a
                // rollback) go first, with the work only they kept.
                j.drop_bookmarks()?;
                j.remove_workspace(scope.workspaces_dir)
            }
            (Step::PrivateRepo, WorkspaceRecord::Jj(j)) => j.remove_private(scope.private_dir),
            (Step::PrivateRepo, WorkspaceRecord::GitWorktree(g)) => g.remove_private(scope.private_dir),
            (Step::GitBranch, WorkspaceRecord::GitWorktree(g)) => {
                if scope.keep_branch {
                    Ok(())
                } else {
                    g.delete_branch()
                }
            }
            (step, ws) => Err(Error::other(format!(
                "the record of {} is inconsistent: step {step:?} in a {} workspace",
                record.name,
                ws.mode()
            ))),
        }
    }
}
