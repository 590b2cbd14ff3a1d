//! `sync`: the one bridge from a sandbox's private repository to the host's
//! (SPEC §3a). `status`, `down` and the review commands run it first. A
//! workspace that must first hear from inside the container (jj's snapshot) gets
//! what it printed, run in the sandbox's own container or, when that is not
//! running, in a helper made from the same image and mounts.

use std::collections::HashMap;

use super::{now_precise, Engine};
use crate::error::Result;
use crate::names::{SandboxName, LABEL_HOME};
use crate::progress::Silent;
use crate::record::{Record, RecordState};
use crate::runtime::{ContainerSpec, ContainerState, ImageSource, Network, Runtime, AGENT_HOME};
use crate::workspace::{Inside, Synced};

/// How long a command forage runs inside (jj's snapshot) may take. Its config
/// is the agent's, and a program it names (a signing program, say) may never
/// return; `sync`, `status` and `down` must.
const INSIDE_DEADLINE: std::time::Duration = std::time::Duration::from_secs(120);

fn deadline_passed() -> String {
    format!(
        "jj inside the sandbox did not finish within {} s (something in the agent's jj config may hang it)",
        INSIDE_DEADLINE.as_secs()
    )
}

impl<R: Runtime> Engine<R> {
    /// Brings the agent's work to the host: for git, its branch's new commits
    /// (verified) onto the host's `forage-<name>`; for jj, its changes (verified)
    /// as bookmark `forage/<name>`, after jj inside has snapshotted them.
    pub async fn sync(&self, name: &SandboxName) -> Result<Synced> {
        let _lock = self.lock_sandbox(name).await?;
        let record = self.record(name)?;
        if record.journal.contains(&crate::record::Step::AgentState) {
            self.take_back_and_say(&record).await;
        }
        let inside = match self.run_inside_if_running(&record, true).await {
            Some(inside) => Some(inside),
            None => self.run_inside_in_helper(&record, true).await,
        };
        self.sync_record(&record, inside).await
    }

    /// `sync` of a sandbox whose lock the caller holds, with what its workspace
    /// heard from inside (if it asks).
    pub(crate) async fn sync_record(&self, record: &Record, inside: Option<Inside>) -> Result<Synced> {
        let ws = record.workspace.get();
        let _repo = match ws.repository_lock() {
            Some(repo) => Some(self.lock_repo(repo).await?),
            None => None,
        };
        let workspace = record.workspace.clone();
        let synced = super::blocking(move || workspace.get().sync(inside)).await?;
        self.refresh_other_views(record).await;
        Ok(synced)
    }

    /// Lets every other sandbox on the same repository see the branches and
    /// bookmarks as they are now (git: `origin/*`; jj: `NAME@host`). Best effort:
    /// a sandbox being removed or made right now refreshes its own at its next sync.
    async fn refresh_other_views(&self, synced: &Record) {
        let Ok((records, _)) = self.home.load_all() else { return };
        let others: Vec<Record> = records
            .into_iter()
            .filter(|o| o.name != synced.name && o.state == RecordState::Ready)
            .filter(|o| o.workspace.same_repository(&synced.workspace))
            .collect();
        let refreshed = super::blocking(move || {
            for other in others {
                if let Err(e) = other.workspace.get().refresh_view_of_host() {
                    tracing::warn!("refreshing sandbox {}'s view of the host's work: {e}", other.name);
                }
            }
            Ok(())
        });
        let _ = refreshed.await;
    }

    /// What the workspace's command printed in the sandbox's running
    /// container; `None` when it asks for none or the container is not running.
    pub(crate) async fn run_inside_if_running(&self, record: &Record, for_sync: bool) -> Option<Inside> {
        let command = record.workspace.get().inside_command(for_sync)?;
        let running =
            matches!(self.runtime.inspect(&record.container).await, Ok(Some(c)) if c.state == ContainerState::Running);
        if !running {
            return None;
        }
        let since = now_precise();
        let ran =
            tokio::time::timeout(INSIDE_DEADLINE, self.runtime.run_captured(&record.container, command, self.identity));
        let output = match ran.await {
            Ok(Ok((_, output))) => Ok(output),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(deadline_passed()),
        };
        Some(Inside { output, since })
    }

    /// The same, in a container made for it from the sandbox's image and mounts,
    /// with no network: for when the sandbox's own container is stopped or gone.
    /// `None` when the workspace asks for nothing.
    pub(crate) async fn run_inside_in_helper(&self, record: &Record, for_sync: bool) -> Option<Inside> {
        let command = record.workspace.get().inside_command(for_sync)?;
        let since = now_precise();
        Some(Inside { output: self.run_helper(record, command).await, since })
    }

    async fn run_helper(&self, record: &Record, command: Vec<String>) -> std::result::Result<String, String> {
        if record.image.is_empty() {
            return Err("the sandbox's image is unknown, so nothing can be run for it".into());
        }
        let source = ImageSource::Reference { reference: record.image.clone(), identity: self.identity };
        let image = self.runtime.ensure_image(&source, &Silent).await.map_err(|e| e.to_string())?;
        let mut env: HashMap<String, String> = record.workspace.get().agent_env().into_iter().collect();
        env.insert("HOME".into(), AGENT_HOME.into());
        env.insert("FORAGE_SANDBOX".into(), record.name.to_string());
        let spec = ContainerSpec {
            // Upper case, which no sandbox name has: never another sandbox's container.
            name: format!("{}-SNAPSHOT", record.container),
            program: "sh".into(),
            image,
            labels: HashMap::from([(LABEL_HOME.to_string(), self.home.label())]),
            command,
            env: env.into_iter().map(|(k, v)| format!("{k}={v}")).collect(),
            identity: self.identity,
            mounts: record.workspace.mounts(false, &super::plan::guard(&self.home, &self.settings)),
            memory_bytes: 4 << 30,
            nano_cpus: 1_000_000_000,
            pids: 1024,
            network: Network::None,
            egress: None,
            publishes: false,
            stop_signal: "SIGTERM".into(),
            stop_timeout: 10,
        };
        // The helper mounts the sandbox's workspace: pinned, like its own container's.
        self.check_pinned(record, &spec.mounts).map_err(|e| e.to_string())?;
        match tokio::time::timeout(INSIDE_DEADLINE, self.runtime.run_to_end(&spec)).await {
            Ok(Ok((_, output))) => Ok(output),
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
