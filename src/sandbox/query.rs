//! What forage tells about sandboxes: `list` (records plus one Engine API call)
//! and `status`.

use std::collections::HashMap;

use serde::Serialize;

use super::journal::Step;
use super::{Engine, ImportHostView, Synced};
use crate::error::{Error, Result};
use crate::names::SandboxName;
use crate::runtime::{ContainerDetails, Runtime};
use crate::store::{Record, RecordState};
use crate::workspace::{AtStake, WorkspaceRecord};

impl<R: Runtime> Engine<'_, R> {
    /// Every sandbox of this home, from the records plus one Engine API call.
    pub async fn list(&self) -> Result<Vec<SandboxRow>> {
        let (records, bad) = self.home.load_all()?;
        let containers = self.runtime.list(&self.home.label()).await?;
        let mut by_sandbox: HashMap<String, String> = containers.into_iter().map(|c| (c.sandbox, c.state)).collect();
        let mut rows = Vec::with_capacity(records.len() + bad.len());
        for r in records {
            let container_state = by_sandbox.remove(r.name.as_str());
            let status = self.status_word(&r, container_state.as_deref())?;
            rows.push(SandboxRow::new(&r, status));
        }
        // A record forage cannot read is shown, not skipped, and its container is
        // not an orphan.
        for b in bad {
            by_sandbox.remove(b.name.as_str());
            rows.push(SandboxRow {
                name: b.name.to_string(),
                mode: "-".into(),
                template: "-".into(),
                status: b.problem.word().into(),
                branch: None,
                workspace: b.path.display().to_string(),
                created_at: None,
            });
        }
        for (sandbox, _state) in by_sandbox {
            rows.push(SandboxRow {
                name: sandbox,
                mode: "-".into(),
                template: "-".into(),
                status: "orphan".into(),
                branch: None,
                workspace: "-".into(),
                created_at: None,
            });
        }
        rows.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(rows)
    }

    /// One word for `list`: Docker's container state, or what forage knows better.
    fn status_word(&self, r: &Record, container_state: Option<&str>) -> Result<String> {
        Ok(match r.state {
            RecordState::Ready => container_state.unwrap_or("missing").to_owned(),
            RecordState::Creating | RecordState::Removing => {
                if self.home.try_lock_sandbox(&r.name)?.is_some() {
                    "broken".into()
                } else if r.state == RecordState::Creating {
                    "creating".into()
                } else {
                    "removing".into()
                }
            }
        })
    }

    pub async fn status(&self, name: &SandboxName) -> Result<SandboxStatus> {
        let record = self.record(name)?;
        // Synced first, so the branch shows the agent's latest commits; skipped
        // while another command (an `up` or `down`) holds the sandbox.
        let mut sync = None;
        if let Some(_lock) = self.home.try_lock_sandbox(name)? {
            sync = match &record.workspace {
                WorkspaceRecord::GitWorktree(_) => Some(self.sync_record(&record).await.map(Synced::Git)),
                // jj: only while the agent's container runs (no helper container
                // for a status); otherwise what the last sync brought.
                WorkspaceRecord::Jj(j) if !j.is_legacy() => {
                    match self.jj_state_if_running(&record, j, ImportHostView::No).await {
                        Some(Ok(state)) => Some(self.sync_jj(&record, j, &state).await.map(Synced::Jj)),
                        Some(Err(why)) => Some(Err(Error::Workspace(why))),
                        None => None,
                    }
                }
                _ => None,
            }
            .map(|r| r.map_err(|e| e.to_string()));
        }
        let git = match &record.workspace {
            WorkspaceRecord::GitWorktree(g) => {
                let (ahead, behind) = g.ahead_behind()?.unwrap_or((0, 0));
                Some(GitStatus {
                    branch: g.branch.clone(),
                    base: g.base.clone(),
                    base_ref: g.base_ref.clone(),
                    ahead,
                    behind,
                    dirty: g.dirty_files()?,
                })
            }
            WorkspaceRecord::Jj(j) => Some(GitStatus {
                branch: record.workspace.branch().unwrap_or_default().to_owned(),
                base: j.base.join(","),
                base_ref: None,
                ahead: j.last_sync().map(|s| s.changes).unwrap_or(0),
                behind: 0,
                dirty: j.changed_files()?,
            }),
            WorkspaceRecord::Direct { .. } => None,
        };
        let container = self.runtime.inspect(&record.container).await?;
        let state = container.as_ref().map(|c| c.state.as_str());
        let status = self.status_word(&record, state)?;
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
        match &record.workspace {
            WorkspaceRecord::GitWorktree(g) if record.journal.contains(&Step::GitBranch) => {
                let _repo = self.lock_repo(&g.common_dir).await?;
                g.at_stake().map(Some)
            }
            WorkspaceRecord::Jj(j) if !j.is_legacy() && record.journal.contains(&Step::JjWorkspace) => {
                // A stopped sandbox's jj runs in a helper container, as `down`'s would.
                let state = match self.jj_state_if_running(&record, j, ImportHostView::No).await {
                    Some(state) => state,
                    None => self.jj_state_in_helper(&record, j, ImportHostView::No).await,
                };
                j.at_stake(state.ok().as_ref()).map(Some)
            }
            _ => Ok(None),
        }
    }

    /// The record of an existing sandbox, or a not-found error naming it.
    pub fn record(&self, name: &SandboxName) -> Result<Record> {
        self.home.load(name)?.ok_or_else(|| not_found(name))
    }
}

pub fn not_found(name: &SandboxName) -> Error {
    Error::NotFound(format!("no sandbox named {:?}; `forage-ctl list` shows the existing ones", name.as_str()))
}

/// What `status` tells of a git-worktree sandbox.
#[derive(Debug, Clone, Serialize)]
pub struct GitStatus {
    pub branch: String,
    pub base: String,
    pub base_ref: Option<String>,
    /// Commits on the branch not on the base.
    pub ahead: usize,
    /// Commits on the base (its current tip) not on the branch.
    pub behind: usize,
    /// Uncommitted files: staged, unstaged, untracked and not ignored.
    pub dirty: Vec<String>,
}

/// One row of `list`.
#[derive(Debug, Clone, Serialize)]
pub struct SandboxRow {
    pub name: String,
    pub mode: String,
    pub template: String,
    pub status: String,
    pub branch: Option<String>,
    pub workspace: String,
    /// Seconds since the Unix epoch.
    pub created_at: Option<u64>,
}

impl SandboxRow {
    fn new(r: &Record, status: String) -> Self {
        SandboxRow {
            name: r.name.to_string(),
            mode: r.workspace.mode().to_string(),
            template: r.template.clone(),
            status,
            branch: r.workspace.branch().map(str::to_owned),
            workspace: r.workspace.host_path().display().to_string(),
            created_at: Some(r.created_at),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct SandboxStatus {
    pub git: Option<GitStatus>,
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
