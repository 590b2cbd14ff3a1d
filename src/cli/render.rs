//! Terminal rendering shared by the commands: progress spinners, tables, ages,
//! and escaping of what the agent chose.

// The spinner and `--quiet`'s warnings write to stderr, as the printer does.
#![allow(clippy::print_stderr)]

use std::io::IsTerminal;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::progress::Progress;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How long a step runs before its spinner is drawn: a step that is over
/// sooner never flashes a line.
const SHOW_AFTER: Duration = Duration::from_millis(250);

/// The progress line on stderr, drawn only when stderr is a terminal, and only
/// while a step runs (from `SHOW_AFTER` into it): a command with no step
/// (`list`, `diff`, `attach`) draws nothing. The printer writes everything
/// else through `suspend`, so the line is never left among the output, and
/// `hand_over` clears it for good before a container session or a pager takes
/// the terminal.
pub struct Spinner(Option<Arc<Mutex<Line>>>);

#[derive(Default)]
struct Line {
    /// The current step's spinner: hidden until `SHOW_AFTER` has passed.
    bar: Option<ProgressBar>,
    /// Counts steps started from no spinner, so that a timer left from an
    /// earlier step does not show a later one early.
    started: u64,
    /// The terminal is someone else's now: draw nothing more.
    handed_over: bool,
}

/// The progress line of this process, for the log (`LogWriter`), which
/// tracing writes without a printer at hand.
static SHOWN: Mutex<std::sync::Weak<Mutex<Line>>> = Mutex::new(std::sync::Weak::new());

impl Spinner {
    pub fn new() -> Self {
        let line: Option<Arc<Mutex<Line>>> = std::io::stderr().is_terminal().then(Arc::default);
        if let Some(line) = &line {
            *SHOWN.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::downgrade(line);
        }
        Spinner(line)
    }

    /// The process's progress line (see `SHOWN`), if there is one.
    fn shown() -> Self {
        Spinner(SHOWN.lock().unwrap_or_else(std::sync::PoisonError::into_inner).upgrade())
    }

    /// One that never draws (`--quiet`, `--json`).
    pub fn off() -> Self {
        Spinner(None)
    }

    fn line(&self) -> Option<MutexGuard<'_, Line>> {
        // A panic while holding the lock leaves nothing half-drawn worth refusing.
        self.0.as_ref().map(|line| line.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
    }

    /// Runs `write` with the progress line cleared, and draws it again after.
    pub fn suspend<T>(&self, write: impl FnOnce() -> T) -> T {
        // The lock is not held while writing: the bar has its own.
        let bar = self.line().and_then(|line| line.bar.clone());
        match bar {
            Some(bar) => bar.suspend(write),
            None => write(),
        }
    }

    /// Clears the line and draws nothing more: the terminal is about to belong
    /// to a container session or a pager.
    pub fn hand_over(&self) {
        if let Some(mut line) = self.line() {
            line.handed_over = true;
            if let Some(bar) = line.bar.take() {
                bar.finish_and_clear();
            }
        }
    }

    /// Shows the spinner of step `started` once `SHOW_AFTER` has passed, if
    /// that step is still running then.
    fn show_later(line: &Arc<Mutex<Line>>, started: u64) {
        let line = Arc::downgrade(line);
        std::thread::spawn(move || {
            std::thread::sleep(SHOW_AFTER);
            let Some(line) = line.upgrade() else { return };
            let line = line.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if let (Some(bar), false, true) = (&line.bar, line.handed_over, line.started == started) {
                bar.set_draw_target(ProgressDrawTarget::stderr());
                bar.enable_steady_tick(Duration::from_millis(100));
            }
        });
    }
}

impl Progress for Spinner {
    fn step(&self, message: &str) {
        let Some(shared) = &self.0 else { return };
        let mut line = shared.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if line.handed_over {
            return;
        }
        if let Some(bar) = &line.bar {
            bar.set_message(message.to_owned());
            return;
        }
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden());
        bar.set_style(ProgressStyle::with_template("{spinner} {msg} ({elapsed})").expect("valid template"));
        bar.set_message(message.to_owned());
        line.bar = Some(bar);
        line.started += 1;
        Self::show_later(shared, line.started);
    }

    fn finish(&self) {
        if let Some(bar) = self.line().and_then(|mut line| line.bar.take()) {
            bar.finish_and_clear();
        }
    }

    fn note(&self, message: &str) {
        let line = format!("forage-ctl: {}", shown(message));
        self.suspend(|| eprintln!("{line}"));
    }

    fn warn(&self, message: &str) {
        let line = format!("forage-ctl: warning: {}", shown(message));
        self.suspend(|| eprintln!("{line}"));
    }

    fn hand_over(&self) {
        Spinner::hand_over(self);
    }
}

/// `--quiet`: no progress and no notes, but warnings all the same.
pub struct Quiet;

impl Progress for Quiet {
    fn step(&self, _message: &str) {}

    fn warn(&self, message: &str) {
        eprintln!("forage-ctl: warning: {}", shown(message));
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        // The last owner clears the line (`shown()` makes short-lived ones).
        if self.0.as_ref().is_some_and(|line| Arc::strong_count(line) == 1) {
            self.hand_over();
        }
    }
}

/// Where the log (`-v`, and tracing's warnings) goes: stderr, each event's own
/// line breaks indented like an error's (`printer::error_line`), so that a name
/// the agent chose, logged inside a message, cannot start a line of its own.
#[derive(Debug, Clone, Copy, Default)]
pub struct LogWriter;

impl std::io::Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        // Above the progress line, not through it.
        Spinner::shown().suspend(|| std::io::stderr().write_all(&indent_following_lines(buf)))?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

/// `event` (as tracing writes each one: whole, ending with its line break)
/// with every line after the first indented.
fn indent_following_lines(event: &[u8]) -> Vec<u8> {
    let (body, end) = match event.strip_suffix(b"\n") {
        Some(body) => (body, &b"\n"[..]),
        None => (event, &b""[..]),
    };
    let mut out = Vec::with_capacity(event.len() + 8);
    for (i, line) in body.split(|b| *b == b'\n').enumerate() {
        if i > 0 {
            out.extend_from_slice(b"\n  ");
        }
        out.extend_from_slice(line);
    }
    out.extend_from_slice(end);
    out
}

/// `text` safe to print on a terminal: control characters (escape sequences
/// among them), and the invisible ones that reorder or hide text, written as
/// `\x1b` or `\u{202e}`. Names and paths the agent chose (file names, branch
/// names, its output in error messages) reach the terminal only through this.
pub fn shown(text: &str) -> String {
    escape(text, false)
}

/// As `shown`, but keeping line breaks and tabs: for messages of several lines.
pub fn shown_text(text: &str) -> String {
    escape(text, true)
}

fn escape(text: &str, keep_lines: bool) -> String {
    let invisible =
        |c: char| matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{feff}');
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if keep_lines && (c == '\n' || c == '\t') {
            out.push(c);
        } else if (c as u32) < 0x100 && c.is_control() {
            out.push_str(&format!("\\x{:02x}", c as u32));
        } else if c.is_control() || invisible(c) {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

/// A borderless table: a header row, then one row per item, columns left-aligned
/// and three spaces apart (cells are already escaped by the caller).
pub struct Table<const N: usize> {
    rows: Vec<[String; N]>,
}

impl<const N: usize> Table<N> {
    pub fn new(header: [&str; N]) -> Self {
        Table { rows: vec![header.map(str::to_owned)] }
    }

    pub fn row(&mut self, cells: [String; N]) {
        self.rows.push(cells);
    }
}

impl<const N: usize> std::fmt::Display for Table<N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let width = |i: usize| self.rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0);
        let widths: Vec<usize> = (0..N).map(width).collect();
        for row in &self.rows {
            let mut line = String::new();
            for (cell, w) in row.iter().zip(&widths) {
                line.push_str(&format!(" {cell:<w$}  "));
            }
            writeln!(f, "{}", line.trim_end())?;
        }
        Ok(())
    }
}

/// "12s", "5m", "3h", "2d": the age of something created at `epoch_secs`.
pub fn age(epoch_secs: u64) -> String {
    let now =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(epoch_secs);
    let s = now.saturating_sub(epoch_secs);
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m", s / 60),
        3600..=86_399 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_pad_columns_by_their_widest_cell() {
        let mut t = Table::new(["NAME", "STATUS"]);
        t.row(["a-long-name".into(), "running".into()]);
        t.row(["b".into(), "-".into()]);
        assert_eq!(t.to_string(), " NAME          STATUS\n a-long-name   running\n b             -\n");
    }

    #[test]
    fn a_logged_event_s_own_lines_are_indented() {
        assert_eq!(indent_following_lines(b"WARN x: a\nforage-ctl: ok\n"), b"WARN x: a\n  forage-ctl: ok\n");
        assert_eq!(indent_following_lines(b"one line\n"), b"one line\n");
    }

    #[test]
    fn control_and_invisible_characters_are_written_out() {
        assert_eq!(shown("a\x1b[31mred\x07\n"), "a\\x1b[31mred\\x07\\x0a");
        assert_eq!(shown("evil\u{202e}txt.exe\u{9b}"), "evil\\u{202e}txt.exe\\x9b");
        assert_eq!(shown_text("line\n\tnext\x1b"), "line\n\tnext\\x1b");
        assert_eq!(shown("plain ünïcode/path"), "plain ünïcode/path");
    }
}
