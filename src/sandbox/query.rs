//! What forage tells about sandboxes: `list` (records plus one Engine API call)
//! and `status`.

use std::collections::HashMap;
use std::fmt;

use serde::Serialize;

use super::Engine;
use crate::error::{Error, Result};
use crate::names::SandboxName;
use crate::record::{Record, RecordState};
use crate::runtime::{ContainerDetails, ContainerState, Runtime};
use crate::store::Problem;
use crate::workspace::{AtStake, Mode, Synced, WorkspaceStatus};

/// Where a sandbox stands, as `list` and `status` show it: its container's
/// state, or what forage knows better.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SandboxState {
    /// Ready, with a container in this state.
    Container(ContainerState),
    /// Ready, but its container was removed outside forage.
    Missing,
    /// An `up` or `down` stopped half way (no process holds its lock).
    Broken,
    /// An `up` is making it right now.
    Creating,
    /// A `down` is removing it right now.
    Removing,
    /// A container labelled with this FORAGE_HOME that no record owns.
    Orphan,
    /// A record forage cannot read.
    Unreadable(Problem),
}

impl SandboxState {
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxState::Container(state) => state.as_str(),
            SandboxState::Missing => "missing",
            SandboxState::Broken => "broken",
            SandboxState::Creating => "creating",
            SandboxState::Removing => "removing",
            SandboxState::Orphan => "orphan",
            SandboxState::Unreadable(problem) => problem.word(),
        }
    }

    pub fn is_unreadable(self) -> bool {
        matches!(self, SandboxState::Unreadable(_))
    }
}

impl fmt::Display for SandboxState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for SandboxState {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// One row of `list`.
#[derive(Debug, Clone, Serialize)]
pub struct SandboxRow {
    pub name: String,
    /// `null` for an orphan container or a record forage cannot read.
    pub mode: Option<Mode>,
    pub template: Option<String>,
    pub status: SandboxState,
    pub branch: Option<String>,
    pub workspace: Option<String>,
    /// Seconds since the Unix epoch.
    pub created_at: Option<u64>,
    /// A record forage cannot read: its file, and why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub record_problem: Option<String>,
}

impl SandboxRow {
    fn new(r: &Record, status: SandboxState) -> Self {
        let ws = r.workspace.get();
        SandboxRow {
            name: r.name.to_string(),
            mode: Some(ws.mode()),
            template: Some(r.template.clone()),
            status,
            branch: ws.branch().map(str::to_owned),
            workspace: Some(ws.host_path().display().to_string()),
            created_at: Some(r.created_at),
            record_problem: None,
        }
    }

    fn bare(name: String, status: SandboxState) -> Self {
        SandboxRow {
            name,
            mode: None,
            template: None,
            status,
            branch: None,
            workspace: None,
            created_at: None,
            record_problem: None,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct SandboxStatus {
    /// The branch or bookmark, against its base (git and jj sandboxes).
    pub git: Option<WorkspaceStatus>,
    /// What the `sync` that `status` ran first did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sync: Option<Synced>,
    /// Why that sync failed (the branch then shows what the host had before).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sync_error: Option<String>,
    #[serde(flatten)]
    pub row: SandboxRow,
    pub record: Record,
    pub container: Option<ContainerDetails>,
}

impl<R: Runtime> Engine<R> {
    /// Every sandbox of this home, from the records plus one Engine API call.
    pub async fn list(&self) -> Result<Vec<SandboxRow>> {
        let (records, bad) = self.home.load_all()?;
        let containers = self.runtime.list(&self.home.label()).await?;
        let mut by_sandbox: HashMap<String, ContainerState> =
            containers.into_iter().map(|c| (c.sandbox, c.state)).collect();
        let mut rows = Vec::with_capacity(records.len() + bad.len());
        for r in records {
            let container_state = by_sandbox.remove(r.name.as_str());
            let status = self.state_of(&r, container_state)?;
            rows.push(SandboxRow::new(&r, status));
        }
        // A record forage cannot read is shown, not skipped, and its container is
        // not an orphan.
        for b in bad {
            by_sandbox.remove(b.name.as_str());
            let mut row = SandboxRow::bare(b.name.to_string(), SandboxState::Unreadable(b.problem));
            row.record_problem = Some(format!("{}: {}", b.path.display(), b.detail));
            rows.push(row);
        }
        for (sandbox, _state) in by_sandbox {
            rows.push(SandboxRow::bare(sandbox, SandboxState::Orphan));
        }
        rows.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(rows)
    }

    /// The sandboxes `down --all` takes: every row `list` shows.
    pub async fn all_names(&self) -> Result<Vec<SandboxName>> {
        Ok(self.list().await?.into_iter().filter_map(|r| SandboxName::parse(&r.name).ok()).collect())
    }

    /// Docker's container state, or what forage knows better.
    fn state_of(&self, r: &Record, container: Option<ContainerState>) -> Result<SandboxState> {
        Ok(match r.state {
            RecordState::Ready => container.map(SandboxState::Container).unwrap_or(SandboxState::Missing),
            RecordState::Creating | RecordState::Removing => {
                if self.home.try_lock_sandbox(&r.name)?.is_some() {
                    SandboxState::Broken
                } else if r.state == RecordState::Creating {
                    SandboxState::Creating
                } else {
                    SandboxState::Removing
                }
            }
        })
    }

    pub async fn status(&self, name: &SandboxName) -> Result<SandboxStatus> {
        let record = self.record(name)?;
        // Synced first, so the branch shows the agent's latest commits; skipped
        // while another command (an `up` or `down`) holds the sandbox. jj: only
        // while the agent's container runs (no helper container for a status);
        // otherwise what the last sync brought.
        let mut sync = None;
        if let Some(_lock) = self.home.try_lock_sandbox(name)? {
            let ws = record.workspace.get();
            let inside = self.run_inside_if_running(&record, false).await;
            let wants_inside = ws.inside_command(false).is_some();
            if ws.mode() != Mode::Direct && !ws.is_legacy() && (inside.is_some() || !wants_inside) {
                sync = Some(self.sync_record(&record, inside).await.map_err(|e| e.to_string()));
            }
        }
        let workspace = record.workspace.clone();
        let git = super::blocking(move || workspace.get().status()).await?;
        let container = self.runtime.inspect(&record.container).await?;
        let status = self.state_of(&record, container.as_ref().map(|c| c.state))?;
        let (sync, sync_error) = match sync {
            Some(Ok(report)) => (Some(report), None),
            Some(Err(e)) => (None, Some(e)),
            None => (None, None),
        };
        Ok(SandboxStatus { git, sync, sync_error, row: SandboxRow::new(&record, status), record, container })
    }

    /// What only sandbox `name` holds, which `down` would archive and `down
    /// --discard` would throw away (`None` for a direct workspace, which `down`
    /// never touches). Changes nothing.
    pub async fn at_stake(&self, name: &SandboxName) -> Result<Option<AtStake>> {
        let record = self.record(name)?;
        if !self.holds_work(&record) {
            return Ok(None);
        }
        // A stopped sandbox's jj runs in a helper container, as `down`'s would
        // (before the repository's lock: it may take a while).
        let inside = match self.run_inside_if_running(&record, false).await {
            Some(inside) => Some(inside),
            None => self.run_inside_in_helper(&record, false).await,
        };
        let _repo = match record.workspace.get().repository_lock() {
            Some(repo) => Some(self.lock_repo(repo).await?),
            None => None,
        };
        let workspace = record.workspace.clone();
        super::blocking(move || workspace.get().at_stake(inside)).await
    }

    /// The record of an existing sandbox, or a not-found error naming it.
    pub fn record(&self, name: &SandboxName) -> Result<Record> {
        self.home.load(name)?.ok_or_else(|| not_found(name))
    }
}

pub fn not_found(name: &SandboxName) -> Error {
    Error::not_found(format!("no sandbox named {:?}", name.as_str()))
        .hint_run("{command} shows the existing ones", ["list"])
}
