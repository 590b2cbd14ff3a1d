//! The one place forage-ctl writes to the terminal (as cargo's `Shell` and uv's
//! `Printer`): data on stdout, and everything said *about* the data (progress,
//! hints, warnings, errors) on stderr, so that `forage-ctl list | …` and
//! `--json` get data alone. Colour only on a terminal, never with NO_COLOR.
//! Every text that may hold a name the agent chose is escaped (`render::shown`):
//! a line break in one is written `\x0a`, so no line the agent makes can pass
//! for one of forage's. Only an error keeps its own line breaks, each
//! following line indented under the first.

// The printer is where printing is allowed; the rest of the crate denies it.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::io::{IsTerminal, Write};
use std::sync::Arc;

use serde::Serialize;

use super::render::{shown, shown_text, Spinner};
use crate::error::{Error, Hint, Invocation, Result};
use crate::progress::Progress;

#[derive(Clone)]
pub struct Printer {
    quiet: bool,
    json: bool,
    color: bool,
    /// The progress line, which every write here clears first (and draws
    /// again after), so that it never sits among the output.
    progress: Arc<Spinner>,
}

/// How a forage command reads on the command line.
pub fn command_line(invocation: &Invocation) -> String {
    let words: Vec<String> = invocation.0.iter().map(|w| shell_word(w)).collect();
    format!("`forage-ctl {}`", words.join(" "))
}

fn shell_word(word: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "-_./:=@,+%".contains(c);
    if !word.is_empty() && word.chars().all(plain) {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// Hints as `--json` shows them: each one's text rendered, its command kept
/// as arguments, so that scripts need not parse the line.
pub fn hints_json(hints: &[Hint]) -> serde_json::Value {
    hints.iter().map(|h| serde_json::json!({ "text": h.render(command_line), "command": h.command })).collect()
}

/// An error as one line: the message (and its cause), then each hint. A
/// message of several lines (a program's own error output) keeps them, each
/// indented, so that none starts as forage's own lines do.
pub fn error_line(err: &Error) -> String {
    let mut line = shown_text(&err.to_string());
    for hint in err.hints() {
        line.push_str("; ");
        line.push_str(&shown_text(&hint.render(command_line)));
    }
    line.replace('\n', "\n  ")
}

impl Printer {
    pub fn new(quiet: bool, json: bool) -> Self {
        let color = std::io::stderr().is_terminal() && crate::env::no_color().is_none();
        let progress = Arc::new(if quiet || json { Spinner::off() } else { Spinner::new() });
        Printer { quiet, json, color, progress }
    }

    pub fn quiet(&self) -> bool {
        self.quiet
    }

    /// `--json`: the command's result is printed as JSON, and nothing else on stdout.
    pub fn json_wanted(&self) -> bool {
        self.json
    }

    /// Whether the command's result may be coloured: stdout is a terminal and
    /// `NO_COLOR` is unset.
    pub fn data_color(&self) -> bool {
        std::io::stdout().is_terminal() && crate::env::no_color().is_none()
    }

    fn label(&self, word: &str, ansi: &str) -> String {
        if self.color {
            format!("\x1b[{ansi}m{word}\x1b[0m")
        } else {
            word.to_owned()
        }
    }

    /// A line of the command's result, on stdout (escaped).
    pub fn data(&self, line: impl AsRef<str>) {
        let line = shown(line.as_ref());
        self.progress.suspend(|| println!("{line}"));
    }

    /// Text made of several lines the caller escaped itself (a table, YAML).
    pub fn data_block(&self, text: impl AsRef<str>) {
        self.progress.suspend(|| print!("{}", text.as_ref()));
    }

    /// The command's result as JSON, on stdout.
    pub fn json<T: Serialize + ?Sized>(&self, value: &T) -> Result<()> {
        let text = serde_json::to_string_pretty(value).map_err(Error::other)?;
        self.progress.suspend(|| {
            let mut out = std::io::stdout().lock();
            // A reader that went away (`| head`) is not an error of ours.
            let _ = writeln!(out, "{text}");
        });
        Ok(())
    }

    /// `json` of `value` (an object) with the next steps added as `hints`
    /// (`hints_json`), its own keys in their order.
    pub fn json_with_hints<T: Serialize>(&self, value: &T, hints: &[Hint]) -> Result<()> {
        #[derive(Serialize)]
        struct WithHints<'a, T: Serialize> {
            #[serde(flatten)]
            value: &'a T,
            hints: serde_json::Value,
        }
        self.json(&WithHints { value, hints: hints_json(hints) })
    }

    /// What happened, for a person (not with `--quiet` or `--json`), on stderr.
    pub fn status(&self, line: impl AsRef<str>) {
        if !self.quiet && !self.json {
            let line = shown(line.as_ref());
            self.progress.suspend(|| eprintln!("{line}"));
        }
    }

    /// What the user may do next (not with `--quiet` or `--json`), on stderr.
    pub fn hint(&self, hint: &Hint) {
        if !self.quiet && !self.json {
            let line = format!("{}: {}", self.label("hint", "36"), shown(&hint.render(command_line)));
            self.progress.suspend(|| eprintln!("{line}"));
        }
    }

    /// `hint` for a sentence with `{command}` where `args` go.
    pub fn hint_run<S: Into<String>>(&self, text: &str, args: impl IntoIterator<Item = S>) {
        self.hint(&Hint { text: text.into(), command: Some(Invocation::new(args)) });
    }

    /// `hint` for advice that names no forage command.
    pub fn hint_text(&self, text: &str) {
        self.hint(&Hint { text: text.into(), command: None });
    }

    /// Something the user must read, even with `--quiet`, on stderr: one line.
    pub fn warn(&self, line: impl AsRef<str>) {
        let line = format!("forage-ctl: {}: {}", self.label("warning", "33"), shown(line.as_ref()));
        self.progress.suspend(|| eprintln!("{line}"));
    }

    /// The error, as one line on stderr; with `--json`, as one JSON object
    /// there (`{"error": {kind, exit_code, message, hints}}`), each hint's text
    /// rendered and its command kept as arguments, so that scripts need not
    /// parse the line.
    pub fn error(&self, err: &Error) {
        if self.json {
            let mut json = err.to_json();
            json["hints"] = hints_json(err.hints());
            eprintln!("{}", serde_json::json!({ "error": json }));
        } else {
            let line = format!("forage-ctl: {}: {}", self.label("error", "1;31"), error_line(err));
            self.progress.suspend(|| eprintln!("{line}"));
        }
    }

    /// Asks `question` on stderr (the progress line cleared first); true for
    /// `y` or `yes` on stdin.
    pub fn ask(&self, question: &str) -> bool {
        self.progress.finish();
        super::terminal::ask(question)
    }

    /// Clears the progress line for good: the terminal is about to belong to a
    /// container session or a pager.
    pub fn hand_over_terminal(&self) {
        self.progress.hand_over();
    }

    /// How the library's progress reaches the user: a spinner on a terminal,
    /// warnings alone with `--quiet`.
    pub fn progress(&self) -> Arc<dyn Progress> {
        if self.quiet || self.json {
            Arc::new(super::render::Quiet)
        } else {
            self.progress.clone()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_in_hints_read_as_a_shell_would_take_them() {
        assert_eq!(command_line(&Invocation::new(["down", "--discard", "x.1"])), "`forage-ctl down --discard x.1`");
        assert_eq!(command_line(&Invocation::new(["exec", "x", "--", "echo hi"])), "`forage-ctl exec x -- 'echo hi'`");
        let err = Error::not_found("no sandbox named \"x\"").hint_run("{command} shows the existing ones", ["list"]);
        assert_eq!(error_line(&err), "no sandbox named \"x\"; `forage-ctl list` shows the existing ones");
    }

    #[test]
    fn no_line_of_an_error_starts_as_forage_s_own_do() {
        let err = Error::workspace("`jj git import` failed: Error: x\nforage-ctl: all good");
        assert_eq!(error_line(&err), "`jj git import` failed: Error: x\n  forage-ctl: all good");
    }
}
