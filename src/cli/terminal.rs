//! Connecting a container session (`exec`, `shell`, `attach`, `logs`) to this
//! terminal: raw mode while a TTY is in use (restored however the session ends),
//! stdin forwarded, output copied, and the window's size forwarded whenever it
//! changes.

// The terminal is where the container's bytes go; nothing else in the crate prints.
#![allow(clippy::print_stderr)]

use std::io::IsTerminal;
use std::os::fd::AsFd;

use futures_util::StreamExt;
use nix::sys::termios::{self, SetArg, Termios};
use tokio::io::{AsyncWrite, AsyncWriteExt};

use crate::error::Result;
use crate::runtime::{Output, OutputStream, Runtime, Session, SessionId};
use crate::sandbox::Engine;

/// Puts the controlling terminal in raw mode until dropped.
pub struct RawTerminal(Option<Termios>);

impl RawTerminal {
    pub fn enable(wanted: bool) -> Self {
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

/// The terminal's size as (rows, columns), if stdout is one.
#[allow(unsafe_code)]
fn window_size() -> Option<(u16, u16)> {
    let mut ws = libc::winsize { ws_row: 0, ws_col: 0, ws_xpixel: 0, ws_ypixel: 0 };
    // SAFETY: TIOCGWINSZ writes one winsize into the pointer we own.
    let rc = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut ws) };
    (rc == 0 && ws.ws_row > 0).then_some((ws.ws_row, ws.ws_col))
}

/// Copies the session's output to our stdout/stderr until it ends.
pub async fn pump_output(mut output: OutputStream) -> Result<()> {
    let mut stdout = tokio::io::stdout();
    let mut stderr = tokio::io::stderr();
    while let Some(chunk) = output.next().await {
        let write = match chunk? {
            Output::Stderr(bytes) => stderr.write_all(&bytes).await.and(stderr.flush().await),
            Output::Stdout(bytes) => stdout.write_all(&bytes).await.and(stdout.flush().await),
        };
        // Our reader went away (e.g. `| head`): stop quietly, like other CLIs.
        if write.is_err() {
            break;
        }
    }
    Ok(())
}

/// Forwards our stdin to the session until stdin closes.
fn forward_stdin(mut input: std::pin::Pin<Box<dyn AsyncWrite + Send>>) {
    tokio::spawn(async move {
        let mut stdin = tokio::io::stdin();
        let _ = tokio::io::copy(&mut stdin, &mut input).await;
        let _ = input.shutdown().await;
    });
}

/// Sizes the session's terminal as ours, now and at every SIGWINCH.
fn forward_window_size<R: Runtime>(engine: &Engine<R>, session: SessionId) {
    let engine = engine.clone();
    tokio::spawn(async move {
        let resize = || async {
            if let Some((rows, cols)) = window_size() {
                if let Err(e) = engine.resize(&session, rows, cols).await {
                    tracing::debug!("resizing the session's terminal: {e}");
                }
            }
        };
        resize().await;
        let Ok(mut changes) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::window_change()) else {
            return;
        };
        while changes.recv().await.is_some() {
            resize().await;
        }
    });
}

/// Connects `session` to this terminal until it ends; `tty` when the session
/// has a terminal, `stdin` when our input goes to it.
pub async fn connect<R: Runtime>(engine: &Engine<R>, session: Session, tty: bool, stdin: bool) -> Result<()> {
    let _raw = RawTerminal::enable(tty && stdin);
    if stdin {
        forward_stdin(session.input);
    }
    if tty {
        forward_window_size(engine, session.id.clone());
    }
    pump_output(session.output).await
}

/// Asks `question` on stderr and reads the answer from stdin: true for `y` or `yes`.
pub fn ask(question: &str) -> bool {
    use std::io::Write;
    eprint!("{question}");
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    if std::io::stdin().read_line(&mut answer).is_err() {
        return false;
    }
    matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes")
}
