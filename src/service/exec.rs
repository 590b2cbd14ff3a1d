//! `exec` for a program: the command's output collected, not streamed to a
//! terminal, and bounded. What runs in the sandbox is the agent's to make
//! print without end, so each stream keeps its first `OUTPUT_CAP` bytes and
//! says when it dropped the rest (which is still read, so the command runs
//! to its end).

use std::time::Duration;

use futures_util::StreamExt;
use serde::Serialize;

use super::{sandbox_name, ExecRequest};
use crate::error::{Error, Result};
use crate::runtime::docker::Docker;
use crate::runtime::{Output, Session};
use crate::sandbox::Engine;

/// The most of stdout, and of stderr, a result holds.
pub const OUTPUT_CAP: usize = 1 << 20;

/// One stream's output: its first `OUTPUT_CAP` bytes (as UTF-8, invalid
/// bytes replaced) and whether there was more.
#[derive(Debug, Default, Serialize)]
pub struct Captured {
    pub text: String,
    pub truncated: bool,
    /// How many bytes the command wrote to it in all.
    pub bytes: usize,
    #[serde(skip)]
    kept: Vec<u8>,
}

impl Captured {
    fn push(&mut self, bytes: &[u8]) {
        self.bytes += bytes.len();
        let room = OUTPUT_CAP.saturating_sub(self.kept.len());
        self.truncated |= bytes.len() > room;
        self.kept.extend_from_slice(&bytes[..bytes.len().min(room)]);
    }

    fn finish(mut self) -> Self {
        self.text = String::from_utf8_lossy(&self.kept).into_owned();
        self
    }
}

/// What the command did: its exit code (none if it was still running when
/// the call gave up: `timed_out`), and its output.
#[derive(Debug, Serialize)]
pub struct Executed {
    pub exit_code: Option<i64>,
    pub timed_out: bool,
    pub stdout: Captured,
    pub stderr: Captured,
}

/// Starts the request's command in the sandbox, as the agent's user, in
/// /workspace: its session, and how long to wait for it. Every refusal (a
/// bad name, no command, no such sandbox, one not running) comes from here,
/// before any output, for the streaming `exec` too.
pub async fn start(engine: &Engine<Docker>, request: ExecRequest) -> Result<(Session, Duration)> {
    let name = sandbox_name(&request.name)?;
    if request.command.is_empty() {
        return Err(Error::usage("`exec` needs a command: `command` is empty (e.g. [\"git\", \"status\"])"));
    }
    let session = engine.exec(&name, request.command, false, false, None).await?;
    Ok((session, Duration::from_secs(request.timeout_secs)))
}

/// Runs the request's command in the sandbox, as the agent's user, in /workspace.
pub async fn run(engine: &Engine<Docker>, request: ExecRequest) -> Result<Executed> {
    let (session, timeout) = start(engine, request).await?;
    let (mut stdout, mut stderr) = (Captured::default(), Captured::default());
    let mut output = session.output;
    let read_all = async {
        while let Some(chunk) = output.next().await {
            match chunk? {
                Output::Stdout(b) => stdout.push(&b),
                Output::Stderr(b) => stderr.push(&b),
            }
        }
        Ok::<_, Error>(())
    };
    let timed_out = tokio::select! {
        done = tokio::time::timeout(timeout, read_all) => match done {
            Ok(read) => { read?; false }
            Err(_) => true,
        },
        () = engine.cancel.triggered() => return Err(Error::other("interrupted: the client cancelled the call")),
    };
    let exit_code = if timed_out { None } else { engine.exit_code(&session.id).await? };
    Ok(Executed { exit_code, timed_out, stdout: stdout.finish(), stderr: stderr.finish() })
}
