//! Connecting a container session (`exec`, `shell`, `attach`, `logs`) to this
//! terminal: raw mode while a TTY is in use (restored however the session ends),
//! stdin forwarded, output copied, and the window's size forwarded whenever it
//! changes.

// The terminal is where the container's bytes go; nothing else in the crate prints.
#![allow(clippy::print_stderr)]

use std::io::IsTerminal;
use std::os::fd::{AsFd, BorrowedFd};

use futures_util::StreamExt;
use nix::sys::termios::{self, SetArg, Termios};
use tokio::io::{AsyncWrite, AsyncWriteExt};

use crate::error::Result;
use crate::runtime::{Output, OutputStream, Runtime, Session, SessionId};
use crate::sandbox::Engine;

/// Puts this terminal in raw mode until dropped (restoring it however the
/// session ends): the container's terminal already does all a terminal does
/// (echo, line editing, "\n" to "\r\n"), so ours must do none of it again.
pub struct RawTerminal(Option<(bool, Termios)>);

impl RawTerminal {
    /// With `input` (our stdin goes to the session), stdin's terminal is made
    /// wholly raw; without, only the output processing of stdout's terminal
    /// is turned off, so that Ctrl-C still stops forage-ctl.
    pub fn enable(tty: bool, input: bool) -> Self {
        if !tty {
            return RawTerminal(None);
        }
        let made_raw = on_terminal(input, |fd| {
            let saved = termios::tcgetattr(fd).ok()?;
            let mut raw = saved.clone();
            if input {
                termios::cfmakeraw(&mut raw);
            } else {
                raw.output_flags.remove(termios::OutputFlags::OPOST);
            }
            termios::tcsetattr(fd, SetArg::TCSANOW, &raw).ok()?;
            Some(saved)
        });
        RawTerminal(made_raw.flatten().map(|saved| (input, saved)))
    }
}

impl Drop for RawTerminal {
    fn drop(&mut self) {
        if let Some((input, saved)) = &self.0 {
            on_terminal(*input, |fd| termios::tcsetattr(fd, SetArg::TCSANOW, saved));
        }
    }
}

/// `change` on stdin's terminal (`input`) or stdout's; `None` when that is
/// not a terminal.
fn on_terminal<T>(input: bool, change: impl FnOnce(BorrowedFd<'_>) -> T) -> Option<T> {
    if input {
        let stdin = std::io::stdin();
        stdin.is_terminal().then(|| change(stdin.as_fd()))
    } else {
        let stdout = std::io::stdout();
        stdout.is_terminal().then(|| change(stdout.as_fd()))
    }
}

/// The window's size as (rows, columns): of stdout, else stdin, else stderr,
/// whichever is a terminal first.
#[allow(unsafe_code)]
pub fn window_size() -> Option<(u16, u16)> {
    [libc::STDOUT_FILENO, libc::STDIN_FILENO, libc::STDERR_FILENO].into_iter().find_map(|fd| {
        let mut ws = libc::winsize { ws_row: 0, ws_col: 0, ws_xpixel: 0, ws_ypixel: 0 };
        // SAFETY: TIOCGWINSZ writes one winsize into the pointer we own.
        let rc = unsafe { libc::ioctl(fd, libc::TIOCGWINSZ, &mut ws) };
        (rc == 0 && ws.ws_row > 0).then_some((ws.ws_row, ws.ws_col))
    })
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

/// Sizes the session's terminal as ours, now and at every SIGWINCH, so that
/// a full-screen program inside draws for the window as it is.
fn forward_window_size<R: Runtime>(engine: &Engine<R>, session: SessionId) {
    let engine = engine.clone();
    // Listening before the first resize: a change in between is not missed.
    let changes = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::window_change());
    tokio::spawn(async move {
        let resize = || async {
            match window_size() {
                Some((rows, cols)) => engine.resize(&session, rows, cols).await,
                None => Ok(()),
            }
        };
        // An exec's process may not have started yet when the engine answers
        // the attach, and it cannot be resized until it has: try again a few
        // times, as Docker's own CLI does. (An engine of API 1.42 or newer
        // was given the size when the exec was created.)
        for attempt in 1..=10u64 {
            match resize().await {
                Ok(()) => break,
                Err(e) => {
                    tracing::debug!("resizing the session's terminal (attempt {attempt}): {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(10 * attempt)).await;
                }
            }
        }
        let Ok(mut changes) = changes else {
            return;
        };
        while changes.recv().await.is_some() {
            if let Err(e) = resize().await {
                tracing::debug!("resizing the session's terminal: {e}");
            }
        }
    });
}

/// Connects `session` to this terminal until it ends; `tty` when the session
/// has a terminal, `stdin` when our input goes to it.
pub async fn connect<R: Runtime>(engine: &Engine<R>, session: Session, tty: bool, stdin: bool) -> Result<()> {
    // The terminal is the session's now: no progress line may draw over it.
    engine.progress.hand_over();
    let _raw = RawTerminal::enable(tty, stdin);
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
