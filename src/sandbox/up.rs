//! `up`: a checked request (`request.rs`) carried out as journaled steps, each
//! recorded before it runs and all undone in reverse when one fails or the user
//! interrupts; then the agent started and watched for dying as it starts.

use super::plan::{container_spec, guard, with_workspace_mounts};
use super::{now, Engine, Teardown, UpRequest};
use crate::error::{Error, ErrorKind, Result};
use crate::record::{Record, RecordState, Step, RECORD_VERSION};
use crate::runtime::{ContainerSpec, ContainerState, Runtime};
use crate::workspace::Part;

/// How long `up`, `start` and `reset` watch a freshly started agent for dying,
/// at least: the engine ends a dead container's output 30-65 ms after `start`
/// returns on the machine in docs/benchmarks.md. On a machine the engine is
/// busy on, that grows with the start itself (up to 106 ms after a 650 ms start,
/// which a fixed 100 ms missed while the test suite ran; at most a sixth of the
/// start's time in every run measured), so the watch lasts a third of the
/// start's time when that is longer.
const STARTUP_WATCH: std::time::Duration = std::time::Duration::from_millis(100);

impl<R: Runtime> Engine<R> {
    /// Carries out a checked `up` (`prepare_up`): every step journaled before
    /// it runs, all undone in reverse if one fails or the user interrupts.
    pub async fn up(&self, req: UpRequest) -> Result<Record> {
        self.refuse_copy_from_agents_reach(&req).await?;
        if req.plan.network == crate::runtime::Network::Restricted {
            self.runtime.check_restricted().await?;
        }
        let lock = self.lock_sandbox(&req.name).await?;
        let image = self.runtime.ensure_image(&req.plan.image, self.progress.as_ref()).await?;
        self.cancel.check()?;
        let workspace = req.workspace_record();
        let spec = container_spec(
            &req.name,
            &req.template,
            &req.options,
            &req.plan,
            &workspace,
            image.clone(),
            &self.home,
            self.identity,
        );
        self.check_program(&spec)?;
        let t = &req.template.template;
        let mut record = Record {
            version: RECORD_VERSION,
            name: req.name.clone(),
            state: RecordState::Creating,
            created_at: now(),
            template: req.template.name.clone(),
            image: image.reference.clone(),
            container: spec.name.clone(),
            workspace,
            stop_timeout: t.stop_timeout,
            init: req.plan.init.clone(),
            options: req.options.clone(),
            journal: Vec::new(),
            pins: Vec::new(),
            stopped_at: None,
            toolchain: built_toolchain(&req.plan, &image),
            egress: None,
            network: Some(req.plan.network),
            ports: Vec::new(),
            unpublished: Vec::new(),
        };
        // Exclusive: of two `up`s of one name, exactly one gets here.
        self.home.prepare_sandbox_dirs()?;
        self.home.create(&record)?;
        if let Err(e) = self.checkpoint("record").await {
            // Forget the sandbox while still holding its lock.
            self.home.remove(&record.name)?;
            return Err(self.rolled_back(e));
        }
        let restricted = (req.plan.network == crate::runtime::Network::Restricted)
            .then(|| (req.plan.allow.clone(), req.plan.inject.clone()));
        let how = Making { read_only: req.plan.read_only, start: req.start, login_dir: req.login_dir };
        let made = self.make(&mut record, spec, how, &t.agent.state, restricted).await;
        let result = match made {
            Ok(()) => Ok(record),
            Err(err) => Err(self.roll_back(&record, err).await),
        };
        drop(lock);
        result
    }

    /// `--include-uncommitted` reads the user's checkout: never one an agent
    /// can write (it could plant symlinks and FIFOs there while forage reads).
    async fn refuse_copy_from_agents_reach(&self, req: &UpRequest) -> Result<()> {
        let crate::workspace::WorkspaceRequest::GitWorktree(git) = &req.workspace else { return Ok(()) };
        if !git.workspace.from_uncommitted {
            return Ok(());
        }
        let checkout = &git.workspace.repo;
        let what = format!("--include-uncommitted reads your checkout {}", checkout.display());
        self.agent_reach().await?.refuse_reading(checkout, &what)
    }

    /// Undoes what a failed `up` made, and says how that went.
    async fn roll_back(&self, record: &Record, err: Error) -> Error {
        self.step("rolling back");
        let mut rollback =
            self.teardown(record, Teardown { graceful: false, keep_branch: false, discard: false }).await;
        // The first restricted sandbox brought the egress proxy up: it goes
        // too, unless another one needs it meanwhile.
        if rollback.is_ok() && record.journal.iter().any(|s| matches!(s, Step::Network { .. })) {
            if let Err(e) = self.remove_proxy_if_unused().await {
                rollback = Err(e);
            }
        }
        self.progress.finish();
        match rollback {
            Ok(_) => self.rolled_back(err),
            Err(undo_err) => err
                .with_note(format!("rolling back failed ({undo_err}), so the sandbox is left half made"))
                .hint_run("{command} finishes the cleanup", ["down", record.name.as_str()]),
        }
    }

    /// Makes the workspace's parts and the container, each journaled first,
    /// then starts the agent.
    async fn make(
        &self,
        record: &mut Record,
        spec: ContainerSpec,
        how: Making,
        state: &[String],
        restricted: Option<(crate::egress::policy::Allowlist, Vec<crate::egress::inject::InjectRule>)>,
    ) -> Result<()> {
        let injected: Vec<String> = restricted.iter().flat_map(|(_, i)| i.iter().map(|r| r.secret.clone())).collect();
        self.copy_secrets(record, &injected).await?;
        self.make_workspace(record).await?;
        if how.login_dir {
            self.make_login_dir(record)?;
        }
        if let Some((allow, inject)) = restricted {
            self.make_egress(record, allow, inject).await?;
        }
        let spec = with_workspace_mounts(spec, &record.workspace, how.read_only, &guard(&self.home, &self.settings));
        let spec = super::egress::attach(spec, record);
        // Every host path the container mounts, pinned as it is now, and
        // checked once more against the other sandboxes', which now see these
        // pins: of two `up`s racing over one directory, at least one is refused.
        record.pins = self.pin_mounts(record, &spec.mounts)?;
        self.home.save(record)?;
        self.refuse_overlap(&record.name, &super::pins::HostPath::of_mounts(&spec.mounts))?;
        self.begin(record, Step::Container { name: spec.name.clone() })?;
        let mounts = spec.mounts.clone();
        self.step(&format!("creating container {}", spec.name));
        if let Err(e) = self.runtime.create(&spec).await {
            // A name clash means the container is someone else's: never undo it.
            if e.kind() == ErrorKind::Conflict {
                self.forget_last_step(record)?;
            }
            return Err(e);
        }
        self.checkpoint("container").await?;
        self.give_egress_trust(record).await?;
        self.give_agent_state(record, state).await?;
        if how.start {
            self.start_agent(record, &mounts).await?;
        }
        if !record.options.publish.is_empty() {
            let wanted = record.options.publish.clone();
            self.publish(record, &wanted).await?;
            self.checkpoint("forwarder").await?;
        }
        record.state = RecordState::Ready;
        self.home.save(record)?;
        self.progress.finish();
        self.checkpoint("ready").await
    }

    /// Copies the `--secret` files into FORAGE_HOME/secrets/<name>, which the
    /// container mounts: the files they came from are never read again.
    /// The secrets named in `injected` are the proxy's: the container's copy
    /// holds a placeholder.
    pub(crate) async fn copy_secrets(&self, record: &mut Record, injected: &[String]) -> Result<()> {
        if record.options.secrets.is_empty() && record.options.task_text.is_none() {
            return Ok(());
        }
        self.step("copying the secret files");
        self.begin(record, Step::Secrets)?;
        self.home.ensure_secrets_dir()?;
        let (secrets, dir) = (record.options.secrets.clone(), self.home.secrets_dir().join(record.name.as_str()));
        let task = record.options.task_text.clone();
        let injected = injected.to_vec();
        super::blocking(move || {
            super::secrets::copy_all(&secrets, &dir, &injected)?;
            task.map_or(Ok(()), |text| super::secrets::copy_task(&text, &dir))
        })
        .await?;
        self.checkpoint(Step::Secrets.checkpoint()).await
    }

    /// The workspace's parts, in order, under its repository's lock (released
    /// before the container is made, which takes longest).
    async fn make_workspace(&self, record: &mut Record) -> Result<()> {
        let workspace = record.workspace.clone();
        let ws = workspace.get();
        let _repo = match ws.repository_lock() {
            Some(repo) => Some(self.lock_repo(repo).await?),
            None => None,
        };
        for &part in ws.parts() {
            self.step(&describe(part, &record.workspace));
            self.begin(record, Step::of(part))?;
            // The engine makes the private directory (with the record's
            // sidecar); the workspace fills it. One that could not be made is
            // not ours to delete.
            if part == Part::PrivateRepo {
                if let Err(e) = self.home.create_private_dir(&record.name, &record.workspace) {
                    self.forget_last_step(record)?;
                    return Err(e);
                }
            }
            let workspace = record.workspace.clone();
            if let Err(e) = super::blocking(move || workspace.get().make(part)).await {
                // Nor is a branch that could not be created (one of that name is
                // someone else's).
                if part == Part::GitBranch {
                    self.forget_last_step(record)?;
                }
                return Err(e);
            }
            self.checkpoint(Step::of(part).checkpoint()).await?;
        }
        Ok(())
    }

    /// Drops the last journal entry: its effect never happened, or is not ours.
    fn forget_last_step(&self, record: &mut Record) -> Result<()> {
        record.journal.pop();
        self.home.save(record)
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
        Err(Error::not_found(format!(
            "the agent's program {:?} is not in image {}, which holds {}; add it to the template's `host_image.tools` (and install it on this machine), or change the template's `agent.command`",
            spec.program,
            spec.image.reference,
            programs.join(", ")
        )))
    }

    /// Starts the container and its agent (after the template's init commands),
    /// once every host path it mounts (`mounts`, as the engine has them) is
    /// proved to be what `up` pinned; then watches the agent for
    /// `STARTUP_WATCH` (or a third of the start's time):
    /// one that exits with an error as it starts fails the command, with its
    /// exit code and last lines of output (a rolled-back container would take
    /// its logs with it).
    pub(crate) async fn start_agent(&self, record: &Record, mounts: &[crate::runtime::Mount]) -> Result<()> {
        // A sandbox of an older forage: pinned from now on. One that `stop`
        // stopped: no longer stopped by forage once it starts.
        let pins = self.check_pinned(record, mounts)?;
        if pins.is_some() || record.stopped_at.is_some() {
            let pins = pins.unwrap_or_else(|| record.pins.clone());
            self.home.save(&Record { pins, stopped_at: None, ..record.clone() })?;
        }
        // A restricted sandbox's way out, brought back if it went (a proxy
        // removed by hand, or by `gc` while this sandbox was being made).
        self.join_proxy(record).await?;
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
        match self.exit_code_once_ended(&record.container).await? {
            // An agent that finished its task with exit code 0 (a one-shot run) did fine.
            Some(Some(0)) => Ok(()),
            // Its output ended, yet the engine still says it runs: the attach
            // ended for the engine's own reasons (Podman's, as a container
            // restarts), not the agent.
            None => Ok(()),
            Some(code) => Err(Error::other(format!(
                "the agent of sandbox {} exited with code {} as it started; its last output:\n{}",
                record.name,
                code.map(|c| c.to_string()).unwrap_or_else(|| "unknown".into()),
                output.trim_end()
            ))
            .hint("fix the template's agent command or its image, then try again")),
        }
    }

    /// The exit code (if the engine knows it) of a container whose output has
    /// ended, once the engine's state says so too (it lags: up to two
    /// seconds); `None` when the engine still says it runs after that.
    async fn exit_code_once_ended(&self, container: &str) -> Result<Option<Option<i64>>> {
        let mut state = None;
        for _ in 0..40 {
            state = self.runtime.inspect(container).await?;
            if state.as_ref().is_none_or(|c| c.state != ContainerState::Running) {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        match state {
            Some(c) if c.state == ContainerState::Running => Ok(None),
            state => Ok(Some(state.and_then(|c| c.exit_code))),
        }
    }

    /// Runs the template's init commands once per container, before the agent
    /// (whose launcher waits for the marker). A failure shows the command's output.
    async fn run_init(&self, record: &Record) -> Result<()> {
        if record.init.is_empty() {
            return Ok(());
        }
        let who = self.identity;
        let sh = |script: &str| vec!["sh".to_owned(), "-c".to_owned(), script.to_owned()];
        let marker = crate::inside::INIT_DONE_MARKER;
        let (done, _) = self.runtime.run_captured(&record.container, sh(&format!("test -e {marker}")), who).await?;
        if done == 0 {
            return Ok(());
        }
        for command in &record.init {
            self.step(&format!("init: {command}"));
            let (code, output) = self.runtime.run_captured(&record.container, sh(command), who).await?;
            if code != 0 {
                return Err(Error::other(format!(
                    "init command `{command}` of template {} failed with exit code {code}; its output:\n{}",
                    record.template,
                    output.trim_end()
                )));
            }
        }
        let (code, output) = self.runtime.run_captured(&record.container, sh(&format!("touch {marker}")), who).await?;
        if code != 0 {
            return Err(Error::other(format!("cannot start the agent after init: {}", output.trim_end())));
        }
        Ok(())
    }
}

/// The toolchain the plan layered the agent on, its image now the
/// reference it was built as (or named), for the record.
pub(crate) fn built_toolchain(
    plan: &super::plan::ContainerPlan,
    image: &crate::runtime::ReadyImage,
) -> Option<crate::toolchain::Toolchain> {
    let mut toolchain = plan.toolchain.clone()?;
    if let Some(base) = &image.base {
        toolchain.image = crate::toolchain::ProjectImage::Reference(base.clone());
    }
    Some(toolchain)
}

/// How `make` makes a sandbox.
#[derive(Debug, Clone, Copy)]
struct Making {
    read_only: bool,
    start: bool,
    /// `login`'s sandbox: its workspace is an empty directory made here.
    login_dir: bool,
}

/// What making `part` is, for the progress line.
fn describe(part: Part, workspace: &crate::workspace::WorkspaceRecord) -> String {
    let ws = workspace.get();
    match part {
        Part::GitBranch => format!(
            "creating branch {} in {}",
            ws.branch().unwrap_or_default(),
            ws.repository().map(|r| r.display().to_string()).unwrap_or_default()
        ),
        Part::GitWorktree => format!("checking out worktree {}", ws.host_path().display()),
        Part::PrivateRepo => "making the agent's private repository".into(),
        Part::JjRepository => format!("checking out {} in it", ws.host_path().display()),
    }
}
