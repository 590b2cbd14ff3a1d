//! One error type for the whole crate, shaped as jj-cli's `CommandError`: what
//! kind of failure it is (which fixes the exit code, docs/exit-codes.md), what
//! went wrong, the error that caused it, and what the user can do about it, as
//! data. The library never writes a command line into a message: a hint names a
//! forage command as an `Invocation`, which the CLI renders as `forage-ctl …`
//! and a server as an action of its own.

use std::fmt;
use std::sync::OnceLock;

use serde::Serialize;

/// The engine this process speaks to, as an error names it, and how to start
/// it again: set once, when it first answers (a process speaks to one engine).
/// Until then, and for Docker, it is Docker's.
static ENGINE_WORDS: OnceLock<EngineWords> = OnceLock::new();

struct EngineWords {
    name: &'static str,
    start: String,
}

/// Names the engine that answered (`Podman` with how to start its service),
/// for the errors of a connection to it that breaks later.
pub fn name_the_engine(podman_start: Option<String>) {
    let words = match podman_start {
        Some(start) => EngineWords { name: "the Podman service", start },
        None => EngineWords { name: "the Docker engine", start: "check that dockerd is running".into() },
    };
    let _ = ENGINE_WORDS.set(words);
}

fn engine_words() -> (&'static str, &'static str) {
    match ENGINE_WORDS.get() {
        Some(w) => (w.name, &w.start),
        None => ("the Docker engine", "check that dockerd is running"),
    }
}

/// The class of a failure; each has one documented exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ErrorKind {
    /// Bad command-line input that clap could not catch (exit 2).
    Usage,
    /// A sandbox, template or image that does not exist (exit 3).
    NotFound,
    /// The name is taken, or the sandbox is in a state that forbids the request (exit 4).
    Conflict,
    /// The Docker engine cannot be reached (exit 5).
    Engine,
    /// The workspace or its version control refused (exit 6).
    Workspace,
    /// Going on would lose the user's work (exit 7).
    WouldLoseData,
    /// Anything else (exit 1).
    Other,
}

impl ErrorKind {
    pub fn exit_code(self) -> i32 {
        match self {
            ErrorKind::Other => 1,
            ErrorKind::Usage => 2,
            ErrorKind::NotFound => 3,
            ErrorKind::Conflict => 4,
            ErrorKind::Engine => 5,
            ErrorKind::Workspace => 6,
            ErrorKind::WouldLoseData => 7,
        }
    }
}

/// A forage command the user could run next: `["down", "agent-a", "--discard"]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Invocation(pub Vec<String>);

impl Invocation {
    pub fn new<S: Into<String>>(args: impl IntoIterator<Item = S>) -> Self {
        Invocation(args.into_iter().map(Into::into).collect())
    }
}

/// What the user can do about an error. `text` may hold `{command}` once,
/// where the invocation belongs in the sentence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Hint {
    pub text: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<Invocation>,
}

impl Hint {
    /// `text` with the command, if any, rendered by `render`.
    pub fn render(&self, render: impl Fn(&Invocation) -> String) -> String {
        match &self.command {
            Some(c) => self.text.replace("{command}", &render(c)),
            None => self.text.clone(),
        }
    }
}

type Source = Box<dyn std::error::Error + Send + Sync + 'static>;

#[derive(Debug)]
pub struct Error {
    kind: ErrorKind,
    message: String,
    hints: Vec<Hint>,
    source: Option<Source>,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn new(kind: ErrorKind, message: impl fmt::Display) -> Self {
        Error { kind, message: message.to_string(), hints: Vec::new(), source: None }
    }

    pub fn usage(message: impl fmt::Display) -> Self {
        Error::new(ErrorKind::Usage, message)
    }

    pub fn not_found(message: impl fmt::Display) -> Self {
        Error::new(ErrorKind::NotFound, message)
    }

    pub fn conflict(message: impl fmt::Display) -> Self {
        Error::new(ErrorKind::Conflict, message)
    }

    pub fn engine(message: impl fmt::Display) -> Self {
        Error::new(ErrorKind::Engine, message)
    }

    pub fn workspace(message: impl fmt::Display) -> Self {
        Error::new(ErrorKind::Workspace, message)
    }

    pub fn would_lose_data(message: impl fmt::Display) -> Self {
        Error::new(ErrorKind::WouldLoseData, message)
    }

    pub fn other(message: impl fmt::Display) -> Self {
        Error::new(ErrorKind::Other, message)
    }

    /// Adds a hint in words.
    pub fn hint(mut self, text: impl fmt::Display) -> Self {
        self.hints.push(Hint { text: text.to_string(), command: None });
        self
    }

    /// Adds a hint naming a forage command: `text` holds `{command}` where it goes.
    pub fn hint_run<S: Into<String>>(mut self, text: impl fmt::Display, args: impl IntoIterator<Item = S>) -> Self {
        self.hints.push(Hint { text: text.to_string(), command: Some(Invocation::new(args)) });
        self
    }

    /// Keeps `source` as the cause, shown after the message.
    pub fn caused_by(mut self, source: impl Into<Source>) -> Self {
        self.source = Some(source.into());
        self
    }

    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    pub fn exit_code(&self) -> i32 {
        self.kind.exit_code()
    }

    pub fn message(&self) -> &str {
        &self.message
    }

    pub fn hints(&self) -> &[Hint] {
        &self.hints
    }

    /// The same error with more said after its message (and its hints kept).
    pub fn with_note(mut self, note: impl fmt::Display) -> Self {
        self.message = format!("{self}; {note}");
        self.source = None;
        self
    }

    /// Wraps a Docker API error. Connection failures become `Engine` (exit 5) so a
    /// daemon that dies mid-command is reported the same way as one that never ran.
    pub fn docker(context: impl fmt::Display, err: bollard::errors::Error) -> Self {
        use bollard::errors::Error as B;
        match err {
            B::HyperResponseError { .. }
            | B::HyperLegacyError { .. }
            | B::IOError { .. }
            | B::RequestTimeoutError
            | B::SocketNotFoundError(_) => {
                let (engine, start) = engine_words();
                Error::engine(format!("{context}: {engine} stopped answering ({err})")).hint(start)
            }
            B::DockerResponseServerError { status_code, message } => {
                Error::other(format!("{context}: Docker engine said ({status_code}): {message}"))
            }
            other => Error::other(context).caused_by(other),
        }
    }

    /// As a server or `--json` shows it.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "kind": self.kind,
            "exit_code": self.exit_code(),
            "message": self.to_string(),
            "hints": self.hints,
        })
    }
}

/// The message, then its cause: one line (the hints are the renderer's).
impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)?;
        if let Some(source) = &self.source {
            write!(f, ": {source}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.as_deref().map(|s| s as &(dyn std::error::Error + 'static))
    }
}

/// Adds a human context to I/O and other foreign errors, which become the cause.
pub trait Context<T> {
    fn context(self, what: impl FnOnce() -> String) -> Result<T>;
}

impl<T, E: std::error::Error + Send + Sync + 'static> Context<T> for std::result::Result<T, E> {
    fn context(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| Error::other(what()).caused_by(e))
    }
}

/// True when a bollard error is the engine's 404 for the object asked about.
pub fn is_docker_not_found(err: &bollard::errors::Error) -> bool {
    matches!(err, bollard::errors::Error::DockerResponseServerError { status_code: 404, .. })
}

/// True when a bollard error is the engine's 409 (name in use, already started, …).
pub fn is_docker_conflict(err: &bollard::errors::Error) -> bool {
    matches!(err, bollard::errors::Error::DockerResponseServerError { status_code: 409, .. })
}

/// True when a bollard error says the container is not running, for an exec
/// or attach: Docker answers 409; Podman's compat API (4.3) answers 500 with
/// libpod's "container state improper", which is the same refusal.
pub fn is_not_running(err: &bollard::errors::Error) -> bool {
    is_docker_conflict(err)
        || matches!(err, bollard::errors::Error::DockerResponseServerError { status_code: 500, message }
            if message.contains("container state improper"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn podmans_state_improper_is_not_running_and_other_500s_are_not() {
        let e = |status_code, message: &str| bollard::errors::Error::DockerResponseServerError {
            status_code,
            message: message.into(),
        };
        assert!(is_not_running(&e(409, "container is not running")));
        assert!(is_not_running(&e(
            500,
            "can only create exec sessions on running containers: container state improper"
        )));
        assert!(!is_not_running(&e(500, "no space left on device")));
        assert!(!is_not_running(&e(404, "no such container")));
    }

    #[test]
    fn hints_are_data_and_the_cause_follows_the_message() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        let err = Error::conflict("sandbox \"x\" already exists")
            .caused_by(io)
            .hint_run("remove it with {command}", ["down", "x"])
            .hint("or pick another name");
        assert_eq!(err.exit_code(), 4);
        assert_eq!(err.to_string(), "sandbox \"x\" already exists: no such file");
        let shown: Vec<String> =
            err.hints().iter().map(|h| h.render(|c| format!("`forage-ctl {}`", c.0.join(" ")))).collect();
        assert_eq!(shown, ["remove it with `forage-ctl down x`", "or pick another name"]);
        let json = err.to_json();
        assert_eq!(json["kind"], "conflict");
        assert_eq!(json["hints"][0]["command"], serde_json::json!(["down", "x"]));
        assert!(std::error::Error::source(&err).is_some());
    }
}
