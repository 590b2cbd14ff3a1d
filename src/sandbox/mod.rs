//! The sandbox lifecycle: the only place that knows in which order things happen.
//! `up` validates, then runs journaled steps and rolls them back on failure;
//! `down` stops the container before it touches the workspace.

pub mod gc;
pub mod journal;
pub mod launcher;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::error::{Error, Result};
use crate::names::{SandboxName, LABEL_HOME, LABEL_MODE, LABEL_SANDBOX, LABEL_TEMPLATE, LABEL_WORKSPACE};
use crate::progress::Progress;
use crate::runtime::image::BuildContext;
use crate::runtime::{ContainerDetails, ContainerSpec, Identity, ImageSource, Mount, Runtime, AGENT_HOME};
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

    fn is_triggered(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }

    fn check(&self) -> Result<()> {
        if self.0.load(Ordering::SeqCst) {
            Err(Error::Other("interrupted; everything this command had created was removed".into()))
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
    /// `--secret NAME=FILE`, each file checked readable.
    pub secrets: Vec<SecretFile>,
}

/// A secret given on the command line: a name and the file holding its value.
/// forage never reads the value; it mounts the file.
#[derive(Debug, Clone, PartialEq)]
pub struct SecretFile {
    pub name: String,
    pub path: PathBuf,
}

pub struct Engine<'a, R: Runtime> {
    pub home: Home,
    pub runtime: &'a R,
    pub progress: &'a dyn Progress,
    pub cancel: Cancel,
}

pub(crate) fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

fn host_cpus() -> f64 {
    std::thread::available_parallelism().map(|n| n.get() as f64).unwrap_or(1.0)
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
        let source = image_source(&req)?;
        let secret_env = secret_env(&req)?;
        let extra_mounts = extra_mounts(&req)?;
        let workspace = match &req.workspace {
            WorkspaceRequest::Direct(path) => WorkspaceRecord::Direct { path: path.path().to_path_buf() },
            WorkspaceRequest::GitWorktree(g) => WorkspaceRecord::GitWorktree(g.workspace.clone()),
            WorkspaceRequest::Jj(j) => WorkspaceRecord::Jj(j.workspace.clone()),
        };

        let lock = self.home.lock_sandbox(&req.name)?;
        ensure_name_free(&self.home, &req.name)?;
        let image = self.runtime.ensure_image(&source, self.progress).await?;
        self.cancel.check()?;

        let container = req.name.container();
        let mut command = t.agent.command.clone();
        command.extend(req.agent_args.iter().cloned());
        let command = launcher::wrap(command, &secret_env, !t.init.is_empty());
        let mut env: BTreeMap<String, String> = BTreeMap::new();
        match &workspace {
            WorkspaceRecord::GitWorktree(g) => env.extend(git::identity_env(&g.repo)),
            WorkspaceRecord::Jj(j) => env.extend(git::identity_env(&j.repo)),
            WorkspaceRecord::Direct { .. } => {}
        }
        env.extend(t.agent.env.clone());
        env.extend(req.env.iter().cloned());
        env.entry("HOME".into()).or_insert_with(|| AGENT_HOME.into());
        env.entry("TERM".into()).or_insert_with(|| "xterm-256color".into());
        env.insert("FORAGE_SANDBOX".into(), req.name.to_string());
        let labels = HashMap::from([
            (LABEL_SANDBOX.to_string(), req.name.to_string()),
            (LABEL_HOME.to_string(), self.home.label()),
            (LABEL_MODE.to_string(), workspace.mode().to_string()),
            (LABEL_TEMPLATE.to_string(), req.template.name.clone()),
            (LABEL_WORKSPACE.to_string(), workspace.host_path().display().to_string()),
        ]);
        let spec = ContainerSpec {
            name: container.clone(),
            image: image.clone(),
            labels,
            command,
            env: env.iter().map(|(k, v)| format!("{k}={v}")).collect(),
            identity: Identity::current(),
            // The workspace's mounts come first, once it exists: a worktree's depend on it.
            mounts: extra_mounts,
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
            init: t.init.clone(),
            secrets: req.secrets.iter().map(|s| s.name.clone()).collect(),
            journal: Vec::new(),
        };
        self.home.create(&record)?;
        if let Err(e) = self.checkpoint("record").await {
            drop(lock);
            self.home.remove(&record.name)?;
            return Err(e);
        }

        match self.run_up_steps(&mut record, spec, read_only, req.start).await {
            Ok(()) => {
                drop(lock);
                Ok(record)
            }
            Err(err) => {
                self.step("rolling back");
                let rollback =
                    self.teardown(&record, Teardown { graceful: false, keep_branch: false, discard: false }).await;
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
            self.step(&format!("creating branch {} in {}", g.branch, g.repo.display()));
            self.begin(record, Step::GitBranch)?;
            if let Err(e) = g.create_branch() {
                // A branch that could not be created is not ours to delete.
                record.journal.pop();
                self.home.save(record)?;
                return Err(e);
            }
            self.checkpoint("git-branch").await?;
            self.step(&format!("checking out worktree {}", g.path.display()));
            self.begin(record, Step::GitWorktree)?;
            g.add_worktree()?;
            self.checkpoint("git-worktree").await?;
        }
        if let WorkspaceRecord::Jj(j) = record.workspace.clone() {
            let _repo = self.home.lock_repo(&j.repo_dir)?;
            self.step(&format!("adding jj workspace {} to {}", j.workspace, j.repo.display()));
            self.begin(record, Step::JjWorkspace)?;
            j.add()?;
            self.checkpoint("jj-workspace").await?;
        }
        let mut mounts = record.workspace.mounts(read_only);
        mounts.append(&mut spec.mounts);
        spec.mounts = mounts;
        self.begin(record, Step::Container { name: spec.name.clone() })?;
        self.step(&format!("creating container {}", spec.name));
        if let Err(e) = self.runtime.create(&spec).await {
            // A name clash means the container is someone else's: never undo it.
            if matches!(e, Error::Conflict(_)) {
                record.journal.pop();
                self.home.save(record)?;
            }
            return Err(e);
        }
        self.checkpoint("container").await?;
        if start {
            self.step(&format!("starting container {}", spec.name));
            self.runtime.start(&spec.name).await?;
            self.checkpoint("start").await?;
            self.run_init(record).await?;
            self.checkpoint("init").await?;
        }
        record.state = RecordState::Ready;
        self.home.save(record)?;
        self.progress.finish();
        self.checkpoint("ready").await
    }

    /// Runs the template's init commands once per container, before the agent
    /// (whose launcher waits for the marker). A failure shows the command's output.
    async fn run_init(&self, record: &Record) -> Result<()> {
        if record.init.is_empty() {
            return Ok(());
        }
        let who = Identity::current();
        let sh = |script: &str| vec!["sh".to_owned(), "-c".to_owned(), script.to_owned()];
        let marker = launcher::INIT_DONE_MARKER;
        let (done, _) = self.runtime.run_captured(&record.container, sh(&format!("test -e {marker}")), who).await?;
        if done == 0 {
            return Ok(());
        }
        for command in &record.init {
            self.step(&format!("init: {command}"));
            let (code, output) = self.runtime.run_captured(&record.container, sh(command), who).await?;
            if code != 0 {
                return Err(Error::Other(format!(
                    "init command `{command}` of template {} failed with exit code {code}; its output:\n{}",
                    record.template,
                    output.trim_end()
                )));
            }
        }
        let (code, output) = self.runtime.run_captured(&record.container, sh(&format!("touch {marker}")), who).await?;
        if code != 0 {
            return Err(Error::Other(format!("cannot start the agent after init: {}", output.trim_end())));
        }
        Ok(())
    }

    /// Called after each step of `up`: stops for a pending Ctrl-C/SIGTERM, and hosts
    /// the fault-injection hooks the crash tests use (docs/guarantees.md):
    /// `FORAGE_DEBUG_KILL_AFTER=<step>` kills this process with SIGKILL right after
    /// that step; `FORAGE_DEBUG_PAUSE_AFTER=<step>` waits there (up to 60 s, or until
    /// a signal arrives) so a test can interrupt `up` at a known point.
    async fn checkpoint(&self, step: &str) -> Result<()> {
        if std::env::var("FORAGE_DEBUG_KILL_AFTER").is_ok_and(|s| s == step) {
            tracing::warn!("FORAGE_DEBUG_KILL_AFTER={step}: killing forage-ctl");
            let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
        }
        if std::env::var("FORAGE_DEBUG_PAUSE_AFTER").is_ok_and(|s| s == step) {
            eprintln!("forage-debug: paused after {step}");
            for _ in 0..600 {
                if self.cancel.is_triggered() {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        }
        self.cancel.check()
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
        let scope = UndoScope { workspaces_dir: &self.home.workspaces_dir(), keep_branch: how.keep_branch };
        let (containers, workspace_steps): (Vec<&Step>, Vec<&Step>) =
            record.journal.iter().partition(|s| matches!(s, Step::Container { .. }));
        if how.graceful && !containers.is_empty() {
            self.runtime.stop(&record.container, record.stop_timeout).await?;
        }
        for step in containers {
            step.undo(record, self.runtime, &scope).await?;
        }

        let _repo_lock = match &record.workspace {
            WorkspaceRecord::GitWorktree(g) => Some(self.home.lock_repo(&g.common_dir)?),
            WorkspaceRecord::Jj(j) => Some(self.home.lock_repo(&j.repo_dir)?),
            WorkspaceRecord::Direct { .. } => None,
        };
        // Work exists only on a branch or in a jj workspace this sandbox created.
        let archive = match &record.workspace {
            WorkspaceRecord::GitWorktree(g) if record.journal.contains(&Step::GitBranch) => {
                Some((g.repo.clone(), g.common_dir.clone(), g.branch.clone()))
            }
            WorkspaceRecord::Jj(j) if record.journal.contains(&Step::JjWorkspace) => {
                Some((j.repo.clone(), j.repo_dir.clone(), j.workspace.clone()))
            }
            _ => None,
        };
        let archived = match archive {
            Some((repo, common_dir, branch)) if !how.discard => {
                self.step("archiving the agent's work");
                let result = match &record.workspace {
                    WorkspaceRecord::GitWorktree(g) => g.archive(&record.name, &timestamp()),
                    WorkspaceRecord::Jj(j) => j.archive(&record.name, &timestamp()),
                    WorkspaceRecord::Direct { .. } => Ok(None),
                };
                let archived = result.map_err(|e| {
                    Error::WouldLoseData(format!(
                        "could not archive the work of sandbox {} ({e}); nothing was deleted: fix the cause and retry, or throw the work away with `forage-ctl down --discard {}`",
                        record.name, record.name
                    ))
                })?;
                if let Some(a) = &archived {
                    self.home.add_archive(&ArchiveEntry {
                        name: record.name.clone(),
                        mode: record.workspace.mode(),
                        refname: a.refname.clone(),
                        commit: a.commit.clone(),
                        repo,
                        common_dir,
                        branch,
                        template: record.template.clone(),
                        archived_at: now(),
                    })?;
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
            let orphan = self.runtime.list(&self.home.label()).await?.into_iter().find(|c| c.sandbox == name.as_str());
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
        let how = Teardown { graceful: true, keep_branch: opts.keep_branch, discard: opts.discard };
        let archived = self.teardown(&record, how).await?;
        self.progress.finish();
        drop(lock);
        Ok(DownReport {
            name: record.name.clone(),
            container: record.container.clone(),
            mode: Some(record.workspace.mode()),
            workspace: Some(record.workspace.host_path().display().to_string()),
            branch: record.workspace.branch().map(str::to_owned),
            kept_branch: opts.keep_branch && record.workspace.mode() == Mode::GitWorktree,
            archived,
        })
    }

    /// Every sandbox of this home, from the records plus one Engine API call.
    pub async fn list(&self) -> Result<Vec<SandboxRow>> {
        let records = self.home.load_all()?;
        let containers = self.runtime.list(&self.home.label()).await?;
        let mut by_sandbox: HashMap<String, String> = containers.into_iter().map(|c| (c.sandbox, c.state)).collect();
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
            Some(w) => all.into_iter().rev().find(|a| a.refname == w || a.refname.ends_with(&format!("/{w}"))),
            None => all.into_iter().next_back(),
        };
        found.ok_or_else(|| {
            Error::NotFound(match wanted {
                Some(w) => {
                    format!("sandbox {name} has no archive {w:?}; FORAGE_HOME/archives/{name}.json lists its archives")
                }
                None => format!(
                    "sandbox {name} has no archived work (down archives only work that would otherwise be lost)"
                ),
            })
        })
    }

    /// Brings archived work back as a branch (default `forage-<name>`) at the
    /// archive commit; uncommitted files come back as that commit's changes.
    pub fn restore_branch(&self, entry: &ArchiveEntry, branch: &str) -> Result<()> {
        let _repo = self.home.lock_repo(&entry.common_dir)?;
        match entry.mode {
            Mode::Jj => crate::workspace::jj::restore_bookmark(&entry.repo, &entry.commit, branch),
            _ => git::restore_branch(&entry.common_dir, &entry.refname, branch),
        }
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
            WorkspaceRecord::Jj(j) => Some(GitStatus {
                branch: j.workspace.clone(),
                base: j.base.join(","),
                base_ref: None,
                ahead: j.work_count()?,
                behind: 0,
                dirty: j.changed_files()?,
            }),
            WorkspaceRecord::Direct { .. } => None,
        };
        let container = self.runtime.inspect(&record.container).await?;
        let state = container.as_ref().map(|c| c.state.as_str());
        let status = self.status_word(&record, state)?;
        Ok(SandboxStatus { git, row: SandboxRow::new(&record, status), record, container })
    }

    /// The record of an existing sandbox, or a not-found error naming it.
    pub fn record(&self, name: &SandboxName) -> Result<Record> {
        self.home.load(name)?.ok_or_else(|| not_found(name))
    }

    pub async fn start(&self, name: &SandboxName) -> Result<()> {
        let _lock = self.home.lock_sandbox(name)?;
        let record = self.ready_record(name).await?;
        self.runtime.start(&record.container).await?;
        if let Err(e) = self.run_init(&record).await {
            // The agent's launcher would wait for init forever: stop it instead.
            self.runtime.stop(&record.container, record.stop_timeout).await?;
            return Err(e);
        }
        Ok(())
    }

    pub async fn stop(&self, name: &SandboxName) -> Result<()> {
        let _lock = self.home.lock_sandbox(name)?;
        let record = self.ready_record(name).await?;
        self.runtime.stop(&record.container, record.stop_timeout).await
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

/// Where the image comes from: `--image`, else the template's image, build or host tools.
fn image_source(req: &UpRequest) -> Result<ImageSource> {
    let t = &req.template.template;
    let name = req.template.name.clone();
    if let Some(image) = req.image.clone().or_else(|| t.image.clone()) {
        return Ok(ImageSource::Reference(image));
    }
    if let Some(spec) = &t.host_image {
        return Ok(ImageSource::Host { template: name, spec: spec.clone() });
    }
    let build = t.build.as_ref().expect("templates are validated to name an image source");
    let context = match (req.template.dir(), req.template.builtin_dockerfile) {
        (_, Some(dockerfile)) => BuildContext::Embedded { dockerfile },
        (Some(dir), None) => BuildContext::Dir { dir: dir.join(&build.context), dockerfile: build.dockerfile.clone() },
        (None, None) => return Err(Error::other(format!("template {name} has `build` but no directory to build in"))),
    };
    Ok(ImageSource::Build { template: name, context })
}

/// The agent's secret environment: (VAR, secret name) for each secret the template
/// asks for, all of which must have been given.
fn secret_env(req: &UpRequest) -> Result<Vec<(String, String)>> {
    let t = &req.template;
    let mut out = Vec::new();
    for (var, secret) in &t.template.agent.secrets {
        if !req.secrets.iter().any(|s| &s.name == secret) {
            return Err(Error::Usage(format!(
                "template {} needs the secret {secret:?} (for {var}): pass --secret {secret}=FILE, a file holding the value",
                t.name
            )));
        }
        out.push((var.clone(), secret.clone()));
    }
    Ok(out)
}

/// True for a Unix socket, or a directory holding the engine's socket (DOCKER_HOST's
/// or the default one): mounting either would let the agent drive Docker.
fn exposes_engine_socket(source: &std::path::Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    if std::fs::metadata(source).is_ok_and(|m| m.file_type().is_socket()) {
        return true;
    }
    let configured = std::env::var("DOCKER_HOST").ok().and_then(|h| h.strip_prefix("unix://").map(PathBuf::from));
    [configured, Some(PathBuf::from("/var/run/docker.sock")), Some(PathBuf::from("/run/docker.sock"))]
        .into_iter()
        .flatten()
        .filter_map(|s| s.canonicalize().ok())
        .any(|socket| socket.starts_with(source))
}

/// Everything about an `up` that can be checked without Docker: the image source,
/// the secrets the template needs, the mounts. `up` runs it again itself.
pub fn preflight(req: &UpRequest) -> Result<()> {
    image_source(req)?;
    secret_env(req)?;
    extra_mounts(req)?;
    Ok(())
}

/// The template's extra mounts (sources resolved and checked) and one read-only
/// mount per secret file at /run/secrets/<name>.
fn extra_mounts(req: &UpRequest) -> Result<Vec<Mount>> {
    let mut mounts = Vec::new();
    for m in &req.template.template.mounts {
        let source = if let Some(rest) = m.source.strip_prefix("~/") {
            let home = std::env::var_os("HOME")
                .ok_or_else(|| Error::Usage("HOME is not set, so `~/` in a mount cannot be resolved".into()))?;
            PathBuf::from(home).join(rest)
        } else if m.source.starts_with('/') {
            PathBuf::from(&m.source)
        } else {
            match req.template.dir() {
                Some(dir) => dir.join(&m.source),
                None => PathBuf::from(&m.source),
            }
        };
        let source = source.canonicalize().map_err(|e| {
            Error::Usage(format!(
                "template {} mounts {} ({e}); create it or remove the mount from the template",
                req.template.name,
                source.display()
            ))
        })?;
        if exposes_engine_socket(&source) {
            return Err(Error::Usage(format!(
                "template {} mounts {}, which is or contains the Docker engine's socket; forage never hands an agent the engine",
                req.template.name,
                source.display()
            )));
        }
        mounts.push(Mount { source, target: m.target.clone(), read_only: m.read_only });
    }
    for s in &req.secrets {
        mounts.push(Mount {
            source: s.path.clone(),
            target: format!("{}/{}", launcher::SECRETS_DIR, s.name),
            read_only: true,
        });
    }
    Ok(mounts)
}

/// Fails with `Conflict` if a sandbox of this name exists. `up` checks this first,
/// before validating its workspace, so that the message is about the name; and
/// again under the sandbox lock, where it counts.
pub fn ensure_name_free(home: &Home, name: &SandboxName) -> Result<()> {
    if home.load(name)?.is_some() {
        return Err(Error::Conflict(format!(
            "sandbox {:?} already exists; pick another name or remove it with `forage-ctl down {name}`",
            name.as_str()
        )));
    }
    Ok(())
}

fn not_found(name: &SandboxName) -> Error {
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

#[derive(Debug, Clone, Copy, Default)]
pub struct DownOptions {
    /// Keep the sandbox's branch instead of deleting it.
    pub keep_branch: bool,
    /// Throw uncommitted and unmerged work away instead of archiving it.
    pub discard: bool,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Teardown {
    /// Stop the agent with its stop signal first (down), or just kill it (rollback).
    pub(crate) graceful: bool,
    pub(crate) keep_branch: bool,
    pub(crate) discard: bool,
}

/// `20261121T080203Z`: sortable, and valid in a git ref name.
pub(crate) fn timestamp() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now()).to_string().replace(['-', ':'], "")
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
