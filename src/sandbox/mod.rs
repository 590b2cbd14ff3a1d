//! The sandbox lifecycle: the only place that knows in which order things happen.
//! `up` validates, then runs journaled steps and rolls them back on failure;
//! `down` stops the container before it touches the workspace.

pub mod gc;
pub mod journal;
pub mod launcher;
mod lifecycle;
mod plan;
mod query;
mod reset;
mod sync;
#[cfg(test)]
mod tests;

pub use plan::{preflight, SecretFile, UpOptions, UpRequest};
pub use query::{not_found, GitStatus, SandboxRow, SandboxStatus};
use sync::ImportHostView;
pub use sync::Synced;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::error::{Error, Result};
use crate::names::SandboxName;
use crate::progress::Progress;
use crate::runtime::{ContainerSpec, Identity, Runtime};
use crate::store::{ArchiveEntry, Home, Record, RecordState, RECORD_VERSION};
use crate::workspace::git::{ArchiveOutcome, Archived, NotArchived};
use crate::workspace::{AtStake, Mode, WorkspaceRecord, WorkspaceRequest};
use journal::{Step, UndoScope};
use plan::{container_spec, extra_mounts, image_source, limits, secret_env};

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
            Err(Error::Other("interrupted".into()))
        } else {
            Ok(())
        }
    }
}

pub struct Engine<'a, R: Runtime> {
    pub home: Home,
    pub runtime: &'a R,
    pub progress: &'a dyn Progress,
    pub cancel: Cancel,
}

/// How long `up`, `start` and `reset` watch a freshly started agent for dying,
/// at least: the engine ends a dead container's output 30-65 ms after `start`
/// returns on the machine in docs/benchmarks.md. On a machine the engine is
/// busy on, that grows with the start itself (up to 106 ms after a 650 ms start,
/// which a fixed 100 ms missed while the test suite ran; at most a sixth of the
/// start's time in every run measured), so the watch lasts a third of the
/// start's time when that is longer.
const STARTUP_WATCH: std::time::Duration = std::time::Duration::from_millis(100);

pub(crate) fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// Now, as (seconds, nanoseconds) since the epoch, less two seconds: file times
/// come from the kernel's coarse clock (and from whole seconds on some file
/// systems), so a file written just after this moment may carry an older time.
/// Comparing with this errs on the side of reading the file again.
pub(crate) fn now_precise() -> (i64, i64) {
    let d = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    (d.as_secs() as i64 - 2, d.subsec_nanos() as i64)
}

impl<R: Runtime> Engine<'_, R> {
    pub async fn up(&self, req: UpRequest) -> Result<Record> {
        let t = &req.template.template;
        // Everything that can be refused is refused before anything is made.
        limits(&req.template, &req.options)?;
        let source = image_source(&req.template, &req.options)?;
        secret_env(&req.template, &req.options)?;
        extra_mounts(&req.template, &req.options, self.home.root())?;
        let workspace = match &req.workspace {
            WorkspaceRequest::Direct(path) => WorkspaceRecord::Direct { path: path.path().to_path_buf() },
            WorkspaceRequest::GitWorktree(g) => WorkspaceRecord::GitWorktree(g.workspace.clone()),
            WorkspaceRequest::Jj(j) => WorkspaceRecord::Jj(j.workspace.clone()),
        };

        workspace.check_host_paths(self.home.root())?;

        let lock = self.lock_sandbox(&req.name).await?;
        ensure_name_free(&self.home, &req.name)?;
        let image = self.runtime.ensure_image(&source, self.progress).await?;
        self.cancel.check()?;
        let spec = container_spec(&req.name, &req.template, &req.options, &workspace, image.clone(), &self.home)?;
        self.check_program(&spec)?;
        let container = spec.name.clone();

        let read_only = req.options.read_only || t.workspace.read_only;
        let mut record = Record {
            version: RECORD_VERSION,
            name: req.name.clone(),
            state: RecordState::Creating,
            created_at: now(),
            template: req.template.name.clone(),
            image: image.reference,
            container,
            workspace,
            stop_timeout: t.stop_timeout,
            init: t.init.clone(),
            options: req.options.clone(),
            journal: Vec::new(),
        };
        self.home.create(&record)?;
        if let Err(e) = self.checkpoint("record").await {
            // Forget the sandbox while still holding its lock.
            self.home.remove(&record.name)?;
            drop(lock);
            return Err(self.rolled_back(e));
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
                    Ok(_) => Err(self.rolled_back(err)),
                    Err(undo_err) => Err(err.with_note(format!(
                        "rolling back failed ({undo_err}), so the sandbox is left half made: `forage-ctl down {}` finishes the cleanup",
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
            let _repo = self.lock_repo(&g.common_dir).await?;
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
            self.step("making the agent's private repository");
            self.make_private_dir(record)?;
            g.create_private()?;
            self.checkpoint("private-repo").await?;
        }
        if let WorkspaceRecord::Jj(j) = record.workspace.clone() {
            let _repo = self.lock_repo(&j.repo_dir).await?;
            self.step("making the agent's private jj repository");
            self.make_private_dir(record)?;
            self.checkpoint("private-repo").await?;
            self.step(&format!("checking out {} in it", j.path.display()));
            self.begin(record, Step::JjWorkspace)?;
            j.create()?;
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
            self.start_agent(record).await?;
        }
        record.state = RecordState::Ready;
        self.home.save(record)?;
        self.progress.finish();
        self.checkpoint("ready").await
    }

    /// Journals and makes FORAGE_HOME/private/<name> with its workspace.json.
    fn make_private_dir(&self, record: &mut Record) -> Result<()> {
        self.begin(record, Step::PrivateRepo)?;
        if let Err(e) = self.home.create_private_dir(&record.name, &record.workspace) {
            // A directory that could not be made is not ours to delete.
            record.journal.pop();
            self.home.save(record)?;
            return Err(e);
        }
        Ok(())
    }

    /// Refuses a container whose agent program is not in its image (it would
    /// exit the moment it starts: `claude: not found`, exit 127), where forage
    /// knows what the image holds (it built it from host tools). Other images are
    /// left to the start-up watch.
    pub(crate) fn check_program(&self, spec: &ContainerSpec) -> Result<()> {
        let Some(programs) = &spec.image.programs else { return Ok(()) };
        let name = spec.program.strip_prefix("/usr/bin/").unwrap_or(&spec.program);
        if name.contains('/') || programs.iter().any(|p| p == name) {
            return Ok(());
        }
        Err(Error::NotFound(format!(
            "the agent's program {:?} is not in image {}, which holds {}; add it to the template's `host_image.tools` (and install it on this machine), or change the template's `agent.command`",
            spec.program,
            spec.image.reference,
            programs.join(", ")
        )))
    }

    /// Starts the container and its agent (after the template's init commands),
    /// then watches the agent for `STARTUP_WATCH` (or a third of the start's time):
    /// one that exits with an error as it starts fails the command, with its
    /// exit code and last lines of output (a rolled-back container would take
    /// its logs with it).
    pub(crate) async fn start_agent(&self, record: &Record) -> Result<()> {
        let mut watch = self.runtime.watch(&record.container).await?;
        self.step(&format!("starting container {}", record.container));
        let started = std::time::Instant::now();
        self.runtime.start(&record.container).await?;
        let window = STARTUP_WATCH.max(started.elapsed() / 3);
        tracing::debug!("watching the agent for {window:?}");
        self.checkpoint("start").await?;
        self.run_init(record).await?;
        self.checkpoint("init").await?;
        let Some(output) = watch.ended_within(window).await else { return Ok(()) };
        // The output ended before the engine's state says so: wait for it.
        let mut state = None;
        for _ in 0..40 {
            state = self.runtime.inspect(&record.container).await?;
            if state.as_ref().is_none_or(|c| c.state != "running") {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        match state.and_then(|c| c.exit_code.filter(|_| c.state != "running")) {
            // An agent that finished its task with exit code 0 (a one-shot run) did fine.
            Some(0) => Ok(()),
            code => Err(Error::Other(format!(
                "the agent of sandbox {} exited with code {} as it started; its last output:\n{}\nfix the template's agent command or its image, then try again",
                record.name,
                code.map(|c| c.to_string()).unwrap_or_else(|| "unknown".into()),
                output.trim_end()
            ))),
        }
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
        kill_point(step);
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

    /// The error of an `up` whose rollback succeeded. An interruption says that
    /// nothing was left, since the user chose to stop and will wonder; other errors
    /// speak for themselves.
    fn rolled_back(&self, err: Error) -> Error {
        if self.cancel.is_triggered() {
            err.with_note("everything this command had created was removed")
        } else {
            err
        }
    }

    /// Takes sandbox `name`'s lock, waiting (and saying so) while another
    /// forage-ctl holds it, and giving up at Ctrl-C: a blocking wait would keep
    /// this single-threaded runtime from ever seeing the signal.
    pub(crate) async fn lock_sandbox(&self, name: &SandboxName) -> Result<crate::store::Lock> {
        let what = format!("sandbox {name}");
        self.wait_for_lock(&what, || self.home.try_lock_sandbox(name)).await
    }

    /// The same for a repository's lock.
    pub(crate) async fn lock_repo(&self, repo: &std::path::Path) -> Result<crate::store::Lock> {
        let what = format!("the repository {}", repo.display());
        self.wait_for_lock(&what, || self.home.try_lock_repo(repo)).await
    }

    async fn wait_for_lock(
        &self,
        what: &str,
        try_take: impl Fn() -> Result<Option<crate::store::Lock>>,
    ) -> Result<crate::store::Lock> {
        let mut said = false;
        loop {
            if let Some(lock) = try_take()? {
                return Ok(lock);
            }
            if !said {
                self.progress.note(&format!("waiting for {what}: another forage-ctl is changing it (Ctrl-C gives up)"));
                said = true;
            }
            if self.cancel.is_triggered() {
                return Err(Error::Other(format!("interrupted while waiting for {what}")));
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
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
    /// undone in reverse, then the record. Every part tolerates being half done,
    /// and each step undone leaves the journal (saved), so a teardown cut short
    /// and run again does only what is left.
    async fn teardown(&self, record: &Record, how: Teardown) -> Result<ArchiveOutcome> {
        let mut left = record.clone();
        // The container goes first, so nothing writes to the workspace any more.
        // Only a container this sandbox's journal says it created is touched.
        let (workspaces_dir, private_dir) = (self.home.workspaces_dir(), self.home.private_dir());
        let scope =
            UndoScope { workspaces_dir: &workspaces_dir, private_dir: &private_dir, keep_branch: how.keep_branch };
        let (containers, workspace_steps): (Vec<&Step>, Vec<&Step>) =
            record.journal.iter().partition(|s| matches!(s, Step::Container { .. }));
        // jj: jj inside snapshots the working copy while the container still runs
        // (what is written after that, forage reads itself); once it is gone, a
        // helper container does.
        let jj = match &record.workspace {
            WorkspaceRecord::Jj(j) if !j.is_legacy() && record.journal.contains(&Step::JjWorkspace) => Some(j),
            _ => None,
        };
        let mut jj_state = match (jj, containers.is_empty()) {
            (Some(j), false) => self.jj_state_if_running(record, j, ImportHostView::No).await,
            _ => None,
        };
        if how.graceful && !containers.is_empty() {
            self.runtime.stop(&record.container, record.stop_timeout).await?;
        }
        for step in containers {
            step.undo(record, self.runtime, &scope).await?;
            self.forget_step(&mut left, step)?;
        }
        kill_point("removed-container");
        // Also with --discard: what is thrown away is said first, and a stopped
        // sandbox's changes are known only to its jj.
        if let (Some(j), None) = (jj, &jj_state) {
            jj_state = Some(self.jj_state_in_helper(record, j, ImportHostView::No).await);
        }

        // The repository is locked only if something of it is to be archived or
        // undone (an `up` interrupted before its first workspace step has nothing).
        let repo = match &record.workspace {
            WorkspaceRecord::GitWorktree(g) => Some(g.common_dir.as_path()),
            WorkspaceRecord::Jj(j) => Some(j.repo_dir.as_path()),
            WorkspaceRecord::Direct { .. } => None,
        };
        let _repo_lock = match (repo, workspace_steps.is_empty()) {
            (Some(repo), false) => Some(self.lock_repo(repo).await?),
            // Nothing to do there; but a lock file a killed command left goes,
            // if no one holds it (a held lock is not waited for).
            (Some(repo), true) => self.home.try_lock_repo(repo).ok().flatten(),
            (None, _) => None,
        };
        // Work exists only on a branch or in a jj workspace this sandbox created.
        let archive = match &record.workspace {
            WorkspaceRecord::GitWorktree(g) if record.journal.contains(&Step::GitBranch) => {
                Some((g.repo.clone(), g.common_dir.clone(), g.branch.clone()))
            }
            WorkspaceRecord::Jj(j) if record.journal.contains(&Step::JjWorkspace) => {
                Some((j.repo.clone(), j.repo_dir.clone(), record.workspace.branch().unwrap_or_default().to_owned()))
            }
            _ => None,
        };
        let mut outcome = ArchiveOutcome::default();
        if let (Some(_), true) = (&archive, how.discard) {
            // Said before it is done: what only this sandbox held.
            let stake = match &record.workspace {
                WorkspaceRecord::GitWorktree(g) => g.at_stake(),
                WorkspaceRecord::Jj(j) => j.at_stake(jj_state.as_ref().and_then(|s| s.as_ref().ok())),
                WorkspaceRecord::Direct { .. } => Ok(AtStake::default()),
            };
            match stake {
                Ok(s) if s.is_empty() => {}
                Ok(s) => {
                    self.progress.warn(&format!("sandbox {}: throwing away {}", record.name, s.describe()));
                    outcome.discarded = Some(s);
                }
                Err(e) => self.progress.warn(&format!(
                    "sandbox {}: throwing away its work (what it is cannot be listed: {e})",
                    record.name
                )),
            }
        }
        if let (Some((repo, common_dir, branch)), false) = (archive, how.discard) {
            self.step("archiving the agent's work");
            let result = match &record.workspace {
                WorkspaceRecord::GitWorktree(g) => g.archive(&record.name, &timestamp()),
                WorkspaceRecord::Jj(j) => {
                    let state = jj_state.take().unwrap_or_else(|| Err("jj was not run".into()));
                    j.archive(&record.name, &timestamp(), state)
                }
                WorkspaceRecord::Direct { .. } => Ok(ArchiveOutcome::default()),
            };
            outcome = result.map_err(|e| {
                Error::WouldLoseData(format!(
                    "could not archive the work of sandbox {} ({e}); nothing was deleted: fix the cause and retry, or throw the work away with `forage-ctl down --discard {}`",
                    record.name, record.name
                ))
            })?;
            for a in &outcome.archived {
                self.home.add_archive(&ArchiveEntry {
                    name: record.name.clone(),
                    mode: record.workspace.mode(),
                    refname: a.refname.clone(),
                    commit: a.commit.clone(),
                    repo: repo.clone(),
                    common_dir: common_dir.clone(),
                    branch: branch.clone(),
                    template: record.template.clone(),
                    archived_at: now(),
                })?;
            }
        }
        kill_point("archived");
        for step in workspace_steps.into_iter().rev() {
            step.undo(record, self.runtime, &scope).await?;
            self.forget_step(&mut left, step)?;
        }
        kill_point("removed-workspace");
        self.home.remove(&record.name)?;
        Ok(outcome)
    }

    /// Drops an undone step from the journal on disk.
    fn forget_step(&self, left: &mut Record, step: &Step) -> Result<()> {
        left.journal.retain(|s| s != step);
        self.home.save(left)
    }

    /// Tears a sandbox down: the container first, then (once it is gone) the
    /// workspace, then the record. Works on half-made and half-removed sandboxes.
    pub async fn down(&self, name: &SandboxName, opts: DownOptions) -> Result<DownReport> {
        let lock = self.lock_sandbox(name).await?;
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
                        archived_elsewhere: Vec::new(),
                        not_archived: Vec::new(),
                        discarded: None,
                    })
                }
                None => Err(not_found(name)),
            };
        };
        record.state = RecordState::Removing;
        self.home.save(&record)?;

        // A git or jj sandbox whose work is being thrown away has nothing to save,
        // so its agent is killed at once rather than given its stop timeout. A
        // direct sandbox's files are the user's own: its agent always gets to
        // finish its writes.
        let discards_everything = opts.discard && record.workspace.mode() != Mode::Direct;
        let how = Teardown { graceful: !discards_everything, keep_branch: opts.keep_branch, discard: opts.discard };
        let verb = if discards_everything { "removing" } else { "stopping" };
        self.step(&format!("{verb} container {}", record.container));
        let ArchiveOutcome { archived: mut archived_elsewhere, not_archived, discarded } =
            self.teardown(&record, how).await?;
        // The branch's own archive comes last; the others hold work found elsewhere.
        let archived = match archived_elsewhere.last() {
            Some(a) if a.source.is_none() => archived_elsewhere.pop(),
            _ => None,
        };
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
            archived_elsewhere,
            not_archived,
            discarded,
        })
    }
}

/// `FORAGE_DEBUG_KILL_AFTER=<step>` kills this process with SIGKILL right after
/// that step of `up` (see `checkpoint`) or of a teardown (`down`, `gc --force`,
/// a rollback): `removed-container`, `archived`, `removed-workspace`.
fn kill_point(step: &str) {
    if std::env::var("FORAGE_DEBUG_KILL_AFTER").is_ok_and(|s| s == step) {
        tracing::warn!("FORAGE_DEBUG_KILL_AFTER={step}: killing forage-ctl");
        let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
    }
}

/// Fails with `Conflict` if a sandbox of this name exists. `up` checks this first,
/// before validating its workspace, so that the message is about the name; and
/// again under the sandbox lock, where it counts.
pub fn ensure_name_free(home: &Home, name: &SandboxName) -> Result<()> {
    if home.record_exists(name) {
        return Err(Error::Conflict(format!(
            "sandbox {:?} already exists; pick another name or remove it with `forage-ctl down {name}`",
            name.as_str()
        )));
    }
    Ok(())
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
    /// The archive of the sandbox's branch (or jj work).
    pub archived: Option<Archived>,
    /// git: work the agent committed outside its branch (a detached HEAD, other
    /// branches, stashes), each archived under its own ref.
    pub archived_elsewhere: Vec<Archived>,
    /// Work that could not be kept (commits the import refused, FIFOs), and why.
    pub not_archived: Vec<NotArchived>,
    /// With `--discard`: what was thrown away (said before it was).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub discarded: Option<AtStake>,
}
