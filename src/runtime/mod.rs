//! The container runtime: one trait, so the sandbox engine's ordering and rollback
//! can be unit-tested with a fake, and one real implementation over the Docker
//! Engine API (`docker.rs`), plus the offline image builder (`image.rs`).

pub mod docker;
pub mod image;
pub mod session;

use std::collections::HashMap;
use std::path::PathBuf;

use serde::Serialize;

use crate::error::Result;
use crate::progress::Progress;
use crate::template::{HostImage, Network};

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

/// The agent's home inside every sandbox, writable by the agent.
pub const AGENT_HOME: &str = "/home/agent";
/// Where the workspace appears inside every sandbox.
pub const WORKSPACE_TARGET: &str = "/workspace";

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Mount {
    pub source: PathBuf,
    pub target: String,
    pub read_only: bool,
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
    pub stop_signal: String,
    pub stop_timeout: u32,
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
}

/// Where a sandbox's image comes from.
#[derive(Debug, Clone)]
pub enum ImageSource {
    /// Must already be in the engine.
    Reference(String),
    /// Built offline from host tools, cached by a key over those tools.
    Host { template: String, spec: HostImage },
    /// Built from a Dockerfile, cached by a hash of the build context.
    Build { template: String, context: image::BuildContext },
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

/// One forage container as `list` sees it.
#[derive(Debug, Clone, Serialize)]
pub struct ContainerSummary {
    pub name: String,
    pub sandbox: String,
    /// Docker's state: created, running, paused, restarting, exited, dead.
    pub state: String,
}

/// What `status` shows of a container.
#[derive(Debug, Clone, Serialize)]
pub struct ContainerDetails {
    pub id: String,
    pub state: String,
    pub exit_code: Option<i64>,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
    pub image: String,
    pub mounts: Vec<Mount>,
}

#[allow(async_fn_in_trait)]
pub trait Runtime {
    /// Makes the image available and says how to create containers from it.
    async fn ensure_image(&self, source: &ImageSource, progress: &dyn Progress) -> Result<ReadyImage>;
    /// Creates (but does not start) the container, with the user's passwd/group
    /// entries and a writable HOME in place.
    async fn create(&self, spec: &ContainerSpec) -> Result<()>;
    async fn start(&self, name: &str) -> Result<()>;
    /// Stops the container; succeeds if it is already stopped or gone.
    async fn stop(&self, name: &str, timeout_secs: u32) -> Result<()>;
    /// Removes the container; succeeds if it is already gone.
    async fn remove(&self, name: &str) -> Result<()>;
    async fn inspect(&self, name: &str) -> Result<Option<ContainerDetails>>;
    /// Runs a command in the running container as `identity`, in /workspace, with
    /// the container's environment; returns its exit code and combined output.
    async fn run_captured(&self, container: &str, command: Vec<String>, identity: Identity) -> Result<(i64, String)>;
    /// Makes a container from `spec`, runs its command to the end, removes it, and
    /// returns the exit code and output: for work on a sandbox's files after its
    /// own container is gone. A container of that name left by a killed forage is
    /// removed first.
    async fn run_to_end(&self, spec: &ContainerSpec) -> Result<(i64, String)>;
    /// Follows the (created, not yet started) container's output from its start
    /// on, to tell an agent that died at once from one that runs.
    async fn watch(&self, container: &str) -> Result<StartWatch>;
    /// Every container labelled as belonging to `home`, in one Engine API call.
    async fn list(&self, home_label: &str) -> Result<Vec<ContainerSummary>>;
}
