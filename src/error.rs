//! One error type for the whole crate. Every variant maps to one documented exit
//! code (docs/exit-codes.md), and every message is written to be the single line a
//! user reads: what was wrong, with the offending value, and how to fix it.

use std::fmt;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Bad command-line input that clap could not catch (exit 2).
    #[error("{0}")]
    Usage(String),
    /// A sandbox, template or image that does not exist (exit 3).
    #[error("{0}")]
    NotFound(String),
    /// The name is taken, or the sandbox is in a state that forbids the request (exit 4).
    #[error("{0}")]
    Conflict(String),
    /// The Docker engine cannot be reached (exit 5).
    #[error("{0}")]
    Engine(String),
    /// The workspace or its version control refused (exit 6).
    #[error("{0}")]
    Workspace(String),
    /// Going on would lose the user's work (exit 7).
    #[error("{0}")]
    WouldLoseData(String),
    /// Anything else (exit 1).
    #[error("{0}")]
    Other(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Other(_) => 1,
            Error::Usage(_) => 2,
            Error::NotFound(_) => 3,
            Error::Conflict(_) => 4,
            Error::Engine(_) => 5,
            Error::Workspace(_) => 6,
            Error::WouldLoseData(_) => 7,
        }
    }

    /// The same error (and exit code) with more said after it.
    pub fn with_note(self, note: impl fmt::Display) -> Self {
        let add = |m: String| format!("{m}; {note}");
        match self {
            Error::Usage(m) => Error::Usage(add(m)),
            Error::NotFound(m) => Error::NotFound(add(m)),
            Error::Conflict(m) => Error::Conflict(add(m)),
            Error::Engine(m) => Error::Engine(add(m)),
            Error::Workspace(m) => Error::Workspace(add(m)),
            Error::WouldLoseData(m) => Error::WouldLoseData(add(m)),
            Error::Other(m) => Error::Other(add(m)),
        }
    }

    pub fn other(msg: impl fmt::Display) -> Self {
        Error::Other(msg.to_string())
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
            | B::SocketNotFoundError(_) => Error::Engine(format!(
                "{context}: the Docker engine stopped answering ({err}); check that dockerd is running"
            )),
            B::DockerResponseServerError { status_code, message } => {
                Error::Other(format!("{context}: Docker engine said ({status_code}): {message}"))
            }
            other => Error::Other(format!("{context}: {other}")),
        }
    }
}

/// Adds a human context to I/O and other foreign errors.
pub trait Context<T> {
    fn context(self, what: impl FnOnce() -> String) -> Result<T>;
}

impl<T, E: fmt::Display> Context<T> for std::result::Result<T, E> {
    fn context(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| Error::Other(format!("{}: {e}", what())))
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
