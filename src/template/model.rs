//! A template as forage uses it: every field checked once, when the YAML is
//! read, into types (`ImageSpec`, `Memory`, `StopSignal`), so that nothing later
//! re-parses a string or trusts an `Option` to be set. `RawTemplate` is the YAML
//! as written (and as `templates show` prints it).

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::inside;
use crate::runtime::{HostImage, Network};

/// Where a template's image comes from: exactly one of the three.
#[derive(Debug, Clone, PartialEq)]
pub enum ImageSpec {
    /// An image reference already present in the engine (checked as the engine
    /// parses one).
    Reference(String),
    /// Built from a Dockerfile, through the Engine API.
    Build(BuildSpec),
    /// Built offline from tools installed on the host.
    Host(HostImage),
}

/// A memory size in bytes, written as Docker writes it (`512m`, `4g`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Memory(i64);

impl Memory {
    /// Parses `1024`, `512k`, `256m`, `4g` (binary units; at least Docker's 6m).
    pub fn parse(raw: &str) -> Result<Memory, String> {
        let s = raw.trim().to_ascii_lowercase();
        let s = s.strip_suffix('b').unwrap_or(&s);
        let (digits, mult) = match s.chars().last() {
            Some('k') => (&s[..s.len() - 1], 1i64 << 10),
            Some('m') => (&s[..s.len() - 1], 1 << 20),
            Some('g') => (&s[..s.len() - 1], 1 << 30),
            _ => (s, 1),
        };
        digits
            .parse::<i64>()
            .ok()
            .and_then(|n| n.checked_mul(mult))
            .filter(|b| *b >= 6 << 20)
            .map(Memory)
            .ok_or_else(|| format!("invalid memory size {raw:?}: use a number with k, m or g, at least 6m (e.g. 4g)"))
    }

    pub fn bytes(self) -> i64 {
        self.0
    }
}

impl fmt::Display for Memory {
    /// The largest unit that divides the size: `4g`, `1536m`, `7000`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (unit, shift) in [("g", 30), ("m", 20), ("k", 10)] {
            if self.0 % (1 << shift) == 0 {
                return write!(f, "{}{unit}", self.0 >> shift);
            }
        }
        write!(f, "{}", self.0)
    }
}

impl Serialize for Memory {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Memory {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Memory, D::Error> {
        Memory::parse(&String::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

/// The signal that stops the agent (`SIGTERM`, `SIGHUP` for shells, which ignore
/// SIGTERM), as the engine takes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StopSignal(String);

impl StopSignal {
    /// A signal name as the engine takes one: `SIG` and capitals, digits or `+`
    /// (`SIGTERM`, `SIGRTMIN+3`).
    pub fn parse(raw: &str) -> Result<StopSignal, String> {
        let name_ok = raw.strip_prefix("SIG").is_some_and(|n| {
            n.starts_with(|c: char| c.is_ascii_uppercase())
                && n.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '+')
        });
        if name_ok {
            Ok(StopSignal(raw.to_owned()))
        } else {
            Err(format!("stop_signal {raw:?} must be a signal name such as SIGTERM"))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Default for StopSignal {
    fn default() -> Self {
        StopSignal("SIGTERM".into())
    }
}

/// A validated template.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "RawTemplate", into = "RawTemplate")]
pub struct Template {
    pub description: String,
    pub image: ImageSpec,
    pub agent: Agent,
    pub workspace: WorkspacePolicy,
    pub network: Network,
    /// With `network: restricted`: the hosts the sandbox may reach (names,
    /// `*.domain` globs, IPv4 addresses; `:PORT` pins a port, else 80 and 443).
    pub network_allow: Vec<crate::egress::policy::Pattern>,
    /// With `network: restricted`: secrets the egress proxy puts in request
    /// headers to these hosts, the sandbox holding only a placeholder.
    pub inject: crate::egress::inject::InjectMap,
    pub resources: Resources,
    pub mounts: Vec<MountSpec>,
    /// Shell commands run in /workspace before the agent starts; one failing fails `up`.
    pub init: Vec<String>,
    pub stop_signal: StopSignal,
    /// Seconds between the stop signal and SIGKILL (at most 100).
    pub stop_timeout: u32,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BuildSpec {
    /// The build context, relative to the template's directory.
    #[serde(default = "default_context")]
    pub context: String,
    /// The Dockerfile, relative to the context.
    #[serde(default = "default_dockerfile")]
    pub dockerfile: String,
    /// An image (in the engine, or pulled by the build) to layer on: passed
    /// as the build argument `BASE`, which the Dockerfile declares with
    /// `ARG BASE=<default>` before its first `FROM ${BASE}`. A project's own
    /// toolchain, when it has one, takes its place.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<String>,
}

fn default_context() -> String {
    ".".into()
}
fn default_dockerfile() -> String {
    "Dockerfile".into()
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct MountSpec {
    /// A host path; `~/` means the invoking user's home, relative paths the template's directory.
    pub source: String,
    /// An absolute path inside the container.
    pub target: String,
    #[serde(default = "yes")]
    pub read_only: bool,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Agent {
    /// The agent's main process; `up NAME … -- ARGS` appends ARGS.
    #[serde(default)]
    pub command: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Environment variables the agent process gets from secrets: VAR -> secret name.
    /// The value is read inside the container from /run/secrets/<name>, so it never
    /// appears in the container's configuration.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub secrets: BTreeMap<String, String>,
    /// How the agent takes `up --task`: arguments appended to its command
    /// when a task is given, in which an argument `{task}` stands for the
    /// task's text and `{task_file}` for the file holding it (read inside the
    /// container, so the text is never in the container's configuration).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub task: Vec<String>,
    /// Where the agent keeps its configuration and credentials, relative to
    /// its home (/home/agent); an entry ending in `/` is a directory (every
    /// regular file under it). forage keeps one copy per template and
    /// profile, gives it to each sandbox at `up` and takes back what the
    /// agent changed at `sync` and `down` (crate::agent_state).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub state: Vec<String>,
    /// The agent's own login command, which `forage-ctl login` runs in a
    /// throwaway sandbox before it keeps the `state` the agent wrote.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub login: Vec<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct WorkspacePolicy {
    #[serde(default)]
    pub read_only: bool,
    /// A git sandbox's checkout: copy-on-write or full (`up --cow` /
    /// `--full-checkout` decide instead when given).
    #[serde(default, skip_serializing_if = "CowPolicy::is_auto")]
    pub cow: CowPolicy,
}

/// Whether a git-worktree sandbox's `/workspace` is a copy-on-write overlay
/// on a shared base checkout (docs/adr/0003-copy-on-write-workspaces.md).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum CowPolicy {
    /// Copy-on-write for a tree of at least the threshold's files, where the
    /// overlay can be made; a full checkout otherwise.
    #[default]
    Auto,
    /// Copy-on-write wherever it can be made (as `up --cow`).
    Always,
    /// Always a full checkout (as `up --full-checkout`).
    Never,
}

impl CowPolicy {
    fn is_auto(&self) -> bool {
        *self == CowPolicy::Auto
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Resources {
    /// Memory limit, e.g. `512m`, `4g`.
    #[serde(default = "default_memory")]
    pub memory: Memory,
    /// CPU limit in cores, capped at what the host has.
    #[serde(default = "default_cpus")]
    pub cpus: f64,
    /// Maximum number of processes.
    #[serde(default = "default_pids")]
    pub pids: i64,
}

impl Default for Resources {
    fn default() -> Self {
        Resources { memory: default_memory(), cpus: default_cpus(), pids: default_pids() }
    }
}

fn default_memory() -> Memory {
    Memory(4 << 30)
}
fn default_cpus() -> f64 {
    2.0
}
fn default_pids() -> i64 {
    1024
}
fn default_stop_timeout() -> u32 {
    10
}

pub const SECRET_NAME_RULE: &str =
    "1-63 characters: lowercase letters, digits, '_', '.', '-', starting with a letter or digit";

/// Secret names become file names under /run/secrets, so they follow the
/// sandbox-name alphabet.
pub fn secret_name_ok(name: &str) -> bool {
    crate::names::SandboxName::parse(name).is_ok()
}

/// POSIX environment variable names: letters, digits and '_', not starting with a digit.
pub fn env_name_ok(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The template as written in YAML.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTemplate {
    #[serde(default)]
    description: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    image: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    build: Option<BuildSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    host_image: Option<HostImage>,
    #[serde(default)]
    agent: Agent,
    #[serde(default)]
    workspace: WorkspacePolicy,
    #[serde(default)]
    network: Network,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    network_allow: Vec<crate::egress::policy::Pattern>,
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    inject: crate::egress::inject::InjectMap,
    #[serde(default)]
    resources: Resources,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    mounts: Vec<MountSpec>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    init: Vec<String>,
    #[serde(default)]
    stop_signal: Option<String>,
    #[serde(default = "default_stop_timeout")]
    stop_timeout: u32,
}

impl From<Template> for RawTemplate {
    fn from(t: Template) -> RawTemplate {
        let (image, build, host_image) = match t.image {
            ImageSpec::Reference(r) => (Some(r), None, None),
            ImageSpec::Build(b) => (None, Some(b), None),
            ImageSpec::Host(h) => (None, None, Some(h)),
        };
        RawTemplate {
            description: t.description,
            image,
            build,
            host_image,
            agent: t.agent,
            workspace: t.workspace,
            network: t.network,
            network_allow: t.network_allow,
            inject: t.inject,
            resources: t.resources,
            mounts: t.mounts,
            init: t.init,
            stop_signal: Some(t.stop_signal.0),
            stop_timeout: t.stop_timeout,
        }
    }
}

impl TryFrom<RawTemplate> for Template {
    type Error = String;

    fn try_from(t: RawTemplate) -> Result<Template, String> {
        let image = match (t.image, t.build, t.host_image) {
            (Some(r), None, None) => {
                super::check_image_reference(&r).map_err(|why| format!("image: {why}"))?;
                ImageSpec::Reference(r)
            }
            (None, Some(b), None) => {
                if let Some(base) = &b.base {
                    super::check_image_reference(base).map_err(|why| format!("build.base: {why}"))?;
                }
                ImageSpec::Build(b)
            }
            (None, None, Some(h)) => ImageSpec::Host(h),
            (None, None, None) => {
                return Err("set one of `image` (an image in the engine), `build` or `host_image`".into())
            }
            _ => return Err("set only one of `image`, `build` and `host_image`".into()),
        };
        check_agent(&t.agent, &t.init)?;
        check_mounts(&t.mounts)?;
        crate::egress::inject::check(&t.inject)?;
        if t.resources.cpus.is_nan() || t.resources.cpus <= 0.0 {
            return Err(format!("resources.cpus must be above 0, not {}", t.resources.cpus));
        }
        if t.resources.pids < 16 {
            return Err(format!("resources.pids must be at least 16, not {}", t.resources.pids));
        }
        // The Engine API request that stops a container times out after 120 s.
        if t.stop_timeout > 100 {
            return Err(format!("stop_timeout is at most 100 seconds, not {}", t.stop_timeout));
        }
        let stop_signal = t.stop_signal.as_deref().map(StopSignal::parse).transpose()?.unwrap_or_default();
        Ok(Template {
            description: t.description,
            image,
            agent: t.agent,
            workspace: t.workspace,
            network: t.network,
            network_allow: t.network_allow,
            inject: t.inject,
            resources: t.resources,
            mounts: t.mounts,
            init: t.init,
            stop_signal,
            stop_timeout: t.stop_timeout,
        })
    }
}

fn check_agent(agent: &Agent, init: &[String]) -> Result<(), String> {
    for (var, secret) in &agent.secrets {
        if !env_name_ok(var) {
            return Err(format!("agent.secrets: {var:?} is not an environment variable name"));
        }
        if !secret_name_ok(secret) {
            return Err(format!("agent.secrets.{var}: {secret:?} is not a secret name ({SECRET_NAME_RULE})"));
        }
    }
    if agent.command.is_empty() {
        return Err("`agent.command` is empty: name the program the sandbox runs".into());
    }
    // No program can be given a NUL byte: the engine would fail to start it.
    for path in &agent.state {
        crate::agent_state::StatePath::parse(path).map_err(|why| format!("agent.state: {why}"))?;
    }
    if let Some(arg) =
        agent.command.iter().chain(&agent.login).chain(init).chain(agent.env.values()).find(|a| a.contains('\0'))
    {
        return Err(format!("{arg:?} holds a NUL character (\\0 in YAML), which no command or environment can carry"));
    }
    Ok(())
}

fn check_mounts(mounts: &[MountSpec]) -> Result<(), String> {
    for m in mounts {
        let target = std::path::Path::new(&m.target);
        let reserved = [inside::WORKSPACE, inside::SECRETS_DIR, inside::FORAGE_RUN_DIR];
        if !target.is_absolute()
            || target.parent().is_none()
            || target.components().any(|c| matches!(c, std::path::Component::ParentDir))
            || reserved.iter().any(|r| target.starts_with(r))
        {
            return Err(format!(
                "mounts: target {:?} must be an absolute path without '..', outside /workspace, /run/secrets and /run/forage",
                m.target
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_sizes() {
        assert_eq!(Memory::parse("4g").unwrap().bytes(), 4 << 30);
        assert_eq!(Memory::parse("512m").unwrap().bytes(), 512 << 20);
        assert_eq!(Memory::parse("512MB").unwrap().bytes(), 512 << 20);
        assert!(Memory::parse("lots").is_err());
        assert!(Memory::parse("1k").is_err(), "below Docker's minimum");
        assert_eq!(Memory::parse("1536m").unwrap().to_string(), "1536m");
        assert_eq!(Memory::parse("4096m").unwrap().to_string(), "4g");
    }

    #[test]
    fn stop_signals_are_names_the_engine_knows() {
        assert_eq!(StopSignal::parse("SIGHUP").unwrap().as_str(), "SIGHUP");
        assert_eq!(StopSignal::parse("SIGRTMIN+3").unwrap().as_str(), "SIGRTMIN+3");
        assert!(StopSignal::parse("HUP").is_err() && StopSignal::parse("SIGterm").is_err());
    }
}
