//! `checkout`: a branch of the user's, `review/<name>`, at the sandbox's synced
//! work, which the user can switch to in their own checkout (the sandbox's
//! branch itself is checked out in its worktree, so `git switch forage-NAME`
//! fails there). The branch points at commits a sync verified and imported;
//! forage only moves the ref (`workspace::git::review_branch`).

use serde::Serialize;

use super::Engine;
use crate::error::{Error, Result};
use crate::names::SandboxName;
use crate::runtime::Runtime;
use crate::workspace::git::review_branch::ReviewBranch;
use crate::workspace::{reach, Mode, WorkspaceRecord};

/// FORAGE_HOME/state/review-branches.json: where forage last left each review branch.
const REVIEW_BRANCHES: &str = "review-branches";

/// What `checkout` did.
#[derive(Debug, Clone, Serialize)]
pub struct CheckedOut {
    pub sandbox: String,
    pub branch: String,
    /// Where the branch was before (`null`: it was made now).
    pub before: Option<String>,
    pub commit: String,
    /// The user's checkout, where to `git switch` to it.
    pub checkout: String,
    /// The agent's uncommitted files, which are not on the branch.
    pub uncommitted: usize,
}

impl<R: Runtime> Engine<R> {
    /// Syncs sandbox `name`, then makes or moves `review/<name>` to its
    /// branch's tip on the host (see `review_branch` for what it refuses).
    pub async fn checkout(&self, name: &SandboxName) -> Result<CheckedOut> {
        let _lock = self.lock_sandbox(name).await?;
        let record = self.reviewable(name)?;
        if record.workspace.mode() == Mode::Jj {
            return Err(Error::usage(format!(
                "sandbox {name} is a jj sandbox: its work is bookmark forage/{name} in your repository already, and jj needs no branch to switch to"
            ))
            .hint(format!("`jj new forage/{name}` starts a change on top of it in your workspace")));
        }
        self.sync_for_review(&record).await.map_err(|e| {
            Error::new(e.kind(), format!("checkout takes only work a sync verified, and the sync failed: {e}"))
        })?;
        let _repo = self.lock_repo_of(&record).await?;
        let reach = self.agent_reach().await?;
        let (ws, home, branch) = (record.workspace.clone(), self.home.clone(), name.review_branch());
        let (made, checkout) = super::blocking(move || {
            let WorkspaceRecord::GitWorktree(git) = &ws else {
                return Err(Error::usage("checkout is for git-worktree sandboxes"));
            };
            if let Some(git_dir) = reach::git_dir_of(&ws) {
                reach.refuse_branch(&git_dir, &branch)?;
            }
            let _state = home.lock_state(REVIEW_BRANCHES)?;
            let mut left: Vec<ReviewBranch> = home.read_state(REVIEW_BRANCHES)?;
            let ours = left.iter().find(|b| b.branch == branch && b.common_dir == git.common_dir);
            let moved = git.set_review_branch(&branch, ours)?;
            let forage_made_it = moved.before.is_none() || ours.is_some();
            if forage_made_it {
                left.retain(|b| !(b.branch == branch && b.common_dir == git.common_dir));
                left.push(ReviewBranch {
                    common_dir: git.common_dir.clone(),
                    branch: branch.clone(),
                    commit: moved.tip.to_string(),
                });
                home.write_state(REVIEW_BRANCHES, &left)?;
            }
            Ok((moved, git.repo.display().to_string()))
        })
        .await?;
        let workspace = record.workspace.clone();
        let uncommitted =
            super::blocking(move || workspace.get().status()).await?.map_or(0, |status| status.dirty.len());
        Ok(CheckedOut {
            sandbox: name.to_string(),
            branch: name.review_branch(),
            before: made.before.map(|b| b.to_string()),
            commit: made.tip.to_string(),
            checkout,
            uncommitted,
        })
    }
}
