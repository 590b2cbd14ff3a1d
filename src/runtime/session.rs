//! Interactive I/O with a running container: exec, attach and logs. The terminal
//! is switched to raw mode only when a TTY is both requested and present.

use std::io::IsTerminal;
use std::os::fd::AsFd;

use bollard::container::LogOutput;
use bollard::exec::{CreateExecOptions, ResizeExecOptions, StartExecOptions, StartExecResults};
use bollard::query_parameters::{AttachContainerOptions, LogsOptions, ResizeContainerTTYOptions};
use futures_util::{Stream, StreamExt};
use nix::sys::termios::{self, SetArg, Termios};
use tokio::io::{AsyncWrite, AsyncWriteExt};

use super::docker::Docker;
use super::{Identity, AGENT_HOME, WORKSPACE_TARGET};
use crate::error::{is_docker_conflict, is_docker_not_found, Error, Result};

/// Docker's own detach sequence, as users of `docker attach` know it.
pub const DETACH_KEYS: &str = "ctrl-p,ctrl-q";

pub struct ExecOptions {
    pub interactive: bool,
    pub tty: bool,
    pub identity: Identity,
}

/// Puts the controlling terminal in raw mode until dropped.
struct RawTerminal(Option<Termios>);

impl RawTerminal {
    fn enable(wanted: bool) -> Self {
        if !wanted || !std::io::stdin().is_terminal() {
            return RawTerminal(None);
        }
        let stdin = std::io::stdin();
        let Ok(saved) = termios::tcgetattr(stdin.as_fd()) else {
            return RawTerminal(None);
        };
        let mut raw = saved.clone();
        termios::cfmakeraw(&mut raw);
        if termios::tcsetattr(stdin.as_fd(), SetArg::TCSANOW, &raw).is_err() {
            return RawTerminal(None);
        }
        RawTerminal(Some(saved))
    }
}

impl Drop for RawTerminal {
    fn drop(&mut self) {
        if let Some(saved) = &self.0 {
            let _ = termios::tcsetattr(std::io::stdin().as_fd(), SetArg::TCSANOW, saved);
        }
    }
}

fn terminal_size() -> Option<(u16, u16)> {
    let mut ws = libc::winsize { ws_row: 0, ws_col: 0, ws_xpixel: 0, ws_ypixel: 0 };
    // SAFETY: TIOCGWINSZ writes one winsize into the pointer we own.
    let rc = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut ws) };
    (rc == 0 && ws.ws_row > 0).then_some((ws.ws_row, ws.ws_col))
}

fn not_running(container: &str, err: bollard::errors::Error) -> Error {
    if is_docker_conflict(&err) {
        Error::Conflict(format!(
            "container {container} is not running; start it with `forage-ctl start {}`",
            container.trim_start_matches("forage-")
        ))
    } else if is_docker_not_found(&err) {
        Error::NotFound(format!("container {container} is gone; `forage-ctl down` cleans up what is left"))
    } else {
        Error::docker(format!("talking to container {container}"), err)
    }
}

/// Copies the container's output to our stdout/stderr until the stream ends.
async fn pump_output(
    mut output: impl Stream<Item = Result<LogOutput, bollard::errors::Error>> + Unpin,
    container: &str,
) -> Result<()> {
    let mut stdout = tokio::io::stdout();
    let mut stderr = tokio::io::stderr();
    while let Some(chunk) = output.next().await {
        let write = match chunk.map_err(|e| Error::docker(format!("reading from {container}"), e))? {
            LogOutput::StdErr { message } => stderr.write_all(&message).await.and(stderr.flush().await),
            LogOutput::StdOut { message } | LogOutput::Console { message } => {
                stdout.write_all(&message).await.and(stdout.flush().await)
            }
            LogOutput::StdIn { .. } => Ok(()),
        };
        // Our reader went away (e.g. `| head`): stop quietly, like other CLIs.
        if write.is_err() {
            break;
        }
    }
    Ok(())
}

/// The most of a command's output forage keeps: what runs inside is the
/// agent's to make print without end.
pub const MAX_CAPTURED_OUTPUT: usize = 32 << 20;

/// Appends `bytes` to `kept` up to `MAX_CAPTURED_OUTPUT`; the rest is dropped
/// (and still read, so that the command can finish).
pub fn keep_bounded(kept: &mut Vec<u8>, bytes: &[u8]) {
    let room = MAX_CAPTURED_OUTPUT.saturating_sub(kept.len());
    kept.extend_from_slice(&bytes[..bytes.len().min(room)]);
}

/// Forwards our stdin to the container until stdin closes.
fn spawn_stdin(mut input: std::pin::Pin<Box<dyn AsyncWrite + Send>>) {
    tokio::spawn(async move {
        let mut stdin = tokio::io::stdin();
        let _ = tokio::io::copy(&mut stdin, &mut input).await;
        let _ = input.shutdown().await;
    });
}

impl Docker {
    /// Runs `cmd` in the container as the agent's user and returns its exit code.
    pub async fn exec(&self, container: &str, cmd: Vec<String>, opts: ExecOptions) -> Result<i64> {
        let create = CreateExecOptions {
            attach_stdin: Some(opts.interactive),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            tty: Some(opts.tty),
            cmd: Some(cmd),
            env: Some(vec![format!("HOME={AGENT_HOME}")]),
            user: Some(format!("{}:{}", opts.identity.uid, opts.identity.gid)),
            working_dir: Some(WORKSPACE_TARGET.into()),
            ..Default::default()
        };
        let exec = self.api.create_exec(container, create).await.map_err(|e| not_running(container, e))?;
        let _raw = RawTerminal::enable(opts.tty && opts.interactive);
        let start = StartExecOptions { detach: false, tty: opts.tty, output_capacity: None };
        match self.api.start_exec(&exec.id, Some(start)).await.map_err(|e| not_running(container, e))? {
            StartExecResults::Attached { output, input } => {
                if opts.interactive {
                    spawn_stdin(input);
                }
                if opts.tty {
                    if let Some((height, width)) = terminal_size() {
                        let _ = self.api.resize_exec(&exec.id, ResizeExecOptions { height, width }).await;
                    }
                }
                pump_output(output, container).await?;
            }
            StartExecResults::Detached => {}
        }
        let inspected = self
            .api
            .inspect_exec(&exec.id)
            .await
            .map_err(|e| Error::docker(format!("reading the exit code in {container}"), e))?;
        Ok(inspected.exit_code.unwrap_or(-1))
    }

    /// Runs a command without a terminal and collects stdout and stderr together.
    pub async fn exec_captured(&self, container: &str, cmd: Vec<String>, identity: Identity) -> Result<(i64, String)> {
        let create = CreateExecOptions {
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            cmd: Some(cmd),
            user: Some(format!("{}:{}", identity.uid, identity.gid)),
            working_dir: Some(WORKSPACE_TARGET.into()),
            ..Default::default()
        };
        let exec = self.api.create_exec(container, create).await.map_err(|e| not_running(container, e))?;
        let mut output = Vec::new();
        if let StartExecResults::Attached { output: mut stream, .. } =
            self.api.start_exec(&exec.id, None).await.map_err(|e| not_running(container, e))?
        {
            while let Some(chunk) = stream.next().await {
                let bytes = chunk.map_err(|e| not_running(container, e))?.into_bytes();
                keep_bounded(&mut output, &bytes);
            }
        }
        let output = String::from_utf8_lossy(&output).into_owned();
        let inspected = self
            .api
            .inspect_exec(&exec.id)
            .await
            .map_err(|e| Error::docker(format!("reading the exit code in {container}"), e))?;
        Ok((inspected.exit_code.unwrap_or(-1), output))
    }

    /// Connects the terminal to the agent's TTY until the user detaches
    /// (ctrl-p ctrl-q) or the agent exits.
    pub async fn attach(&self, container: &str) -> Result<()> {
        let options = AttachContainerOptions {
            stdin: true,
            stdout: true,
            stderr: true,
            stream: true,
            logs: false,
            detach_keys: Some(DETACH_KEYS.into()),
        };
        let attached =
            self.api.attach_container(container, Some(options)).await.map_err(|e| not_running(container, e))?;
        let _raw = RawTerminal::enable(true);
        if let Some((h, w)) = terminal_size() {
            let _ =
                self.api.resize_container_tty(container, ResizeContainerTTYOptions { h: h.into(), w: w.into() }).await;
        }
        spawn_stdin(attached.input);
        pump_output(attached.output, container).await
    }

    /// Prints the agent's output; with `follow`, keeps printing until it exits.
    pub async fn logs(&self, container: &str, follow: bool, tail: Option<u64>) -> Result<()> {
        let options = LogsOptions {
            follow,
            stdout: true,
            stderr: true,
            tail: tail.map(|n| n.to_string()).unwrap_or_else(|| "all".into()),
            ..Default::default()
        };
        let stream = self.api.logs(container, Some(options));
        pump_output(Box::pin(stream), container).await
    }
}
