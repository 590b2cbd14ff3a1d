//! Processes attached to a running container through the Engine API: `exec`,
//! `attach` and `logs` as streams (`Session`), which the CLI connects to the
//! terminal and a server would connect to a socket; and commands forage runs
//! inside to read their output (`exec_captured`).

use bollard::container::LogOutput;
use bollard::exec::{CreateExecOptions, ResizeExecOptions, StartExecResults};
use bollard::models::ExecConfig;
use bollard::query_parameters::{AttachContainerOptions, LogsOptions, ResizeContainerTTYOptions};
use futures_util::StreamExt;

use super::docker::Docker;
use super::{ExecOptions, Identity, Output, OutputStream, Session, SessionId, AGENT_HOME, WORKSPACE_TARGET};
use crate::error::{is_docker_not_found, is_not_running, Error, Result};

/// Docker's own detach sequence, as users of `docker attach` know it.
pub const DETACH_KEYS: &str = "ctrl-p,ctrl-q";

/// The most of a command's output forage keeps: what runs inside is the
/// agent's to make print without end.
pub const MAX_CAPTURED_OUTPUT: usize = 32 << 20;

/// Appends `bytes` to `kept` up to `MAX_CAPTURED_OUTPUT`; the rest is dropped
/// (and still read, so that the command can finish).
pub fn keep_bounded(kept: &mut Vec<u8>, bytes: &[u8]) {
    let room = MAX_CAPTURED_OUTPUT.saturating_sub(kept.len());
    kept.extend_from_slice(&bytes[..bytes.len().min(room)]);
}

fn not_running(container: &str, err: bollard::errors::Error) -> Error {
    let name = container.trim_start_matches("forage-");
    if is_not_running(&err) {
        Error::conflict(format!("container {container} is not running"))
            .hint_run("start it with {command}", ["start", name])
    } else if is_docker_not_found(&err) {
        Error::not_found(format!("container {container} is gone"))
            .hint_run("{command} cleans up what is left", ["down", name])
    } else {
        Error::docker(format!("talking to container {container}"), err)
    }
}

/// The engine's output chunks as forage's, errors named after the container.
fn output(
    stream: impl futures_util::Stream<Item = std::result::Result<LogOutput, bollard::errors::Error>> + Send + 'static,
    container: &str,
) -> OutputStream {
    let container = container.to_owned();
    Box::pin(stream.filter_map(move |chunk| {
        let item = match chunk {
            Ok(LogOutput::StdErr { message }) => Some(Ok(Output::Stderr(message))),
            Ok(LogOutput::StdOut { message } | LogOutput::Console { message }) => Some(Ok(Output::Stdout(message))),
            Ok(LogOutput::StdIn { .. }) => None,
            Err(e) => Some(Err(Error::docker(format!("reading from {container}"), e))),
        };
        std::future::ready(item)
    }))
}

impl Docker {
    /// Starts `cmd` in the container as the agent's user and attaches to it.
    pub(super) async fn exec_session(&self, container: &str, cmd: Vec<String>, opts: ExecOptions) -> Result<Session> {
        let create = ExecConfig {
            attach_stdin: Some(opts.stdin),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            tty: Some(opts.tty),
            // API 1.42+ (Docker 23): the process starts on a terminal of the
            // window's size, so that a program that reads it at once (a
            // full-screen agent) draws right; older engines ignore it, and the
            // CLI resizes the terminal once the process runs.
            console_size: opts.size.filter(|_| opts.tty).map(|(rows, cols)| vec![rows.into(), cols.into()]),
            cmd: Some(cmd),
            env: Some(vec![format!("HOME={AGENT_HOME}")]),
            user: Some(format!("{}:{}", opts.identity.uid, opts.identity.gid)),
            working_dir: Some(WORKSPACE_TARGET.into()),
            ..Default::default()
        };
        let exec = self.api().await?.create_exec(container, create).await.map_err(|e| not_running(container, e))?;
        let start = bollard::exec::StartExecOptions { detach: false, tty: opts.tty, output_capacity: None };
        match self.api().await?.start_exec(&exec.id, Some(start)).await.map_err(|e| not_running(container, e))? {
            StartExecResults::Attached { output: out, input } => {
                Ok(Session { id: SessionId::Exec(exec.id), input, output: output(out, container) })
            }
            StartExecResults::Detached => {
                Err(Error::other(format!("the engine did not attach to the command in {container}")))
            }
        }
    }

    /// Attaches to the agent's TTY, detaching on ctrl-p ctrl-q.
    pub(super) async fn attach_session(&self, container: &str) -> Result<Session> {
        let options = AttachContainerOptions {
            stdin: true,
            stdout: true,
            stderr: true,
            stream: true,
            logs: false,
            detach_keys: Some(DETACH_KEYS.into()),
        };
        let attached = self
            .api()
            .await?
            .attach_container(container, Some(options))
            .await
            .map_err(|e| not_running(container, e))?;
        Ok(Session {
            id: SessionId::Container(container.to_owned()),
            input: attached.input,
            output: output(attached.output, container),
        })
    }

    pub(super) async fn resize_session(&self, session: &SessionId, rows: u16, cols: u16) -> Result<()> {
        match session {
            SessionId::Exec(id) => self
                .api()
                .await?
                .resize_exec(id, ResizeExecOptions { height: rows, width: cols })
                .await
                .map_err(|e| Error::docker("resizing the terminal", e)),
            SessionId::Container(name) => self
                .api()
                .await?
                .resize_container_tty(name, ResizeContainerTTYOptions { h: rows.into(), w: cols.into() })
                .await
                .map_err(|e| Error::docker("resizing the terminal", e)),
        }
    }

    pub(super) async fn session_exit_code(&self, session: &SessionId) -> Result<Option<i64>> {
        match session {
            SessionId::Exec(id) => {
                let inspected = self
                    .api()
                    .await?
                    .inspect_exec(id)
                    .await
                    .map_err(|e| Error::docker("reading the command's exit code", e))?;
                Ok(inspected.exit_code)
            }
            SessionId::Container(name) => {
                use super::Runtime;
                Ok(self.inspect(name).await?.filter(|c| c.state.has_ended()).and_then(|c| c.exit_code))
            }
        }
    }

    /// The agent's output; with `follow`, until it exits.
    pub(super) fn logs_stream(&self, container: &str, follow: bool, tail: Option<u64>) -> OutputStream {
        let options = LogsOptions {
            follow,
            stdout: true,
            stderr: true,
            tail: tail.map(|n| n.to_string()).unwrap_or_else(|| "all".into()),
            ..Default::default()
        };
        let this = self.clone();
        let name = container.to_owned();
        let stream = futures_util::stream::once(async move {
            match this.api().await {
                Ok(api) => output(api.logs(&name, Some(options)), &name),
                Err(e) => Box::pin(futures_util::stream::once(async move { Err(e) })),
            }
        })
        .flatten();
        Box::pin(stream)
    }

    /// The time stamp the engine gave the container's last line of output.
    pub(super) async fn last_output_time(&self, container: &str) -> Result<Option<std::time::SystemTime>> {
        let options =
            LogsOptions { stdout: true, stderr: true, timestamps: true, tail: "1".into(), ..Default::default() };
        let mut stream = self.api().await?.logs(container, Some(options));
        let Some(first) = stream.next().await else { return Ok(None) };
        let bytes = first.map_err(|e| Error::docker(format!("reading the output of {container}"), e))?.into_bytes();
        let text = String::from_utf8_lossy(&bytes);
        let stamp = text.split(' ').next().unwrap_or("");
        Ok(humantime::parse_rfc3339_weak(stamp.trim_end_matches('Z')).ok())
    }

    /// Runs a command without a terminal and collects stdout and stderr together.
    pub(super) async fn exec_captured(
        &self,
        container: &str,
        cmd: Vec<String>,
        identity: Identity,
    ) -> Result<(i64, String)> {
        let create = CreateExecOptions {
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            cmd: Some(cmd),
            user: Some(format!("{}:{}", identity.uid, identity.gid)),
            working_dir: Some(WORKSPACE_TARGET.into()),
            ..Default::default()
        };
        let exec = self.api().await?.create_exec(container, create).await.map_err(|e| not_running(container, e))?;
        let mut output = Vec::new();
        if let StartExecResults::Attached { output: mut stream, .. } =
            self.api().await?.start_exec(&exec.id, None).await.map_err(|e| not_running(container, e))?
        {
            while let Some(chunk) = stream.next().await {
                let bytes = chunk.map_err(|e| not_running(container, e))?.into_bytes();
                keep_bounded(&mut output, &bytes);
            }
        }
        let output = String::from_utf8_lossy(&output).into_owned();
        let inspected = self
            .api()
            .await?
            .inspect_exec(&exec.id)
            .await
            .map_err(|e| Error::docker(format!("reading the exit code in {container}"), e))?;
        Ok((inspected.exit_code.unwrap_or(-1), output))
    }
}
