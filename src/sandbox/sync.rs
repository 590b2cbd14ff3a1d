//! `sync`: the one bridge from a sandbox's private repository to the host's
//! (SPEC §3a). `status`, `down` and the review commands run it first.

use std::collections::HashMap;

use serde::Serialize;

use super::{now_precise, Engine};
use crate::error::{Error, Result};
use crate::names::{SandboxName, LABEL_HOME};
use crate::progress::Silent;
use crate::runtime::{ContainerSpec, Identity, ImageSource, Runtime, AGENT_HOME};
use crate::store::{Record, RecordState};
use crate::template::Network;
use crate::workspace::git::{self, SyncReport};
use crate::workspace::jj::{AgentState, JjSync, JjWorkspace};
use crate::workspace::WorkspaceRecord;

/// What a sync brought over.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum Synced {
    Git(SyncReport),
    Jj(JjSync),
}

/// Whether jj inside should also take in the host's bookmarks (`NAME@host`)
/// before saying what the agent did: at `sync`, which is when the agent expects
/// to see the host move; not at `down` or `status`, which would only pay for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ImportHostView {
    Yes,
    No,
}

impl<R: Runtime> Engine<'_, R> {
    /// Brings the agent's work to the host: for git, its branch's new commits
    /// (verified) onto the host's `forage-<name>`; for jj, its changes (verified)
    /// as bookmark `forage/<name>`, after jj inside has snapshotted them.
    pub async fn sync(&self, name: &SandboxName) -> Result<Synced> {
        let _lock = self.lock_sandbox(name).await?;
        let record = self.record(name)?;
        match &record.workspace {
            WorkspaceRecord::Jj(j) if !j.is_legacy() => {
                let state = match self.jj_state_if_running(&record, j, ImportHostView::Yes).await {
                    Some(state) => state,
                    None => self.jj_state_in_helper(&record, j, ImportHostView::Yes).await,
                };
                let state = state.map_err(Error::Workspace)?;
                self.sync_jj(&record, j, &state).await.map(Synced::Jj)
            }
            _ => self.sync_record(&record).await.map(Synced::Git),
        }
    }

    /// `sync` of a git sandbox whose lock the caller holds.
    pub(crate) async fn sync_record(&self, record: &Record) -> Result<SyncReport> {
        match &record.workspace {
            WorkspaceRecord::GitWorktree(g) => {
                let _repo = self.lock_repo(&g.common_dir).await?;
                let report = g.sync()?;
                if report.before != report.after {
                    self.refresh_other_views(record);
                }
                Ok(report)
            }
            WorkspaceRecord::Jj(_) => Err(Error::Usage(format!(
                "sandbox {} was made by an older forage, whose jj sandboxes shared the repository with the agent: there is nothing to sync; `forage-ctl down {}` leaves its workspace for you to look at",
                record.name, record.name
            ))),
            WorkspaceRecord::Direct { path } => Err(Error::Usage(format!(
                "sandbox {} works directly in {}, which has no history for forage to sync; sync is for --git-worktree and --jj sandboxes",
                record.name,
                path.display()
            ))),
        }
    }

    /// Brings what jj inside said to the repository, under its lock.
    pub(crate) async fn sync_jj(&self, record: &Record, j: &JjWorkspace, state: &AgentState) -> Result<JjSync> {
        let _repo = self.lock_repo(&j.repo_dir).await?;
        let synced = j.bring_to_host(state)?;
        self.refresh_other_views(record);
        Ok(synced)
    }

    /// Lets every other sandbox on the same repository see the branches and
    /// bookmarks as they are now (git: `origin/*`; jj: `NAME@host`). Best effort:
    /// a sandbox being removed or made right now refreshes its own at its next sync.
    fn refresh_other_views(&self, synced: &Record) {
        let Ok((records, _)) = self.home.load_all() else { return };
        for other in records {
            if other.name == synced.name || other.state != RecordState::Ready {
                continue;
            }
            let refreshed = match (&synced.workspace, &other.workspace) {
                (WorkspaceRecord::GitWorktree(g), WorkspaceRecord::GitWorktree(o)) if o.common_dir == g.common_dir => {
                    o.refresh_view_of_host()
                }
                (WorkspaceRecord::Jj(j), WorkspaceRecord::Jj(o)) if o.repo_dir == j.repo_dir => {
                    o.refresh_view_of_host()
                }
                _ => continue,
            };
            if let Err(e) = refreshed {
                tracing::warn!("refreshing sandbox {}'s view of the host's work: {e}", other.name);
            }
        }
    }

    /// What jj inside the sandbox's running container says of the agent's work
    /// (it snapshots first); `None` when the container is not running.
    pub(crate) async fn jj_state_if_running(
        &self,
        record: &Record,
        j: &JjWorkspace,
        import: ImportHostView,
    ) -> Option<std::result::Result<AgentState, String>> {
        let running = matches!(self.runtime.inspect(&record.container).await, Ok(Some(c)) if c.state == "running");
        if !running {
            return None;
        }
        let since = now_precise();
        let command = j.state_command(import == ImportHostView::Yes);
        let ran = tokio::time::timeout(
            JJ_INSIDE_DEADLINE,
            self.runtime.run_captured(&record.container, command, Identity::current()),
        );
        Some(match ran.await {
            Ok(Ok((_, output))) => AgentState::parse(&output, since),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(deadline_passed()),
        })
    }

    /// The same, in a container made for it from the sandbox's image and mounts,
    /// with no network: for when the sandbox's own container is stopped or gone.
    pub(crate) async fn jj_state_in_helper(
        &self,
        record: &Record,
        j: &JjWorkspace,
        import: ImportHostView,
    ) -> std::result::Result<AgentState, String> {
        if record.image.is_empty() {
            return Err("the sandbox's image is unknown, so jj cannot be run for it".into());
        }
        let image = self
            .runtime
            .ensure_image(&ImageSource::Reference(record.image.clone()), &Silent)
            .await
            .map_err(|e| e.to_string())?;
        let mut env: HashMap<String, String> = git::identity_env(&j.repo).into_iter().collect();
        env.insert("HOME".into(), AGENT_HOME.into());
        env.insert("FORAGE_SANDBOX".into(), record.name.to_string());
        let spec = ContainerSpec {
            // Upper case, which no sandbox name has: never another sandbox's container.
            name: format!("{}-SNAPSHOT", record.container),
            program: "sh".into(),
            image,
            labels: HashMap::from([(LABEL_HOME.to_string(), self.home.label())]),
            command: j.state_command(import == ImportHostView::Yes),
            env: env.into_iter().map(|(k, v)| format!("{k}={v}")).collect(),
            identity: Identity::current(),
            mounts: record.workspace.mounts(false),
            memory_bytes: 4 << 30,
            nano_cpus: 1_000_000_000,
            pids: 1024,
            network: Network::None,
            stop_signal: "SIGTERM".into(),
            stop_timeout: 10,
        };
        let since = now_precise();
        match tokio::time::timeout(JJ_INSIDE_DEADLINE, self.runtime.run_to_end(&spec)).await {
            Ok(Ok((_, output))) => AgentState::parse(&output, since),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => {
                // The helper was cut off mid-run: it goes now, not at the next one.
                if let Err(e) = self.runtime.remove(&spec.name).await {
                    tracing::warn!("removing the helper container {}: {e}", spec.name);
                }
                Err(deadline_passed())
            }
        }
    }
}

/// How long jj inside may take to snapshot and list the agent's work. Its
/// config is the agent's, and a program it names (a signing program, say) may
/// never return; `sync`, `status` and `down` must.
const JJ_INSIDE_DEADLINE: std::time::Duration = std::time::Duration::from_secs(120);

fn deadline_passed() -> String {
    format!(
        "jj inside the sandbox did not finish within {} s (something in the agent's jj config may hang it)",
        JJ_INSIDE_DEADLINE.as_secs()
    )
}
