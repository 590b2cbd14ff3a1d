//! The sandbox lifecycle: the only place that knows in which order things happen.
//! `up` validates, then runs journaled steps and rolls them back on failure;
//! `down` stops the container before it touches the workspace.

pub mod journal;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::error::{Error, Result};
use crate::names::{
    SandboxName, LABEL_HOME, LABEL_MODE, LABEL_SANDBOX, LABEL_TEMPLATE, LABEL_WORKSPACE,
};
use crate::progress::Progress;
use crate::runtime::{ContainerDetails, ContainerSpec, Identity, ImageSource, Runtime, AGENT_HOME};
use crate::store::{ArchiveEntry, Home, Record, RecordState, RECORD_VERSION};
use crate::template::{self, Network};
use crate::workspace::git::{self, Archived};
use crate::workspace::{Mode, WorkspaceRecord, WorkspaceRequest};
use journal::{Step, UndoScope};

/// Set by the CLI's signal handlers; `up` checks it between steps and rolls back.
/// Steps are never cut off half way, so an undo never races its own effect.
#[derive(Debug, Clone, Default)]
pub struct Cancel(Arc<AtomicBool>);

impl Cancel {
    pub fn trigger(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    fn check(&self) -> Result<()> {
        if self.0.load(Ordering::SeqCst) {
            Err(Error::Other(
                "interrupted; everything this command had created was removed".into(),
            ))
        } else {
            Ok(())
        }
    }
}

/// A fully validated `up`.
#[derive(Debug, Clone)]
pub struct UpRequest {
    pub name: SandboxName,
    pub template: template::Resolved,
    pub workspace: WorkspaceRequest,
    pub image: Option<String>,
    pub env: Vec<(String, String)>,
    pub network: Option<Network>,
    pub memory: Option<String>,
    pub cpus: Option<f64>,
    pub read_only: bool,
    pub start: bool,
    pub agent_args: Vec<String>,
}

pub struct Engine<'a, R: Runtime> {
    pub home: Home,
    pub runtime: &'a R,
    pub progress: &'a dyn Progress,
    pub cancel: Cancel,
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn host_cpus() -> f64 {
    std::thread::available_parallelism()
        .map(|n| n.get() as f64)
        .unwrap_or(1.0)
}

impl<R: Runtime> Engine<'_, R> {
    pub async fn up(&self, req: UpRequest) -> Result<Record> {
        let t = &req.template.template;
        let memory = req.memory.as_deref().unwrap_or(&t.resources.memory);
        let memory_bytes = template::parse_memory(memory).map_err(Error::Usage)?;
        let cpus = req.cpus.unwrap_or(t.resources.cpus);
        if cpus.is_nan() || cpus <= 0.0 {
            return Err(Error::Usage(format!("--cpus must be above 0, not {cpus}")));
        }
        let source = match (&req.image, &t.image, &t.host_image) {
            (Some(image), _, _) | (None, Some(image), _) => ImageSource::Reference(image.clone()),
            (None, None, Some(spec)) => ImageSource::Host {
                template: req.template.name.clone(),
                spec: spec.clone(),
            },
            (None, None, None) => unreachable!("templates are validated to name an image"),
        };
        let workspace = match &req.workspace {
            WorkspaceRequest::Direct(path) => WorkspaceRecord::Direct {
                path: path.path().to_path_buf(),
            },
            WorkspaceRequest::GitWorktree(g) => WorkspaceRecord::GitWorktree(g.workspace.clone()),
        };

        let lock = self.home.lock_sandbox(&req.name)?;
        if self.home.load(&req.name)?.is_some() {
            return Err(Error::Conflict(format!(
                "sandbox {:?} already exists; pick another name or remove it with `forage-ctl down {}`",
                req.name.as_str(),
                req.name
            )));
        }
        let image = self.runtime.ensure_image(&source, self.progress).await?;
        self.cancel.check()?;

        let container = req.name.container();
        let mut command = t.agent.command.clone();
        command.extend(req.agent_args.iter().cloned());
        let mut env: BTreeMap<String, String> = BTreeMap::new();
        if let WorkspaceRecord::GitWorktree(g) = &workspace {
            env.extend(git::identity_env(&g.repo));
        }
        env.extend(t.agent.env.clone());
        env.extend(req.env.iter().cloned());
        env.entry("HOME".into())
            .or_insert_with(|| AGENT_HOME.into());
        env.entry("TERM".into())
            .or_insert_with(|| "xterm-256color".into());
        env.insert("FORAGE_SANDBOX".into(), req.name.to_string());
        let labels = HashMap::from([
            (LABEL_SANDBOX.to_string(), req.name.to_string()),
            (LABEL_HOME.to_string(), self.home.label()),
            (LABEL_MODE.to_string(), workspace.mode().to_string()),
            (LABEL_TEMPLATE.to_string(), req.template.name.clone()),
            (
                LABEL_WORKSPACE.to_string(),
                workspace.host_path().display().to_string(),
            ),
        ]);
        let spec = ContainerSpec {
            name: container.clone(),
            image: image.clone(),
            labels,
            command,
            env: env.iter().map(|(k, v)| format!("{k}={v}")).collect(),
            identity: Identity::current(),
            // Filled in once the workspace exists: a worktree's mounts depend on it.
            mounts: Vec::new(),
            memory_bytes,
            nano_cpus: (cpus.min(host_cpus()) * 1e9) as i64,
            pids: t.resources.pids,
            network: req.network.unwrap_or(t.network),
            stop_signal: t.stop_signal.clone(),
            stop_timeout: t.stop_timeout,
        };

        let read_only = req.read_only || t.workspace.read_only;
        let mut record = Record {
            version: RECORD_VERSION,
            name: req.name.clone(),
            state: RecordState::Creating,
            created_at: now(),
            template: req.template.name.clone(),
            image,
            container,
            workspace,
            stop_timeout: t.stop_timeout,
            journal: Vec::new(),
        };
        self.home.create(&record)?;

        match self
            .run_up_steps(&mut record, spec, read_only, req.start)
            .await
        {
            Ok(()) => {
                drop(lock);
                Ok(record)
            }
            Err(err) => {
                self.step("rolling back");
                let rollback = self
                    .teardown(
                        &record,
                        Teardown {
                            graceful: false,
                            keep_branch: false,
                            discard: false,
                        },
                    )
                    .await;
                self.progress.finish();
                drop(lock);
                match rollback {
                    Ok(_) => Err(err),
                    Err(undo_err) => Err(err.with_note(format!(
                        "rolling back also failed ({undo_err}); `forage-ctl down {}` finishes the cleanup",
                        record.name
                    ))),
                }
            }
        }
    }

    /// Records each step, then performs it.
    async fn run_up_steps(
        &self,
        record: &mut Record,
        mut spec: ContainerSpec,
        read_only: bool,
        start: bool,
    ) -> Result<()> {
        if let WorkspaceRecord::GitWorktree(g) = record.workspace.clone() {
            // Only the repository metadata changes are serialised per repository;
            // the lock is released before the container is created and started.
            let _repo = self.home.lock_repo(&g.common_dir)?;
            self.step(&format!(
                "creating branch {} in {}",
                g.branch,
                g.repo.display()
            ));
            self.begin(record, Step::GitBranch)?;
            if let Err(e) = g.create_branch() {
                // A branch that could not be created is not ours to delete.
                record.journal.pop();
                self.home.save(record)?;
                return Err(e);
            }
            self.cancel.check()?;
            self.step(&format!("checking out worktree {}", g.path.display()));
            self.begin(record, Step::GitWorktree)?;
            g.add_worktree()?;
            self.cancel.check()?;
        }
        spec.mounts = record.workspace.mounts(read_only);
        self.begin(
            record,
            Step::Container {
                name: spec.name.clone(),
            },
        )?;
        self.step(&format!("creating container {}", spec.name));
        if let Err(e) = self.runtime.create(&spec).await {
            // A name clash means the container is someone else's: never undo it.
            if matches!(e, Error::Conflict(_)) {
                record.journal.pop();
                self.home.save(record)?;
            }
            return Err(e);
        }
        self.cancel.check()?;
        if start {
            self.step(&format!("starting container {}", spec.name));
            self.runtime.start(&spec.name).await?;
            self.cancel.check()?;
        }
        record.state = RecordState::Ready;
        self.home.save(record)?;
        self.progress.finish();
        Ok(())
    }

    /// Reports a step to the user (progress) and to the log (-v).
    fn step(&self, message: &str) {
        tracing::info!("{message}");
        self.progress.step(message);
    }

    fn begin(&self, record: &mut Record, step: Step) -> Result<()> {
        record.journal.push(step);
        self.home.save(record)
    }

    /// Removes a sandbox in the one safe order: the container (so nothing writes to
    /// the workspace any more), then the agent's work archived, then the journal
    /// undone in reverse, then the record. Every part tolerates being half done.
    async fn teardown(&self, record: &Record, how: Teardown) -> Result<Option<Archived>> {
        // The container goes first, so nothing writes to the workspace any more.
        // Only a container this sandbox's journal says it created is touched.
        let scope = UndoScope {
            workspaces_dir: &self.home.workspaces_dir(),
            keep_branch: how.keep_branch,
        };
        let (containers, workspace_steps): (Vec<&Step>, Vec<&Step>) = record
            .journal
            .iter()
            .partition(|s| matches!(s, Step::Container { .. }));
        if how.graceful && !containers.is_empty() {
            self.runtime
                .stop(&record.container, record.stop_timeout)
                .await?;
        }
        for step in containers {
            step.undo(record, self.runtime, &scope).await?;
        }

        let _repo_lock = match &record.workspace {
            WorkspaceRecord::GitWorktree(g) => Some(self.home.lock_repo(&g.common_dir)?),
            WorkspaceRecord::Direct { .. } => None,
        };
        let archived = match &record.workspace {
            // Work exists only on a branch this sandbox created.
            WorkspaceRecord::GitWorktree(g)
                if !how.discard && record.journal.contains(&Step::GitBranch) =>
            {
                self.step("archiving the agent's work");
                let archived = g.archive(&record.name, &timestamp()).map_err(|e| {
                    Error::WouldLoseData(format!(
                        "could not archive the work of sandbox {} ({e}); nothing was deleted: fix the cause and retry, or throw the work away with `forage-ctl down --discard {}`",
                        record.name, record.name
                    ))
                })?;
                if let Some(a) = &archived {
                    self.home.add_archive(&ArchiveEntry::new(record, g, a))?;
                }
                archived
            }
            _ => None,
        };
        for step in workspace_steps.into_iter().rev() {
            step.undo(record, self.runtime, &scope).await?;
        }
        self.home.remove(&record.name)?;
        Ok(archived)
    }

    /// Tears a sandbox down: the container first, then (once it is gone) the
    /// workspace, then the record. Works on half-made and half-removed sandboxes.
    pub async fn down(&self, name: &SandboxName, opts: DownOptions) -> Result<DownReport> {
        let lock = self.home.lock_sandbox(name)?;
        let Some(mut record) = self.home.load(name)? else {
            // No record: only a container this home labelled (e.g. a record deleted
            // by hand) is ours to remove.
            let orphan = self
                .runtime
                .list(&self.home.label())
                .await?
                .into_iter()
                .find(|c| c.sandbox == name.as_str());
            return match orphan {
                Some(c) => {
                    self.runtime.remove(&c.name).await?;
                    drop(lock);
                    Ok(DownReport {
                        name: name.clone(),
                        container: c.name,
                        mode: None,
                        workspace: None,
                        branch: None,
                        kept_branch: false,
                        archived: None,
                    })
                }
                None => Err(not_found(name)),
            };
        };
        record.state = RecordState::Removing;
        self.home.save(&record)?;

        self.step(&format!("stopping container {}", record.container));
        let how = Teardown {
            graceful: true,
            keep_branch: opts.keep_branch,
            discard: opts.discard,
        };
        let archived = self.teardown(&record, how).await?;
        self.progress.finish();
        drop(lock);
        Ok(DownReport {
            name: record.name.clone(),
            container: record.container.clone(),
            mode: Some(record.workspace.mode()),
            workspace: Some(record.workspace.host_path().display().to_string()),
            branch: record.workspace.branch().map(str::to_owned),
            kept_branch: opts.keep_branch && record.workspace.branch().is_some(),
            archived,
        })
    }

    /// Every sandbox of this home, from the records plus one Engine API call.
    pub async fn list(&self) -> Result<Vec<SandboxRow>> {
        let records = self.home.load_all()?;
        let containers = self.runtime.list(&self.home.label()).await?;
        let mut by_sandbox: HashMap<String, String> = containers
            .into_iter()
            .map(|c| (c.sandbox, c.state))
            .collect();
        let mut rows = Vec::with_capacity(records.len());
        for r in records {
            let container_state = by_sandbox.remove(r.name.as_str());
            let status = self.status_word(&r, container_state.as_deref())?;
            rows.push(SandboxRow::new(&r, status));
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

    /// The archive to restore: the one named (by ref or timestamp), else the newest.
    pub fn find_archive(&self, name: &SandboxName, wanted: Option<&str>) -> Result<ArchiveEntry> {
        let all = self.home.archives(name)?;
        let found = match wanted {
            Some(w) => all
                .into_iter()
                .rev()
                .find(|a| a.refname == w || a.refname.ends_with(&format!("/{w}"))),
            None => all.into_iter().next_back(),
        };
        found.ok_or_else(|| {
            Error::NotFound(match wanted {
                Some(w) => format!("sandbox {name} has no archive {w:?}; `git for-each-ref refs/forage/archive/{name}` in its repository lists them"),
                None => format!("sandbox {name} has no archived work (down archives only work that would otherwise be lost)"),
            })
        })
    }

    /// Brings archived work back as a branch (default `forage-<name>`) at the
    /// archive commit; uncommitted files come back as that commit's changes.
    pub fn restore_branch(&self, entry: &ArchiveEntry, branch: &str) -> Result<()> {
        let _repo = self.home.lock_repo(&entry.common_dir)?;
        git::restore_branch(&entry.common_dir, &entry.refname, branch)
    }

    pub async fn status(&self, name: &SandboxName) -> Result<SandboxStatus> {
        let record = self.record(name)?;
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
            WorkspaceRecord::Direct { .. } => None,
        };
        let container = self.runtime.inspect(&record.container).await?;
        let state = container.as_ref().map(|c| c.state.as_str());
        let status = self.status_word(&record, state)?;
        Ok(SandboxStatus {
            git,
            row: SandboxRow::new(&record, status),
            record,
            container,
        })
    }

    /// The record of an existing sandbox, or a not-found error naming it.
    pub fn record(&self, name: &SandboxName) -> Result<Record> {
        self.home.load(name)?.ok_or_else(|| not_found(name))
    }

    pub async fn start(&self, name: &SandboxName) -> Result<()> {
        let _lock = self.home.lock_sandbox(name)?;
        let record = self.ready_record(name).await?;
        self.runtime.start(&record.container).await
    }

    pub async fn stop(&self, name: &SandboxName) -> Result<()> {
        let _lock = self.home.lock_sandbox(name)?;
        let record = self.ready_record(name).await?;
        self.runtime
            .stop(&record.container, record.stop_timeout)
            .await
    }

    pub async fn restart(&self, name: &SandboxName) -> Result<()> {
        self.stop(name).await?;
        self.start(name).await
    }

    async fn ready_record(&self, name: &SandboxName) -> Result<Record> {
        let record = self.record(name)?;
        if record.state != RecordState::Ready {
            return Err(Error::Conflict(format!(
                "sandbox {name} is half made or half removed; finish with `forage-ctl down {name}`"
            )));
        }
        if self.runtime.inspect(&record.container).await?.is_none() {
            return Err(Error::NotFound(format!(
                "the container of sandbox {name} ({}) is gone; recreate it with `forage-ctl down {name}` and `forage-ctl up {name} …`",
                record.container
            )));
        }
        Ok(record)
    }
}

impl ArchiveEntry {
    fn new(record: &Record, g: &git::GitWorkspace, a: &Archived) -> Self {
        ArchiveEntry {
            name: record.name.clone(),
            refname: a.refname.clone(),
            commit: a.commit.clone(),
            repo: g.repo.clone(),
            common_dir: g.common_dir.clone(),
            branch: g.branch.clone(),
            template: record.template.clone(),
            archived_at: now(),
        }
    }
}

fn not_found(name: &SandboxName) -> Error {
    Error::NotFound(format!(
        "no sandbox named {:?}; `forage-ctl list` shows the existing ones",
        name.as_str()
    ))
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

#[derive(Debug, Clone, Copy, Default)]
pub struct DownOptions {
    /// Keep the sandbox's branch instead of deleting it.
    pub keep_branch: bool,
    /// Throw uncommitted and unmerged work away instead of archiving it.
    pub discard: bool,
}

#[derive(Debug, Clone, Copy)]
struct Teardown {
    /// Stop the agent with its stop signal first (down), or just kill it (rollback).
    graceful: bool,
    keep_branch: bool,
    discard: bool,
}

/// `20261121T080203Z`: sortable, and valid in a git ref name.
fn timestamp() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now())
        .to_string()
        .replace(['-', ':'], "")
}

#[derive(Debug, Clone, Serialize)]
pub struct DownReport {
    pub name: SandboxName,
    pub container: String,
    pub mode: Option<Mode>,
    pub workspace: Option<String>,
    pub branch: Option<String>,
    pub kept_branch: bool,
    pub archived: Option<Archived>,
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
    #[serde(flatten)]
    pub row: SandboxRow,
    pub record: Record,
    pub container: Option<ContainerDetails>,
}
