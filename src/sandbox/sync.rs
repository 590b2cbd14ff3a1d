//! `sync`: the one bridge from a sandbox's private repository to the host's
//! (SPEC §3a). `status`, `down` and the review commands run it first.

use super::Engine;
use crate::error::{Error, Result};
use crate::names::SandboxName;
use crate::runtime::Runtime;
use crate::store::{Record, RecordState};
use crate::workspace::git::SyncReport;
use crate::workspace::WorkspaceRecord;

impl<R: Runtime> Engine<'_, R> {
    /// Brings the agent's work to the host: for git, its branch's new commits
    /// (verified) onto the host's `forage-<name>`.
    pub async fn sync(&self, name: &SandboxName) -> Result<SyncReport> {
        let _lock = self.home.lock_sandbox(name)?;
        let record = self.record(name)?;
        self.sync_record(&record)
    }

    /// `sync` for a record whose sandbox lock the caller holds.
    pub(crate) fn sync_record(&self, record: &Record) -> Result<SyncReport> {
        match &record.workspace {
            WorkspaceRecord::GitWorktree(g) => {
                let _repo = self.home.lock_repo(&g.common_dir)?;
                let report = g.sync()?;
                if report.before != report.after {
                    self.refresh_other_views(record);
                }
                Ok(report)
            }
            WorkspaceRecord::Jj(_) => Err(Error::Usage(format!(
                "sandbox {} is a jj sandbox; its changes are in the repository already",
                record.name
            ))),
            WorkspaceRecord::Direct { path } => Err(Error::Usage(format!(
                "sandbox {} works directly in {}, which has no history for forage to sync; sync is for --git-worktree and --jj sandboxes",
                record.name,
                path.display()
            ))),
        }
    }

    /// Lets every other sandbox on the same repository see the branch that just
    /// moved (as `origin/<branch>`). Best effort: a sandbox being removed or made
    /// right now refreshes its own view at its next sync.
    fn refresh_other_views(&self, synced: &Record) {
        let WorkspaceRecord::GitWorktree(g) = &synced.workspace else { return };
        let Ok(records) = self.home.load_all() else { return };
        for other in records {
            let WorkspaceRecord::GitWorktree(o) = &other.workspace else { continue };
            if other.name == synced.name || o.common_dir != g.common_dir || other.state != RecordState::Ready {
                continue;
            }
            if let Err(e) = o.refresh_view_of_host() {
                tracing::warn!("refreshing the view of the host's branches in sandbox {}: {e}", other.name);
            }
        }
    }
}
