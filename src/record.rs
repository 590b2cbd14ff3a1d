//! What forage remembers of a sandbox (`Record`, one JSON file each under
//! FORAGE_HOME/sandboxes) and of the work `down` archived (`ArchiveEntry`):
//! plain data, read and written by `store`, acted on by `sandbox`.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::names::SandboxName;
use crate::runtime::Network;
use crate::template::Memory;
use crate::workspace::{Base, Mode, Part, WorkspaceRecord};

/// 2: git and jj sandboxes have a private repository (version 1 records load as
/// sandboxes of an older forage).
pub const RECORD_VERSION: u32 = 2;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "step", rename_all = "kebab-case")]
pub enum Step {
    /// The git branch named in the record's workspace.
    GitBranch,
    /// The git worktree named in the record's workspace.
    GitWorktree,
    /// The jj repository forage makes for the agent: the workspace directory's
    /// files and the repository in FORAGE_HOME/private/<name>/jj. (In records of
    /// an older forage: a jj workspace of the user's repository.)
    JjWorkspace,
    /// FORAGE_HOME/private/<name>: the agent's private repository.
    PrivateRepo,
    /// FORAGE_HOME/secrets/<name>: forage's copies of the `--secret` files,
    /// which the container mounts (never the files they were read from).
    Secrets,
    /// A container named `name` (created, maybe started).
    Container { name: String },
    /// FORAGE_HOME/agent-state/sandboxes/<name>.json: what the sandbox was
    /// given of its template's agent state (taken back before its container
    /// is removed; see crate::agent_state).
    AgentState,
    /// FORAGE_HOME/workspaces/<name>: the empty directory `login` made as its
    /// throwaway sandbox's workspace.
    LoginDir,
    /// `network: restricted`: the sandbox's own network named `name` (the
    /// egress proxy joined to it, the proxy's map naming it).
    Network { name: String },
    /// Published ports: the forwarder container and its network, both named
    /// `name` (see crate::ports).
    Forwarder { name: String },
}

impl Step {
    /// The journal entry for making `part`.
    pub fn of(part: Part) -> Step {
        match part {
            Part::GitBranch => Step::GitBranch,
            Part::GitWorktree => Step::GitWorktree,
            Part::PrivateRepo => Step::PrivateRepo,
            Part::JjRepository => Step::JjWorkspace,
        }
    }

    /// The workspace part it made, if it is one.
    pub fn part(&self) -> Option<Part> {
        match self {
            Step::GitBranch => Some(Part::GitBranch),
            Step::GitWorktree => Some(Part::GitWorktree),
            Step::PrivateRepo => Some(Part::PrivateRepo),
            Step::JjWorkspace => Some(Part::JjRepository),
            Step::Secrets
            | Step::Container { .. }
            | Step::AgentState
            | Step::LoginDir
            | Step::Network { .. }
            | Step::Forwarder { .. } => None,
        }
    }

    /// Its name at `up`'s checkpoints (`FORAGE_DEBUG_KILL_AFTER=<name>`).
    pub fn checkpoint(&self) -> &'static str {
        match self {
            Step::GitBranch => "git-branch",
            Step::GitWorktree => "git-worktree",
            Step::PrivateRepo => "private-repo",
            Step::JjWorkspace => "jj-workspace",
            Step::Secrets => "secrets",
            Step::Container { .. } => "container",
            Step::AgentState => "agent-state",
            Step::LoginDir => "login-dir",
            Step::Network { .. } => "network",
            Step::Forwarder { .. } => "forwarder",
        }
    }
}

/// What `up` was asked on top of the template. The record keeps it, so that
/// `reset` makes the same container again from the (possibly edited) template.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UpOptions {
    /// `--image`, instead of the template's.
    #[serde(default)]
    pub image: Option<String>,
    /// `--env KEY=VALUE`: plain settings, visible to `docker inspect` like the
    /// template's own `agent.env` (secrets go through `--secret`).
    #[serde(default)]
    pub env: Vec<(String, String)>,
    #[serde(default)]
    pub network: Option<Network>,
    /// `--allow HOST`: added to the template's `network_allow` and the user's
    /// allow file (for `network: restricted`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<crate::egress::policy::Pattern>,
    /// `--publish [HOSTPORT:]PORT`, as asked at `up`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub publish: Vec<crate::ports::PortSpec>,
    #[serde(default)]
    pub memory: Option<Memory>,
    #[serde(default)]
    pub cpus: Option<f64>,
    #[serde(default)]
    pub read_only: bool,
    /// `--allow-home`: a workspace or mount may be (or hold) the user's home.
    #[serde(default)]
    pub allow_home: bool,
    /// Arguments after `--`, appended to the template's agent command.
    #[serde(default)]
    pub agent_args: Vec<String>,
    /// `--secret NAME=FILE`: where each value was read from at `up` (forage
    /// copied it then, and mounts the copy). Only the paths are kept.
    #[serde(default)]
    pub secrets: Vec<SecretFile>,
    /// `up --task`/`--task-file`: the sandbox has a task, copied at `up` next
    /// to the secrets' copies (`task_text` holds it until then; never saved).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub task: bool,
    #[serde(skip)]
    pub task_text: Option<String>,
    /// `up --no-project-toolchain`: the project's devcontainer.json or
    /// `.forage/template.yaml` was not read.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub no_project_toolchain: bool,
    /// `up --profile`: whose copy of the template's agent state the sandbox
    /// is given (`default` unless asked); `None` for a template that keeps
    /// no agent state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
}

/// A secret given on the command line: a name and where its value came from,
/// a file (`NAME=FILE`) or a variable of forage's environment
/// (`NAME=env:VAR`). forage copies the value once, at `up`, into FORAGE_HOME
/// (mode 0600) and mounts the copy; it never reads the value otherwise, nor
/// its origin again. The record keeps the origin, never the value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SecretFile {
    pub name: String,
    /// The file the value was read from (empty for a variable).
    #[serde(default, skip_serializing_if = "path_is_empty")]
    pub path: PathBuf,
    /// The environment variable the value was read from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<String>,
    /// A variable's value, held from the checks to the copy (never saved).
    #[serde(skip)]
    pub value: Option<SecretValue>,
}

impl SecretFile {
    /// A secret read from the file at `path`.
    pub fn from_file(name: impl Into<String>, path: PathBuf) -> Self {
        SecretFile { name: name.into(), path, env: None, value: None }
    }

    /// Whether the value comes from a file (whose path a workspace must not hold).
    pub fn file(&self) -> Option<&Path> {
        self.env.is_none().then_some(self.path.as_path())
    }
}

fn path_is_empty(path: &Path) -> bool {
    path.as_os_str().is_empty()
}

/// A secret's value in memory: its `Debug` never shows it, so that no log
/// line or error made from a request can carry it.
#[derive(Clone, PartialEq)]
pub struct SecretValue(pub Vec<u8>);

impl std::fmt::Debug for SecretValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SecretValue({} bytes)", self.0.len())
    }
}

/// Where a sandbox is in its life. `Creating` with no `up` holding its lock means
/// that `up` died half way: `list` shows it as broken and `down` finishes the undo.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RecordState {
    Creating,
    Ready,
    Removing,
}

/// Everything forage knows about one sandbox. Secrets are never stored here.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Record {
    pub version: u32,
    pub name: SandboxName,
    pub state: RecordState,
    /// Seconds since the Unix epoch.
    pub created_at: u64,
    pub template: String,
    pub image: String,
    pub container: String,
    pub workspace: WorkspaceRecord,
    /// Seconds between the stop signal and SIGKILL, fixed when the sandbox was made.
    #[serde(default = "default_stop_timeout")]
    pub stop_timeout: u32,
    /// The template's init commands, run once per container before the agent.
    #[serde(default)]
    pub init: Vec<String>,
    /// What `up` was asked on top of the template, for `reset` (secret files by
    /// path only). Records written before `reset` existed have none.
    #[serde(default)]
    pub options: UpOptions,
    /// Effects begun by `up`, in order; undone in reverse by rollback and `down`.
    pub journal: Vec<Step>,
    /// Every host path the container mounts, as the object it was when forage
    /// checked it: proved unchanged before every start. Empty in records of an
    /// older forage (pinned at their next start).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pins: Vec<crate::host_paths::pin::Pin>,
    /// When `forage-ctl stop` stopped the container (seconds since the Unix
    /// epoch), until forage starts it again: `list` and `status` then say
    /// `stopped`, not that the agent exited with the stop signal's code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_at: Option<u64>,
    /// The project's toolchain the agent was layered on, its image as built
    /// then (a reference): `reset` layers the agent on the same.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub toolchain: Option<crate::toolchain::Toolchain>,
    /// `network: restricted`: the sandbox's network and its allowlist.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress: Option<EgressRecord>,
    /// The network it was made with (records of an older forage have none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<crate::runtime::Network>,
    /// Its published ports as they are: host port on 127.0.0.1 for each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<crate::ports::Published>,
}

/// A restricted sandbox's own network (a subnet forage picked), the
/// addresses of the proxy and the sandbox on it, and what it may reach.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EgressRecord {
    pub network: String,
    pub subnet: String,
    pub proxy_address: std::net::Ipv4Addr,
    pub sandbox_address: std::net::Ipv4Addr,
    /// The template's `network_allow`, the user's allow file and `--allow`, in that order.
    pub allow: crate::egress::policy::Allowlist,
    /// The keys the proxy sets for it (names only: the values are in the
    /// proxy's keys file).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inject: Vec<crate::egress::inject::InjectRule>,
}

fn git_mode() -> Mode {
    Mode::GitWorktree
}

fn default_stop_timeout() -> u32 {
    10
}

/// Where `down` put a sandbox's work, so `restore` can bring it back.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ArchiveEntry {
    pub name: SandboxName,
    #[serde(default = "git_mode")]
    pub mode: Mode,
    /// `refs/forage/archive/<name>/<timestamp>` in `repo`.
    pub refname: String,
    pub commit: String,
    pub repo: PathBuf,
    pub common_dir: PathBuf,
    /// The branch the work was on.
    pub branch: String,
    pub template: String,
    /// Seconds since the Unix epoch.
    pub archived_at: u64,
    /// git: how many uncommitted files the archive's top commit holds (zero
    /// when its tip is the agent's own commit); unknown in older indexes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uncommitted_files: Option<usize>,
    /// How many commits (jj: changes) of the agent's the archive holds that no
    /// branch had; unknown in older indexes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commits: Option<usize>,
    /// Where the sandbox's work started, so that a sandbox `restore --up`
    /// makes on the archive reviews and lands the same work; unknown in
    /// older indexes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<Base>,
    /// Where in the agent's repository the work was when it was not on the
    /// sandbox's branch: "detached HEAD", "branch NAME", "stash@{N}" (jj:
    /// "head N").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}
