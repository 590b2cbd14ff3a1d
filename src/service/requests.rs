//! The requests a client sends, one struct per operation. Each is
//! deserialised strictly (an unknown field is an error, not ignored) and
//! describes itself as a JSON schema, which the MCP server lists as the
//! tool's input schema; the doc comments are the schema's descriptions.

use std::collections::BTreeMap;
use std::path::PathBuf;

use schemars::JsonSchema;
use serde::Deserialize;

use crate::error::{Error, Result};
use crate::runtime::Network;
use crate::sandbox::{DiffPart, TaskSpec, UpSpec, WorkspaceSpec};
use crate::template::{CowPolicy, DEFAULT_TEMPLATE};
use crate::workspace::review::LandHow;

/// How the sandbox's workspace is made from `workspace`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ModeArg {
    /// jj if the repository holds .jj/, else git-worktree.
    #[default]
    Auto,
    /// A new worktree on branch forage-NAME, with a private repository for the agent.
    GitWorktree,
    /// A private jj repository; the work reaches yours as bookmark forage/NAME.
    Jj,
    /// The directory mounted as it is, read-write (no isolation).
    Direct,
}

/// Network access of the sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum NetworkArg {
    Full,
    None,
    /// Only the template's allowlist and `allow`, through forage's egress proxy.
    Restricted,
}

/// Create a sandbox: a workspace and a container, with the agent started.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateRequest {
    /// The sandbox's name: lowercase letters, digits, '_', '.', '-'.
    pub name: String,
    /// The template to run (default: shell).
    #[serde(default)]
    pub template: Option<String>,
    /// The repository (or, with mode `direct`, any directory) on the host, as an absolute path.
    pub workspace: PathBuf,
    /// How the workspace is made (default: auto).
    #[serde(default)]
    pub mode: ModeArg,
    /// The agent's first task, as text (mounted read-only at /run/forage/task.md).
    #[serde(default)]
    pub task: Option<String>,
    /// git: start the branch from this revision instead of HEAD; jj: the revset the first change sits on.
    #[serde(default)]
    pub base: Option<String>,
    /// git: the branch to create instead of forage-NAME.
    #[serde(default)]
    pub branch: Option<String>,
    /// Network access (default: the template's).
    #[serde(default)]
    pub network: Option<NetworkArg>,
    /// With network `restricted`: more hosts to allow (a name, `*.domain` or an IPv4 address, `:PORT` optional).
    #[serde(default)]
    pub allow: Vec<String>,
    /// Extra environment variables for the agent.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// git: start with a copy of the checkout's uncommitted changes.
    #[serde(default)]
    pub include_uncommitted: bool,
    /// Whose copy of the agent's state (login, settings) the sandbox gets (default: `default`).
    #[serde(default)]
    pub profile: Option<String>,
    /// git: make /workspace a copy-on-write overlay on a base checkout shared
    /// by the sandboxes on the same tree (a full checkout where it cannot be).
    /// Without it or `full_checkout`, the template's `workspace.cow` decides
    /// (by default: copy-on-write for a tree of 20,000 files or more).
    #[serde(default)]
    pub cow: bool,
    /// git: a full checkout of the sandbox's own, whatever the tree's size.
    #[serde(default)]
    pub full_checkout: bool,
    /// Create everything but do not start the container.
    #[serde(default)]
    pub no_start: bool,
    /// Arguments appended to the template's agent command.
    #[serde(default)]
    pub agent_args: Vec<String>,
}

impl CreateRequest {
    /// The `up` this asks for; a usage error for what a request cannot mean.
    pub fn into_spec(self) -> Result<UpSpec> {
        let name = super::sandbox_name(&self.name)?;
        if !self.workspace.is_absolute() {
            return Err(Error::usage(format!(
                "workspace {:?} is a relative path: give the absolute path of the repository or directory",
                self.workspace.display().to_string()
            )));
        }
        if let Some((key, _)) = self.env.iter().find(|(k, _)| k.is_empty() || k.contains(['=', ' ', '\t', '\n'])) {
            return Err(Error::usage(format!("invalid env name {key:?}: use a variable name without '=' or spaces")));
        }
        let cow = match (self.cow, self.full_checkout) {
            (true, true) => {
                return Err(Error::usage(
                    "cow and full_checkout are both true: a sandbox has one checkout; set one of them",
                ))
            }
            (true, false) => Some(CowPolicy::Always),
            (false, true) => Some(CowPolicy::Never),
            (false, false) => None,
        };
        let workspace = match self.mode {
            ModeArg::Auto => WorkspaceSpec::Repo(self.workspace),
            ModeArg::GitWorktree => WorkspaceSpec::GitWorktree(self.workspace),
            ModeArg::Jj => WorkspaceSpec::Jj(self.workspace),
            ModeArg::Direct => WorkspaceSpec::Direct(self.workspace),
        };
        Ok(UpSpec {
            name,
            template: self.template.unwrap_or_else(|| DEFAULT_TEMPLATE.to_owned()),
            workspace,
            base: self.base,
            branch: self.branch,
            image: None,
            env: self.env.into_iter().collect(),
            secrets: Vec::new(),
            network: self.network.map(|n| match n {
                NetworkArg::Full => Network::Full,
                NetworkArg::None => Network::None,
                NetworkArg::Restricted => Network::Restricted,
            }),
            allow: self.allow,
            publish: Vec::new(),
            memory: None,
            cpus: None,
            read_only: false,
            allow_home: false,
            start: !self.no_start,
            cow,
            agent_args: self.agent_args,
            include_uncommitted: self.include_uncommitted,
            task: self.task.map(TaskSpec::Text),
            no_project_toolchain: false,
            profile: self.profile,
        })
    }
}

/// One sandbox, by name.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NameRequest {
    /// The sandbox.
    pub name: String,
}

/// No arguments.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NoArgs {}

/// Run a command in a running sandbox and return its output.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecRequest {
    /// The sandbox.
    pub name: String,
    /// The command and its arguments, run in /workspace as the agent's user (no shell: use ["sh", "-c", "…"]).
    pub command: Vec<String>,
    /// Give up waiting for the command after this many seconds (default 300); it may still run.
    #[serde(default = "default_exec_timeout")]
    pub timeout_secs: u64,
}

fn default_exec_timeout() -> u64 {
    300
}

/// What `wait` waits for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum UntilArg {
    /// The agent exits.
    Exited,
    /// The agent has printed nothing for `idle_for_secs` (it waits for input).
    Idle,
    /// Whichever comes first.
    #[default]
    Any,
}

/// Wait until the agent of one of the sandboxes exits or goes idle.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WaitRequest {
    /// The sandboxes to watch; the call returns as soon as one of them qualifies.
    pub names: Vec<String>,
    /// What to wait for (default: any).
    #[serde(default)]
    pub until: UntilArg,
    /// How long an agent must have printed nothing to count as idle (default 30).
    #[serde(default = "default_idle_for")]
    pub idle_for_secs: u64,
    /// Give up after this many seconds (default 600): the result is then `{"agent": "timed-out"}`.
    #[serde(default = "default_wait_timeout")]
    pub timeout_secs: u64,
}

fn default_idle_for() -> u64 {
    30
}

fn default_wait_timeout() -> u64 {
    600
}

/// Which part of the agent's change `diff` shows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum PartArg {
    /// Committed and uncommitted together.
    #[default]
    All,
    /// The commits only.
    Committed,
    /// What is not committed only.
    Uncommitted,
}

impl From<PartArg> for DiffPart {
    fn from(part: PartArg) -> DiffPart {
        match part {
            PartArg::All => DiffPart::All,
            PartArg::Committed => DiffPart::Committed,
            PartArg::Uncommitted => DiffPart::Uncommitted,
        }
    }
}

/// The agent's change since its base: files, line counts and patches.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DiffRequest {
    /// The sandbox whose work to show.
    pub name: String,
    /// Compare its files with this sandbox's (on the same repository) instead.
    #[serde(default)]
    pub other: Option<String>,
    /// Which part of the change (default: all).
    #[serde(default)]
    pub part: PartArg,
}

/// How `merge` lands the work.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum HowArg {
    /// A fast-forward when the branch has not moved, else a merge commit.
    #[default]
    Merge,
    /// One new commit with the whole change.
    Squash,
    /// Each of the agent's commits copied onto the branch (git only).
    Rebase,
}

impl From<HowArg> for LandHow {
    fn from(how: HowArg) -> LandHow {
        match how {
            HowArg::Merge => LandHow::Merge,
            HowArg::Squash => LandHow::Squash,
            HowArg::Rebase => LandHow::Rebase,
        }
    }
}

/// Land the agent's work on your branch (jj: bookmark), in your own checkout.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MergeToolRequest {
    /// The sandbox whose work to land.
    pub name: String,
    /// The branch (jj: bookmark) to land it on (default: the one the sandbox was made from).
    #[serde(default)]
    pub into: Option<String>,
    /// How (default: merge).
    #[serde(default)]
    pub how: HowArg,
    /// With how `squash`: the commit's message (default: made from the agent's).
    #[serde(default)]
    pub message: Option<String>,
    /// Land uncommitted files (jj: the working-copy change) too.
    #[serde(default)]
    pub yes: bool,
    /// Say what would land, and change nothing.
    #[serde(default)]
    pub dry_run: bool,
    /// Where the work conflicts, leave the conflicts marked in the checkout (git), for you to commit.
    #[serde(default)]
    pub conflicts: bool,
}

/// Tear a sandbox down: container first, then workspace and record; its work is archived.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DownRequest {
    /// The sandbox.
    pub name: String,
    /// git: keep the sandbox's branch (the worktree is still removed).
    #[serde(default)]
    pub keep_branch: bool,
    /// Throw uncommitted and unmerged work away instead of archiving it.
    #[serde(default)]
    pub discard: bool,
}

/// What `down` archived.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ArchivesRequest {
    /// Only this sandbox's archives (default: every sandbox's).
    #[serde(default)]
    pub name: Option<String>,
}

/// Run a job: the repository fetched into forage's mirror, a sandbox made
/// from the mirror on branch forage-NAME, the job's context kept on disk.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct JobRequest {
    /// The job's (and its sandbox's) name: lowercase letters, digits, '_', '.', '-'.
    pub name: String,
    /// The repository: an absolute path or a file:// URL on this machine, or
    /// an https://, http:// or git:// URL (public; no credentials in it).
    pub repo: String,
    /// The template to run (default: shell).
    #[serde(default)]
    pub template: Option<String>,
    /// The agent's task, as text.
    #[serde(default)]
    pub task: Option<String>,
    /// The revision the job's branch starts from (default: the repository's HEAD).
    #[serde(default)]
    pub base: Option<String>,
    /// Network access (default: the template's).
    #[serde(default)]
    pub network: Option<NetworkArg>,
    /// Extra environment variables for the agent.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Arguments appended to the template's agent command.
    #[serde(default)]
    pub agent_args: Vec<String>,
    /// Wait for the agent to exit, record the result, and tear the sandbox down
    /// (its branch kept in the mirror, the context kept); the call returns the
    /// job's context. Default: the server's `--cleanup-on-complete` (off: the
    /// sandbox is kept, debuggable, until `down`).
    #[serde(default)]
    pub cleanup: Option<bool>,
}

impl JobRequest {
    /// The `up` of the job's sandbox (its workspace is the mirror, set once
    /// fetched), the source, and whether to clean up (`cleanup`, else
    /// `cleanup_on_complete`, the server's default).
    pub fn into_spec(self, cleanup_on_complete: bool) -> Result<(UpSpec, String, bool)> {
        let local = self.repo.starts_with("file://") || std::path::Path::new(&self.repo).is_absolute();
        if !local && !crate::jobs::mirror::is_network_url(&self.repo) {
            return Err(Error::usage(format!(
                "repo {:?} is neither an absolute path nor a file://, https://, http:// or git:// URL: give the repository's absolute path or URL",
                self.repo
            )));
        }
        let create = CreateRequest {
            name: self.name,
            template: self.template,
            // Replaced by the mirror (`Engine::start_job`).
            workspace: PathBuf::from("/"),
            mode: ModeArg::GitWorktree,
            task: self.task,
            base: self.base,
            branch: None,
            network: self.network,
            allow: Vec::new(),
            env: self.env,
            include_uncommitted: false,
            profile: None,
            cow: false,
            full_checkout: false,
            no_start: false,
            agent_args: self.agent_args,
        };
        Ok((create.into_spec()?, self.repo, self.cleanup.unwrap_or(cleanup_on_complete)))
    }
}
