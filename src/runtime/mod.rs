//! The container runtime: one trait, so the sandbox engine's ordering and rollback
//! can be unit-tested with a fake, and one real implementation over the Docker
//! Engine API (`docker.rs`), plus the offline image builder (`image.rs`).

mod build_needs;
mod create_lock;
pub mod docker;
pub mod dockerfile;
pub mod egress;
pub mod engine_choice;
pub mod forwarder;
pub mod image;
mod image_archive;
pub mod libpod;
pub mod seccomp;
pub mod session;
pub mod unreachable;

use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;

use serde::Serialize;

use crate::error::Result;
use crate::progress::Progress;

/// Who the agent runs as inside the container: the invoking user's ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity {
    pub uid: u32,
    pub gid: u32,
}

impl Identity {
    pub fn current() -> Self {
        Identity { uid: nix::unistd::getuid().as_raw(), gid: nix::unistd::getgid().as_raw() }
    }
}

pub use crate::inside::{AGENT_HOME, WORKSPACE as WORKSPACE_TARGET};

/// A sandbox's network: the engine's bridge, none (loopback only), or an
/// internal network whose only way out is forage's egress proxy (`egress`).
#[derive(Debug, Clone, Copy, Default, Serialize, serde::Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Network {
    #[default]
    Full,
    None,
    Restricted,
}

impl Network {
    pub fn as_str(self) -> &'static str {
        match self {
            Network::Full => "full",
            Network::None => "none",
            Network::Restricted => "restricted",
        }
    }
}

impl std::str::FromStr for Network {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Network, String> {
        match s {
            "full" => Ok(Network::Full),
            "none" => Ok(Network::None),
            "restricted" => Ok(Network::Restricted),
            other => Err(format!("{other:?} is not a network: use full, none or restricted")),
        }
    }
}

/// An image built offline from programs installed on the host.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct HostImage {
    /// Programs looked up on the host's PATH; each is copied with its shared
    /// libraries. Missing ones are skipped, except those in `require`.
    pub tools: Vec<String>,
    #[serde(default)]
    pub require: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Mount {
    pub source: PathBuf,
    pub target: String,
    pub read_only: bool,
    /// Set for an overlay the engine mounts instead of binding `source`,
    /// which is then its upper layer (`up --cow`, docs/adr/0003).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overlay: Option<Overlay>,
}

/// The other layers of an overlay mount: made by the engine as a volume of
/// the `local` driver (`type=overlay`), anonymous, so removing the container
/// removes it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Overlay {
    /// The read-only lower layer.
    pub lower: PathBuf,
    /// The overlay's scratch directory, on the upper layer's filesystem.
    pub work: PathBuf,
}

/// Everything needed to create a sandbox container, already validated.
#[derive(Debug, Clone)]
pub struct ContainerSpec {
    pub name: String,
    /// The agent's program (the template's `agent.command[0]`), which `up`
    /// looks for in the image before it starts the container.
    pub program: String,
    pub image: ReadyImage,
    pub labels: HashMap<String, String>,
    pub command: Vec<String>,
    pub env: Vec<String>,
    pub identity: Identity,
    pub mounts: Vec<Mount>,
    pub memory_bytes: i64,
    pub nano_cpus: i64,
    pub pids: i64,
    pub network: Network,
    /// For `network: restricted`: the sandbox's own network, its address on
    /// it and the proxy's (also its DNS server, which answers nothing).
    pub egress: Option<EgressAttachment>,
    /// It publishes ports (or will): with `full` on rootless Podman it is
    /// then put on a network its port forwarder can join.
    pub publishes: bool,
    pub stop_signal: String,
    pub stop_timeout: u32,
}

/// Where a restricted sandbox's container is attached.
#[derive(Debug, Clone, PartialEq)]
pub struct EgressAttachment {
    pub network: String,
    pub address: std::net::Ipv4Addr,
    pub proxy: std::net::Ipv4Addr,
}

/// An image in the engine, ready for `create`.
#[derive(Debug, Clone, PartialEq)]
pub struct ReadyImage {
    pub reference: String,
    /// The image already holds the invoking user's passwd/group entries and HOME
    /// (forage built it for them), so `create` copies nothing in.
    pub has_identity: bool,
    /// The programs on the image's PATH, when forage knows them all (it built the
    /// image from host tools); `None` for other images.
    pub programs: Option<Vec<String>>,
    /// The image the agent's layer was built on (its `BASE`), when it was.
    pub base: Option<String>,
}

/// Where a sandbox's image comes from, and who it is for (the invoking user,
/// whose passwd entry it may already hold).
#[derive(Debug, Clone)]
pub enum ImageSource {
    /// Must already be in the engine.
    Reference { reference: String, identity: Identity },
    /// Built offline from host tools found in `tool_dirs` (the user's PATH),
    /// cached by a key over those tools.
    Host { template: String, spec: HostImage, tool_dirs: Vec<PathBuf>, identity: Identity },
    /// Built from a Dockerfile, cached by a hash of the build context (and
    /// of its base image, when it is layered on one).
    Build { template: String, context: image::BuildContext, identity: Identity, base: Option<BaseImage> },
}

/// The image a template's Dockerfile is layered on (its build argument `BASE`).
#[derive(Debug, Clone, PartialEq)]
pub enum BaseImage {
    /// An image reference: in the engine, or pulled by the build.
    Reference(String),
    /// The project's own image, built first from its Dockerfile.
    Build {
        /// `project-<directory>`: the image's repository under `forage-build/`.
        name: String,
        /// For messages: `the project's image (.devcontainer/devcontainer.json)`.
        what: String,
        context: image::BuildContext,
        args: std::collections::BTreeMap<String, String>,
    },
}

impl ImageSource {
    pub fn identity(&self) -> Identity {
        match self {
            ImageSource::Reference { identity, .. }
            | ImageSource::Host { identity, .. }
            | ImageSource::Build { identity, .. } => *identity,
        }
    }
}

/// A container's output since it started, held open: the engine ends it as soon
/// as the container's process has exited, well before the container's state
/// says so.
pub struct StartWatch {
    output: Option<std::pin::Pin<Box<dyn futures_util::Stream<Item = bytes::Bytes> + Send>>>,
    seen: Vec<u8>,
}

impl StartWatch {
    /// Over `output`, the container's output as it comes.
    pub fn new(output: impl futures_util::Stream<Item = bytes::Bytes> + Send + 'static) -> Self {
        StartWatch { output: Some(Box::pin(output)), seen: Vec::new() }
    }

    /// Nothing to watch (a runtime that cannot tell): never ends.
    pub fn unwatched() -> Self {
        StartWatch { output: None, seen: Vec::new() }
    }

    /// Waits up to `window` for the output to end. `Some(the last of the
    /// output)` if it ended (the process exited), `None` if it still runs.
    pub async fn ended_within(&mut self, window: std::time::Duration) -> Option<String> {
        use futures_util::StreamExt;
        let stream = self.output.as_mut()?;
        let deadline = tokio::time::Instant::now() + window;
        loop {
            match tokio::time::timeout_at(deadline, stream.next()).await {
                Ok(Some(bytes)) => {
                    self.seen.extend_from_slice(&bytes);
                    // Only the end is shown: keep the last 16 KiB.
                    let excess = self.seen.len().saturating_sub(16 << 10);
                    self.seen.drain(..excess);
                }
                Ok(None) => {
                    tracing::debug!(
                        "the agent's output ended {:?} before the deadline",
                        deadline - tokio::time::Instant::now()
                    );
                    self.output = None;
                    let text = String::from_utf8_lossy(&self.seen).replace("\r\n", "\n");
                    let lines: Vec<&str> = text.lines().collect();
                    return Some(lines[lines.len().saturating_sub(20)..].join("\n"));
                }
                Err(_) => return None,
            }
        }
    }
}

/// A container's state, as the engine reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContainerState {
    Created,
    Running,
    Paused,
    Restarting,
    Removing,
    Exited,
    Dead,
    /// A state this forage does not know (a newer engine's).
    Unknown,
}

impl ContainerState {
    pub fn parse(word: &str) -> ContainerState {
        match word {
            "created" => ContainerState::Created,
            "running" => ContainerState::Running,
            "paused" => ContainerState::Paused,
            "restarting" => ContainerState::Restarting,
            "removing" => ContainerState::Removing,
            "exited" => ContainerState::Exited,
            "dead" => ContainerState::Dead,
            _ => ContainerState::Unknown,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ContainerState::Created => "created",
            ContainerState::Running => "running",
            ContainerState::Paused => "paused",
            ContainerState::Restarting => "restarting",
            ContainerState::Removing => "removing",
            ContainerState::Exited => "exited",
            ContainerState::Dead => "dead",
            ContainerState::Unknown => "unknown",
        }
    }

    /// Its process has ended (its exit code means something).
    pub fn has_ended(self) -> bool {
        matches!(self, ContainerState::Exited | ContainerState::Dead)
    }
}

impl std::fmt::Display for ContainerState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for ContainerState {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// One forage container as `list` sees it.
#[derive(Debug, Clone, Serialize)]
pub struct ContainerSummary {
    pub name: String,
    pub sandbox: String,
    pub state: ContainerState,
    /// The exit code of a container that ended.
    pub exit_code: Option<i64>,
}

/// What `status` shows of a container.
#[derive(Debug, Clone, Serialize)]
pub struct ContainerDetails {
    pub id: String,
    pub state: ContainerState,
    pub exit_code: Option<i64>,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
    pub image: String,
    pub mounts: Vec<Mount>,
}

/// Output of a process in a container, as it comes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    Stdout(bytes::Bytes),
    Stderr(bytes::Bytes),
}

pub type OutputStream = std::pin::Pin<Box<dyn futures_util::Stream<Item = Result<Output>> + Send>>;

/// How to run a command in a running container (`exec`, `shell`).
#[derive(Debug, Clone)]
pub struct ExecOptions {
    /// Keep stdin open and forward it.
    pub stdin: bool,
    /// Allocate a terminal.
    pub tty: bool,
    /// The terminal's size (rows, columns) from the start, when known.
    pub size: Option<(u16, u16)>,
    pub identity: Identity,
}

/// Which process a `Session` is attached to, to resize its terminal or read
/// its exit code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionId {
    /// A command started by `exec`, by the engine's id for it.
    Exec(String),
    /// The container's main process (the agent), by the container's name.
    Container(String),
}

/// A process attached to: its input, and its output as it comes. The caller
/// (the CLI's terminal, or a server's socket) connects both ends.
pub struct Session {
    pub id: SessionId,
    pub input: std::pin::Pin<Box<dyn tokio::io::AsyncWrite + Send>>,
    pub output: OutputStream,
}

/// The container engine, as the sandbox engine uses it. Every future is `Send`,
/// so that a server can run many requests on a multi-threaded runtime.
pub trait Runtime: Send + Sync + 'static {
    /// Checks that the engine answers (connecting to it, if that was not done
    /// yet): before a command changes anything it cannot finish without it.
    fn ping(&self) -> impl Future<Output = Result<()>> + Send;
    /// Makes the image available and says how to create containers from it.
    fn ensure_image(
        &self,
        source: &ImageSource,
        progress: &dyn Progress,
    ) -> impl Future<Output = Result<ReadyImage>> + Send;
    /// Creates (but does not start) the container, with the user's passwd/group
    /// entries and a writable HOME in place.
    fn create(&self, spec: &ContainerSpec) -> impl Future<Output = Result<()>> + Send;
    fn start(&self, name: &str) -> impl Future<Output = Result<()>> + Send;
    /// Stops the container; succeeds if it is already stopped or gone.
    fn stop(&self, name: &str, timeout_secs: u32) -> impl Future<Output = Result<()>> + Send;
    /// Removes the container; succeeds if it is already gone, and returns only
    /// once it is (the caller then deletes what it mounted).
    fn remove(&self, name: &str) -> impl Future<Output = Result<()>> + Send;
    fn inspect(&self, name: &str) -> impl Future<Output = Result<Option<ContainerDetails>>> + Send;
    /// Runs a command in the running container as `identity`, in /workspace, with
    /// the container's environment; returns its exit code and combined output
    /// (the first 32 MiB of it).
    fn run_captured(
        &self,
        container: &str,
        command: Vec<String>,
        identity: Identity,
    ) -> impl Future<Output = Result<(i64, String)>> + Send;
    /// Makes a container from `spec`, runs its command to the end, removes it, and
    /// returns the exit code and output: for work on a sandbox's files after its
    /// own container is gone. A container of that name left by a killed forage is
    /// removed first.
    fn run_to_end(&self, spec: &ContainerSpec) -> impl Future<Output = Result<(i64, String)>> + Send;
    /// Follows the (created, not yet started) container's output from its start
    /// on, to tell an agent that died at once from one that runs.
    fn watch(&self, container: &str) -> impl Future<Output = Result<StartWatch>> + Send;
    /// Every container labelled as belonging to `home`, in one Engine API call.
    fn list(&self, home_label: &str) -> impl Future<Output = Result<Vec<ContainerSummary>>> + Send;
    /// Starts `command` in the running container and attaches to it.
    fn exec(
        &self,
        container: &str,
        command: Vec<String>,
        options: ExecOptions,
    ) -> impl Future<Output = Result<Session>> + Send;
    /// Attaches to the container's main process (detach keys as Docker's).
    fn attach(&self, container: &str) -> impl Future<Output = Result<Session>> + Send;
    /// Resizes the session's terminal.
    fn resize(&self, session: &SessionId, rows: u16, cols: u16) -> impl Future<Output = Result<()>> + Send;
    /// The session's exit code, once its process has ended.
    fn exit_code(&self, session: &SessionId) -> impl Future<Output = Result<Option<i64>>> + Send;
    /// The container's output so far (the last `tail` lines), and with `follow`
    /// what it prints until it exits.
    fn logs(&self, container: &str, follow: bool, tail: Option<u64>) -> OutputStream;
    /// When the container last printed anything (`None`: never, or unknown).
    fn last_output(&self, container: &str) -> impl Future<Output = Result<Option<std::time::SystemTime>>> + Send;
    /// Extracts the tar archive `tar` at `dir` in the (created, maybe
    /// stopped) container, as the archive's headers say (owners, modes).
    fn upload(&self, container: &str, dir: &str, tar: Vec<u8>) -> impl Future<Output = Result<()>> + Send;
    /// The engine's tar archive of `path` in the (maybe stopped) container,
    /// reading at most `limit` bytes of it. No symlink is followed: its last
    /// component comes as what it is, and each directory on the way from
    /// `below` (which the agent cannot replace) is checked first.
    fn download(
        &self,
        container: &str,
        below: &str,
        path: &str,
        limit: u64,
    ) -> impl Future<Output = Result<Download>> + Send;

    // Networks, for `network: restricted` (`crate::egress`). The defaults are
    // a runtime without them: it refuses to make one and has none to remove.

    /// Whether the engine mounts a volume of the `local` driver with the
    /// `type=overlay` options forage asks for (copy-on-write workspaces).
    /// Docker does; Podman's Engine API makes the volume without them.
    fn mounts_overlay_volumes(&self) -> impl Future<Output = Result<bool>> + Send {
        async { Ok(true) }
    }
    /// Refuses `network: restricted` where the engine cannot give such a
    /// sandbox a network that reaches its proxy and nothing of the host's
    /// (checked before `up` makes anything).
    fn check_restricted(&self) -> impl Future<Output = Result<()>> + Send {
        async { Ok(()) }
    }
    /// The subnets of every network the engine has.
    fn used_subnets(&self) -> impl Future<Output = Result<Vec<crate::egress::subnet::Subnet>>> + Send {
        async { Ok(Vec::new()) }
    }
    /// The subnets of the engine's default network (`bridge`, `podman`),
    /// where `full` sandboxes are and, on Docker and rootful Podman, port
    /// forwarders: none when it has no such network.
    fn default_network_subnets(&self) -> impl Future<Output = Result<Vec<crate::egress::subnet::Subnet>>> + Send {
        async { Ok(Vec::new()) }
    }
    /// Makes the network; `false` when its subnet overlaps one made meanwhile
    /// (the caller tries the next).
    fn create_network(&self, _spec: &egress::NetworkSpec) -> impl Future<Output = Result<bool>> + Send {
        async { Err(egress::unsupported()) }
    }
    /// Removes the network, disconnecting what is on it; succeeds if it is gone.
    fn remove_network(&self, _name: &str) -> impl Future<Output = Result<()>> + Send {
        async { Ok(()) }
    }
    /// The networks with all of `labels` (`key=value`), with their labels.
    fn networks(
        &self,
        _labels: &[String],
    ) -> impl Future<Output = Result<Vec<(String, HashMap<String, String>)>>> + Send {
        async { Ok(Vec::new()) }
    }
    /// Joins a running container to a network at `address` (if not on it yet).
    fn connect_network(
        &self,
        _network: &str,
        _container: &str,
        _address: std::net::Ipv4Addr,
    ) -> impl Future<Output = Result<()>> + Send {
        async { Err(egress::unsupported()) }
    }
    /// Brings the egress proxy up: its outside network, image and container.
    fn ensure_proxy(
        &self,
        _spec: &egress::ProxySpec,
        _progress: &dyn Progress,
    ) -> impl Future<Output = Result<egress::ProxyState>> + Send {
        async { Err(egress::unsupported()) }
    }
    /// Removes the proxy's container, then its outside network.
    fn remove_proxy(&self, _container: &str, _outside: &str) -> impl Future<Output = Result<()>> + Send {
        async { Ok(()) }
    }
    fn container_exists(&self, _name: &str) -> impl Future<Output = Result<bool>> + Send {
        async { Ok(false) }
    }

    // Published ports (`crate::ports`). The defaults are a runtime that
    // cannot publish: it refuses, and has no forwarder to remove.

    /// Replaces the sandbox's forwarder with one publishing `spec.ports`.
    fn ensure_forwarder(
        &self,
        _spec: &forwarder::ForwarderSpec,
        _progress: &dyn Progress,
    ) -> impl Future<Output = Result<Vec<crate::ports::Published>>> + Send {
        async { Err(crate::error::Error::other("this container runtime cannot publish ports")) }
    }
    /// Removes the forwarder's container, then its network.
    fn remove_forwarder(&self, _container: &str, _network: &str) -> impl Future<Output = Result<()>> + Send {
        async { Ok(()) }
    }
    /// The engine's default network, when the forwarder's published port
    /// goes there rather than on a network of the forwarder's own (see
    /// `Docker::forwarder_on_default_network`).
    fn forwarder_on_default_network(&self) -> impl Future<Output = Result<Option<String>>> + Send {
        async { Ok(None) }
    }
    /// The containers with all of `labels` (`key=value`), stopped ones
    /// too: each one's name and labels.
    fn containers_labelled(
        &self,
        _labels: &[String],
    ) -> impl Future<Output = Result<Vec<(String, HashMap<String, String>)>>> + Send {
        async { Ok(Vec::new()) }
    }
}

/// What `Runtime::download` got.
#[derive(Debug, Clone, PartialEq)]
pub enum Download {
    /// The path is not in the container.
    Absent,
    /// The archive is longer than the limit: the rest was never read.
    TooLarge,
    /// The path, or a directory on the way to it (named), is a symbolic
    /// link, which the engine would follow: nothing was read.
    ThroughSymlink(String),
    Archive(Vec<u8>),
}
