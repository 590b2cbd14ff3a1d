//! `update`: brings the user's branch (jj: bookmark) into the agent's work,
//! inside the sandbox, as its agent would: git merges it there, jj rebases
//! onto it. forage runs no git or jj on the host against the agent's
//! repository: the script runs in the sandbox's container, on the agent's
//! view of the user's branches (`origin/*`, `NAME@host`), which forage keeps
//! current and whose commits the sandbox reads from the host's objects.

use serde::Serialize;

use super::Engine;
use crate::error::{Error, Result};
use crate::names::SandboxName;
use crate::runtime::{ContainerState, Runtime};
use crate::workspace::{review, Mode};

/// How long `update`'s merge or rebase inside may take.
const UPDATE_DEADLINE: std::time::Duration = std::time::Duration::from_secs(600);

/// What `update` did.
#[derive(Debug, Clone, Serialize)]
pub struct Updated {
    pub sandbox: String,
    /// The branch (jj: bookmark) brought in.
    pub from: String,
    /// True when conflicts are left in the sandbox for its agent to resolve.
    pub conflicts: bool,
    /// The script's exit code: 0 done, 3 conflicts left, else it failed.
    pub exit_code: i64,
    /// What git or jj printed inside (the agent's files name it: escape it).
    pub output: String,
}

impl<R: Runtime> Engine<R> {
    /// Brings `from` (default: the branch the sandbox's work lands on) into
    /// the sandbox's work, in its running container; then syncs, so that the
    /// host sees the result.
    pub async fn update(&self, name: &SandboxName, from: Option<String>) -> Result<Updated> {
        let _lock = self.lock_sandbox(name).await?;
        let record = self.reviewable(name)?;
        let script = record.workspace.get().update_script().ok_or_else(|| {
            Error::usage(format!("sandbox {name} has no history of its own, so there is nothing to update"))
        })?;
        let running = matches!(
            self.runtime.inspect(&record.container).await?,
            Some(c) if c.state == ContainerState::Running
        );
        if !running {
            return Err(Error::conflict(format!(
                "sandbox {name} is not running: update runs git (jj) in its container"
            ))
            .hint_run("{command} starts it", ["start", name.as_str()]));
        }
        self.sync_for_review(&record).await.map_err(|e| {
            Error::new(
                e.kind(),
                format!("update brings the target into work a sync verified, and the sync failed: {e}"),
            )
        })?;
        let ws = record.workspace.clone();
        let target = super::blocking(move || {
            let review = super::review::reviewer(&ws)?;
            let repo = review.repository()?;
            review::in_memory(&repo)?;
            let work = review.work(&repo)?;
            let target = from.or(work.target).ok_or_else(|| {
                Error::usage(format!(
                    "forage does not know which {} the sandbox's work lands on; pass --from",
                    if ws.mode() == Mode::Jj { "bookmark" } else { "branch" }
                ))
            })?;
            review.target_tip(&repo, &target)?;
            ws.get().refresh_view_of_host()?;
            Ok(target)
        })
        .await?;
        let command = vec!["sh".into(), "-c".into(), script.into(), "forage-update".into(), target.clone()];
        // The agent's git or jj config (a hook, a signing program) may never
        // return: the sandbox's lock is not held for ever.
        let ran =
            tokio::time::timeout(UPDATE_DEADLINE, self.runtime.run_captured(&record.container, command, self.identity));
        let (code, output) = ran.await.map_err(|_| {
            Error::conflict(format!(
                "bringing {target} into sandbox {name} did not finish within {} s (something in the agent's git or jj config may hang it); nothing of yours was changed",
                UPDATE_DEADLINE.as_secs()
            ))
            .hint_run("{command} lets you look", ["shell", name.as_str()])
        })??;
        self.sync_for_review(&record).await.map_err(|e| {
            Error::new(e.kind(), format!("{target} was brought into the sandbox, but the sync after failed: {e}"))
        })?;
        Ok(Updated { sandbox: name.to_string(), from: target, conflicts: code == 3, exit_code: code, output })
    }
}
