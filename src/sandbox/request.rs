//! What a user (or a server's client) asks of `up` and `restore --up`, and
//! checking it: every check that needs no container engine runs here, once, in
//! the order a user meets them, into an `UpRequest` that `up` then carries out
//! without checking again.

use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

use super::pins::HostPath;
use super::plan::{guard, ContainerPlan, SecretFile, UpOptions};
use super::Engine;
use crate::error::{Error, Result};
use crate::names::SandboxName;
use crate::runtime::{Network, Runtime};
use crate::store::ArchiveEntry;
use crate::template::{self, Memory};
use crate::workspace::git::GitRequest;
use crate::workspace::jj::JjRequest;
use crate::workspace::{detect_mode, direct::DirectWorkspace, Mode, WorkspaceRecord, WorkspaceRequest};

/// The workspace `up` was asked for.
#[derive(Debug, Clone, PartialEq)]
pub enum WorkspaceSpec {
    /// `--workspace PATH`: the directory as it is.
    Direct(PathBuf),
    /// `--git-worktree REPO`.
    GitWorktree(PathBuf),
    /// `--jj REPO`.
    Jj(PathBuf),
    /// `--repo REPO`: jj if it holds `.jj/`, else git.
    Repo(PathBuf),
}

/// `up` as asked, nothing checked yet.
#[derive(Debug, Clone)]
pub struct UpSpec {
    pub name: SandboxName,
    pub template: String,
    pub workspace: WorkspaceSpec,
    /// git: the revision to start from; jj: the revset the first change sits on.
    pub base: Option<String>,
    /// git: the branch instead of forage-NAME.
    pub branch: Option<String>,
    pub image: Option<String>,
    pub env: Vec<(String, String)>,
    /// `NAME=FILE`, as given.
    pub secrets: Vec<String>,
    pub network: Option<Network>,
    /// `--allow HOST[:PORT]`, as given.
    pub allow: Vec<String>,
    /// `--publish [HOSTPORT:]PORT`.
    pub publish: Vec<crate::ports::PortSpec>,
    pub memory: Option<String>,
    pub cpus: Option<f64>,
    pub read_only: bool,
    pub allow_home: bool,
    /// Start the agent (`--no-start` clears it).
    pub start: bool,
    pub agent_args: Vec<String>,
    /// git: the worktree starts with a copy of the uncommitted changes of
    /// the user's checkout.
    pub include_uncommitted: bool,
    /// git: `--cow` (`Always`: /workspace a copy-on-write overlay on a shared
    /// base checkout, falling back to a full checkout where it cannot be) or
    /// `--full-checkout` (`Never`); `None` leaves it to the template's
    /// `workspace.cow` (by default `Auto`: by the tree's size).
    pub cow: Option<template::CowPolicy>,
    /// `--task TEXT` or `--task-file FILE`.
    pub task: Option<TaskSpec>,
    /// `--no-project-toolchain`: the project's files are not read.
    pub no_project_toolchain: bool,
    /// `--profile`: whose copy of the agent's state the sandbox is given.
    pub profile: Option<String>,
}

/// The agent's first task, as given to `up`.
#[derive(Debug, Clone)]
pub enum TaskSpec {
    Text(String),
    /// The file's path (read once, after every other check).
    File(PathBuf),
}

/// The uncommitted changes of the user's checkout, which a git sandbox's
/// agent does not see unless `--include-uncommitted` copies them in.
#[derive(Debug, Clone)]
pub struct HostUncommitted {
    pub checkout: PathBuf,
    /// How many paths differ from HEAD.
    pub count: usize,
    /// Paths that cannot be copied, each with why.
    pub skipped: Vec<String>,
    /// Copied into the sandbox (`--include-uncommitted`).
    pub included: bool,
}

/// A checked `up`: what is to be made, and the container's plan.
#[derive(Debug, Clone)]
pub struct UpRequest {
    pub name: SandboxName,
    pub template: template::Resolved,
    pub workspace: WorkspaceRequest,
    pub options: UpOptions,
    pub start: bool,
    /// The user's uncommitted changes, when there are any (git sandboxes
    /// started from HEAD): left out, read while the sandbox is made.
    pub host_uncommitted: HostUncommittedRead,
    pub(crate) plan: ContainerPlan,
    /// What the user should know of the project's toolchain: fields not
    /// used, files not followed, a template that cannot layer on it.
    pub warnings: Vec<String>,
    /// Why a git sandbox's checkout is copy-on-write or full, for `up` to say.
    pub checkout_why: Option<String>,
    /// `login`'s sandbox, whose workspace `up` makes (empty) and removes.
    pub(crate) login_dir: bool,
}

impl UpRequest {
    /// The project's toolchain the agent is layered on, if it is.
    pub fn toolchain(&self) -> Option<&crate::toolchain::Toolchain> {
        self.plan.toolchain.as_ref()
    }
}

impl UpRequest {
    /// The record's view of the workspace to be made.
    pub(crate) fn workspace_record(&self) -> WorkspaceRecord {
        match &self.workspace {
            WorkspaceRequest::Direct(d) => WorkspaceRecord::Direct(d.clone()),
            WorkspaceRequest::GitWorktree(g) => WorkspaceRecord::GitWorktree(g.workspace.clone()),
            WorkspaceRequest::Jj(j) => WorkspaceRecord::Jj(j.workspace.clone()),
        }
    }
}

/// The user's uncommitted changes, as `up` learns them. Left out (the
/// usual case), they are only counted for a warning: the status of a large
/// checkout takes about as long as the engine's work, so it is read on a
/// thread of its own meanwhile, and asked for once the sandbox is made.
#[derive(Clone)]
pub struct HostUncommittedRead(std::sync::Arc<std::sync::Mutex<Reading>>);

enum Reading {
    Running(std::thread::JoinHandle<std::result::Result<Option<HostUncommitted>, String>>),
    Done(std::result::Result<Option<HostUncommitted>, String>),
}

impl HostUncommittedRead {
    fn known(found: Option<HostUncommitted>) -> HostUncommittedRead {
        HostUncommittedRead(std::sync::Arc::new(std::sync::Mutex::new(Reading::Done(Ok(found)))))
    }

    /// Counts the changes of `git`'s checkout on a thread of its own.
    fn start(git: &GitRequest) -> HostUncommittedRead {
        let git = git.clone();
        let thread = std::thread::spawn(move || {
            let found = git.host_changes().map_err(|e| e.to_string())?;
            Ok(found.filter(|c| c.count() > 0).map(|c| HostUncommitted {
                checkout: git.workspace.repo.clone(),
                count: c.count(),
                skipped: c.skipped(),
                included: false,
            }))
        });
        HostUncommittedRead(std::sync::Arc::new(std::sync::Mutex::new(Reading::Running(thread))))
    }

    /// The changes, waiting for the read if it is still going; the reason
    /// if it failed (the user's checkout could not be read).
    pub fn wait(&self) -> std::result::Result<Option<HostUncommitted>, String> {
        let mut reading = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Reading::Running(_) = &*reading {
            let Reading::Running(thread) = std::mem::replace(&mut *reading, Reading::Done(Ok(None))) else {
                unreachable!()
            };
            *reading = Reading::Done(thread.join().unwrap_or_else(|_| Err("the status read panicked".into())));
        }
        match &*reading {
            Reading::Done(found) => found.clone(),
            Reading::Running(_) => unreachable!(),
        }
    }
}

impl HostUncommittedRead {
    /// The changes `--include-uncommitted` copied in (known before the
    /// sandbox is made).
    pub fn included(&self) -> Option<HostUncommitted> {
        match &*self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner) {
            Reading::Done(Ok(Some(found))) if found.included => Some(found.clone()),
            _ => None,
        }
    }

    /// The changes the agent will not see, waited for.
    pub fn left_out(&self) -> std::result::Result<Option<HostUncommitted>, String> {
        Ok(self.wait()?.filter(|found| !found.included))
    }
}

impl std::fmt::Debug for HostUncommittedRead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HostUncommittedRead")
    }
}

/// `--include-uncommitted` applied to the workspace asked for, and the
/// user's uncommitted changes (a git sandbox started from HEAD: any other
/// would not have them anyway).
fn uncommitted_of(
    workspace: WorkspaceRequest,
    base: Option<&str>,
    include: bool,
) -> Result<(WorkspaceRequest, HostUncommittedRead)> {
    match workspace {
        WorkspaceRequest::GitWorktree(git) if base.is_none() && !include => {
            let reading = HostUncommittedRead::start(&git);
            Ok((WorkspaceRequest::GitWorktree(git), reading))
        }
        WorkspaceRequest::GitWorktree(git) => {
            let git = if include { git.include_uncommitted(base)? } else { git };
            if base.is_some() {
                return Ok((WorkspaceRequest::GitWorktree(git), HostUncommittedRead::known(None)));
            }
            let found = git.host_changes()?.filter(|c| c.count() > 0).map(|c| HostUncommitted {
                checkout: git.workspace.repo.clone(),
                count: c.count(),
                skipped: c.skipped(),
                included: include,
            });
            Ok((WorkspaceRequest::GitWorktree(git), HostUncommittedRead::known(found)))
        }
        WorkspaceRequest::Jj(_) if include => Err(Error::usage(
            "--include-uncommitted is for git: in jj your working copy is a change (@) already",
        )
        .hint("`jj status` in your repository records your files in @; then `--base @` starts the agent on top of them")),
        WorkspaceRequest::Direct(_) if include => Err(Error::usage(
            "--include-uncommitted is for --git-worktree: --workspace mounts your directory as it is, uncommitted changes and all",
        )),
        other => Ok((other, HostUncommittedRead::known(None))),
    }
}

/// The project's toolchain, read from the user's checkout: the repository
/// the user named (its working tree), or the `--workspace` directory; never
/// the sandbox's own worktree. Not read with `--image` (which overrides it)
/// or `--no-project-toolchain`.
fn project_toolchain(workspace: &WorkspaceRequest, options: &UpOptions) -> Result<crate::toolchain::Reading> {
    if options.image.is_some() || options.no_project_toolchain {
        return Ok(Default::default());
    }
    let checkout = match workspace {
        WorkspaceRequest::Direct(d) => &d.path,
        WorkspaceRequest::GitWorktree(g) => &g.workspace.repo,
        WorkspaceRequest::Jj(j) => &j.workspace.repo,
    };
    crate::toolchain::read(checkout)
}

impl<R: Runtime> Engine<R> {
    /// Checks `spec` completely (the name, the template, every option, the
    /// secrets, the workspace and every host path the sandbox would see),
    /// creating nothing.
    pub async fn prepare_up(&self, spec: UpSpec) -> Result<UpRequest> {
        // The name first: "already exists" says more than anything about paths.
        super::ensure_name_free(&self.home, &spec.name)?;
        let template = self.templates().resolve(&spec.template)?;
        let memory = spec.memory.as_deref().map(Memory::parse).transpose().map_err(Error::usage)?;
        let options = UpOptions {
            image: spec.image,
            env: spec.env,
            network: spec.network,
            allow: spec
                .allow
                .iter()
                .map(|a| a.parse().map_err(|why| Error::usage(format!("--allow: {why}"))))
                .collect::<Result<_>>()?,
            publish: spec.publish,
            memory,
            cpus: spec.cpus,
            read_only: spec.read_only,
            allow_home: spec.allow_home,
            agent_args: spec.agent_args,
            secrets: self.secret_files(&spec.secrets)?,
            task: spec.task.is_some(),
            task_text: None,
            no_project_toolchain: spec.no_project_toolchain,
            profile: super::agent_state::profile_for(&template, spec.profile)?,
        };
        let task = spec.task.map(|t| self.task_source(&template, t)).transpose()?;
        let workspace = self.workspace_request(
            &spec.name,
            &spec.workspace,
            spec.base.as_deref(),
            spec.branch.as_deref(),
            spec.allow_home,
        )?;
        let (workspace, host_uncommitted) = uncommitted_of(workspace, spec.base.as_deref(), spec.include_uncommitted)?;
        let (workspace, chosen) = self.choose_checkout(workspace, spec.cow, template.template.workspace.cow)?;
        let (workspace, chosen) = self.overlay_the_engine_mounts(workspace, chosen).await?;
        let mut request = self.finish_request(spec.name, template, workspace, options, spec.start)?;
        request.host_uncommitted = host_uncommitted;
        request.checkout_why = chosen.why;
        request.warnings.extend(chosen.warning);
        request.options.task_text = match task {
            Some(TaskSpec::File(path)) => {
                let mut paths = HostPath::of_mounts(
                    &request.workspace_record().mounts(request.plan.read_only, &guard(&self.home, &self.settings)),
                );
                paths.extend(HostPath::of_mounts(&request.plan.mounts));
                self.refuse_secret_in_reach(&path, "--task-file", &paths)?;
                Some(super::secrets::read_task_file(&path)?)
            }
            Some(TaskSpec::Text(text)) => Some(text),
            None => None,
        };
        Ok(request)
    }

    /// `--task`/`--task-file`, checked before anything is made: a template
    /// that says how its agent takes a task, a text neither empty nor over
    /// `MAX_TASK_BYTES`, a regular file (canonical, read only later).
    fn task_source(&self, template: &template::Resolved, task: TaskSpec) -> Result<TaskSpec> {
        if template.template.agent.task.is_empty() {
            return Err(Error::usage(format!(
                "template {} does not say how its agent takes a task (`agent.task`); start the agent without --task and give it the task yourself, or add `agent.task` to the template",
                template.name
            )));
        }
        match task {
            TaskSpec::Text(text) if text.trim().is_empty() => {
                Err(Error::usage("--task is empty: give the agent's task as text, or --task-file FILE"))
            }
            TaskSpec::Text(text) if text.len() as u64 > super::secrets::MAX_TASK_BYTES => Err(Error::usage(format!(
                "--task is larger than {} KiB; pass a shorter task",
                super::secrets::MAX_TASK_BYTES >> 10
            ))),
            TaskSpec::Text(text) => Ok(TaskSpec::Text(text)),
            TaskSpec::File(given) => {
                let file = given.display().to_string();
                let path = given.to_str().and_then(|f| self.settings.expand_tilde(f)).unwrap_or(given);
                let meta = std::fs::OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
                    .open(&path)
                    .and_then(|f| f.metadata())
                    .map_err(|e| Error::usage(format!("task file {file:?} cannot be read ({e})")))?;
                if !meta.is_file() {
                    return Err(Error::usage(format!("task file {file:?} is not a regular file")));
                }
                if meta.len() > super::secrets::MAX_TASK_BYTES {
                    return Err(Error::usage(format!(
                        "task file {file:?} is larger than {} KiB; a task is a prompt",
                        super::secrets::MAX_TASK_BYTES >> 10
                    )));
                }
                let path = path.canonicalize().map_err(|e| Error::usage(format!("task file {file:?}: {e}")))?;
                Ok(TaskSpec::File(path))
            }
        }
    }

    /// A request for `restore --up`: a sandbox on the archive's work, with the
    /// archive's template, and `secrets` (`NAME=FILE`) for it.
    pub fn prepare_restore_up(
        &self,
        name: SandboxName,
        entry: &ArchiveEntry,
        branch: &str,
        secrets: &[String],
    ) -> Result<UpRequest> {
        super::ensure_name_free(&self.home, &name)?;
        let path = self.home.workspaces_dir().join(name.as_str());
        let private = self.home.private_dir_of(&name);
        // The archived sandbox's base, where the index says (an older one's
        // does not: the archive is then the base, and its work reviews empty).
        let base = entry.base.as_ref().filter(|b| !b.commits.is_empty());
        let workspace = match entry.mode {
            Mode::Jj => WorkspaceRequest::Jj(
                JjRequest::validate(&entry.repo, Some(&entry.commit), &name, path, private)?
                    .restored(base, entry.commits.unwrap_or(0)),
            ),
            _ => {
                let from = base.map_or(entry.commit.as_str(), |b| b.commits[0].as_str());
                let request = GitRequest::validate(&entry.repo, Some(from), Some(branch), &name, path, private)?;
                WorkspaceRequest::GitWorktree(request.starting_at(&entry.commit, base.and_then(|b| b.on.clone()))?)
            }
        };
        let template = self.templates().resolve(&entry.template)?;
        let options = UpOptions {
            secrets: self.secret_files(secrets)?,
            profile: super::agent_state::profile_for(&template, None)?,
            ..UpOptions::default()
        };
        self.finish_request(name, template, workspace, options, true)
    }

    pub(crate) fn finish_request(
        &self,
        name: SandboxName,
        mut template: template::Resolved,
        workspace: WorkspaceRequest,
        options: UpOptions,
        start: bool,
    ) -> Result<UpRequest> {
        super::agent_state::waive_secrets_for_login(&self.home, &mut template, &options)?;
        let guard = guard(&self.home, &self.settings);
        let secrets_dir = self.home.secrets_dir().join(name.as_str());
        let reading = project_toolchain(&workspace, &options)?;
        let plan = ContainerPlan::new(
            &template,
            &options,
            &guard,
            &self.settings,
            self.identity,
            &secrets_dir,
            reading.toolchain.as_ref(),
        )?;
        let mut warnings = reading.warnings;
        warnings.extend(plan.warnings.iter().cloned());
        let request = UpRequest {
            name,
            template,
            workspace,
            options,
            start,
            host_uncommitted: HostUncommittedRead::known(None),
            plan,
            warnings,
            checkout_why: None,
            login_dir: false,
        };
        let workspace = request.workspace_record();
        workspace.check_host_paths(&guard)?;
        // Every host path the container would mount, and what its agent writes:
        // no other sandbox's agent may write beneath them, nor this one's
        // beneath another's, nor beneath a secret file (read just below).
        let mut paths = HostPath::of_mounts(&workspace.mounts(request.plan.read_only, &guard));
        paths.extend(HostPath::of_mounts(&request.plan.mounts));
        self.refuse_overlap(&request.name, &paths)?;
        self.refuse_template_in_reach(&request.template, &paths)?;
        for secret in &request.options.secrets {
            if let Some(file) = secret.file() {
                self.refuse_secret_in_reach(file, &secret.name, &paths)?;
            }
        }
        Ok(request)
    }

    /// `--secret NAME=FILE` and `--secret NAME=env:VAR` values: a good name,
    /// given once, and a regular file the user can read, of at most
    /// `MAX_SECRET_BYTES` (its value is read only when `up` copies it
    /// (`secrets`), after every other check), or a variable of forage's
    /// environment that is set, not empty and as bounded.
    fn secret_files(&self, raw: &[String]) -> Result<Vec<SecretFile>> {
        let mut out: Vec<SecretFile> = Vec::new();
        for r in raw {
            let Some((name, file)) = r.split_once('=').filter(|(n, f)| !n.is_empty() && !f.is_empty()) else {
                return Err(Error::usage(format!(
                    "invalid --secret {r:?}: use NAME=FILE or NAME=env:VAR, e.g. --secret anthropic=~/.keys/anthropic"
                )));
            };
            if !template::secret_name_ok(name) {
                return Err(Error::usage(format!("invalid secret name {name:?}: use {}", template::SECRET_NAME_RULE)));
            }
            if out.iter().any(|s| s.name == name) {
                return Err(Error::usage(format!("--secret {name} is given twice; give each secret once")));
            }
            if let Some(var) = file.strip_prefix("env:") {
                out.push(super::secrets::from_environment(name, var)?);
                continue;
            }
            // Shells do not expand `~` after `=`; do it here so the obvious spelling works.
            let path = self.settings.expand_tilde(file).unwrap_or_else(|| PathBuf::from(file));
            // Opened without blocking (a FIFO) to see that the user may read it.
            let opened = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
                .open(&path)
                .and_then(|f| f.metadata());
            match opened {
                Ok(m) if !m.is_file() => {
                    return Err(Error::usage(format!("secret file {file:?} (for {name}) is not a regular file")))
                }
                Ok(m) if m.len() > super::secrets::MAX_SECRET_BYTES => {
                    return Err(super::secrets::too_large(&SecretFile::from_file(name, path)))
                }
                Ok(_) => {}
                Err(e) => {
                    return Err(Error::usage(format!(
                        "secret file {file:?} (for {name}) cannot be read ({e}); pass a file holding the secret's value"
                    )))
                }
            }
            let path = path.canonicalize().map_err(|e| Error::usage(format!("secret file {file:?}: {e}")))?;
            out.push(SecretFile::from_file(name, path));
        }
        Ok(out)
    }

    /// The workspace asked for, checked; nothing is created.
    fn workspace_request(
        &self,
        name: &SandboxName,
        spec: &WorkspaceSpec,
        base: Option<&str>,
        branch: Option<&str>,
        allow_home: bool,
    ) -> Result<WorkspaceRequest> {
        let (mode, repo) = match spec {
            WorkspaceSpec::Direct(path) => {
                if base.is_some() || branch.is_some() {
                    return Err(Error::usage(
                        "--base and --branch need a repository: use --git-worktree REPO, --jj REPO or --repo REPO instead of --workspace",
                    ));
                }
                let guard = guard(&self.home, &self.settings);
                return Ok(WorkspaceRequest::Direct(DirectWorkspace::validate(path, &guard, allow_home)?));
            }
            WorkspaceSpec::GitWorktree(repo) => (Mode::GitWorktree, repo),
            WorkspaceSpec::Jj(repo) => (Mode::Jj, repo),
            WorkspaceSpec::Repo(repo) => (detect_mode(repo), repo),
        };
        let path = self.home.workspaces_dir().join(name.as_str());
        let private = self.home.private_dir_of(name);
        match mode {
            Mode::Jj => {
                if branch.is_some() {
                    return Err(Error::usage("--branch is for git; a jj sandbox's bookmark is always forage/NAME"));
                }
                Ok(WorkspaceRequest::Jj(JjRequest::validate(repo, base, name, path, private)?))
            }
            _ => Ok(WorkspaceRequest::GitWorktree(GitRequest::validate(repo, base, branch, name, path, private)?)),
        }
    }
}
