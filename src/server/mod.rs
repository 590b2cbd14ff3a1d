//! `forage-ctl serve`: forage's operations as an HTTP/JSON API, for programs
//! that start agents (a CI system, an orchestrator, a web UI). Each operation
//! is `POST /v1/OPERATION` with the operation's arguments as a JSON object
//! (the same as the MCP tool's), answered with its JSON result; errors carry
//! forage's stable `code`, the CLI's `exit_code`, the message and hints, with
//! an HTTP status that follows the exit code. `GET /v1/openapi.json` is the
//! OpenAPI document (`openapi`), generated from the request types. `logs`,
//! `exec/stream` and `wait/stream` answer with server-sent events (`stream`,
//! `live`).
//!
//! Who may call: a unix socket (default), mode 0600 in a directory of the
//! user's own, so only the user; or a loopback TCP port, where every request
//! must carry the bearer token. Workspaces must lie under the allowed roots.
//!
//! Each request runs in a task of its own with its own `Cancel`: a client
//! that goes away cancels it (`create` rolls back as `up` does at Ctrl-C),
//! and the server, when stopped, cancels those in flight and waits for them.

pub mod listen;
mod live;
pub mod openapi;
pub mod stream;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{json, Value};
use tokio::sync::{OwnedRwLockReadGuard, RwLock};
use tokio::task::JoinHandle;

use crate::error::{Error, ErrorKind};
use crate::progress::Silent;
use crate::runtime::docker::Docker;
use crate::sandbox::{Cancel, Engine};
use crate::service::call::{call, CallError, Defaults, OPERATIONS};

/// A response's body: a JSON answer, or a stream of events (`stream`).
pub type Body = UnsyncBoxBody<Bytes, std::convert::Infallible>;

/// The largest request body taken: arguments, not uploads.
pub const MAX_BODY: usize = 1 << 20;

/// What the server serves, and to whom.
#[derive(Debug, Clone)]
pub struct Config {
    /// The unix socket to listen on.
    pub socket: Option<PathBuf>,
    /// A loopback address and port to listen on too (needs `token`).
    pub tcp: Option<SocketAddr>,
    /// The bearer token TCP requests must carry.
    pub token: Option<String>,
    /// Canonical directories a workspace must lie under.
    pub roots: Vec<PathBuf>,
    /// What requests leave to the server.
    pub defaults: Defaults,
}

/// The server's state, shared by every connection.
pub struct Server {
    engine: Engine<Docker>,
    config: Config,
    /// Set when the server stops: each request's `Cancel` follows it.
    shutdown: Cancel,
    /// Held shared by every request in flight; stopping takes it exclusively.
    in_flight: Arc<RwLock<()>>,
}

/// The endpoints that answer with server-sent events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Streamed {
    /// `POST /v1/logs` (`stream`).
    Logs,
    /// `POST /v1/exec/stream` (`live`).
    Exec,
    /// `POST /v1/wait/stream` (`live`).
    Wait,
}

impl Streamed {
    const ALL: [(&'static str, Streamed); 3] =
        [("logs", Streamed::Logs), ("exec/stream", Streamed::Exec), ("wait/stream", Streamed::Wait)];

    fn at(op: &str) -> Option<Streamed> {
        Self::ALL.iter().find(|(name, _)| *name == op).map(|(_, s)| *s)
    }
}

/// What a request holds until its work has ended, wherever that work runs:
/// the server's in-flight lock (so that stopping waits for it), and the
/// watcher that cancels the work when the server stops.
pub struct InFlight {
    _lock: OwnedRwLockReadGuard<()>,
    watcher: JoinHandle<()>,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.watcher.abort();
    }
}

impl Server {
    pub fn new(engine: Engine<Docker>, config: Config) -> Arc<Server> {
        Arc::new(Server { engine, config, shutdown: Cancel::default(), in_flight: Arc::new(RwLock::new(())) })
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Stops taking requests, cancels those in flight and waits for them.
    pub async fn stop(&self) {
        self.shutdown.trigger();
        let _all_done = self.in_flight.write().await;
    }

    /// Answers one request; `over_tcp` requests must carry the token.
    pub async fn handle(self: Arc<Self>, request: Request<Incoming>, over_tcp: bool) -> Response<Body> {
        if over_tcp && !self.authorized(&request) {
            let err = problem(
                "unauthorized",
                "this request needs `Authorization: Bearer TOKEN` (the token `serve` was given)",
            );
            return reply(StatusCode::UNAUTHORIZED, &err);
        }
        let path = request.uri().path().to_owned();
        if path == "/v1/openapi.json" && request.method() == Method::GET {
            return reply(StatusCode::OK, &openapi::document());
        }
        let op = path.strip_prefix("/v1/").unwrap_or_default();
        let streamed = Streamed::at(op);
        if streamed.is_none() && !OPERATIONS.iter().any(|o| o.name == op) {
            let known: Vec<&str> =
                OPERATIONS.iter().map(|o| o.name).chain(Streamed::ALL.iter().map(|(name, _)| *name)).collect();
            let text = format!("no operation at {path}: forage's are POST /v1/{{{}}}", known.join(","));
            return reply(StatusCode::NOT_FOUND, &problem("unknown-operation", &text));
        }
        if request.method() != Method::POST {
            let text = format!("{path} takes POST, with the arguments as a JSON object");
            return reply(StatusCode::METHOD_NOT_ALLOWED, &problem("method-not-allowed", &text));
        }
        let op = op.to_owned();
        let mut args = match read_arguments(request.into_body()).await {
            Ok(args) => args,
            Err((status, body)) => return reply(status, &body),
        };
        if let Err(body) = self.check_roots(&op, &mut args) {
            return reply(StatusCode::FORBIDDEN, &body);
        }
        match streamed {
            Some(streamed) => self.stream(streamed, args).await,
            None => self.run(op, args).await,
        }
    }

    /// The engine for one request, with its own `Cancel`: triggered when the
    /// returned `CancelOnDrop` is dropped (the client went away) or the
    /// server stops. None when the server is stopping.
    fn begin(&self) -> Option<(Engine<Docker>, CancelOnDrop, InFlight)> {
        let lock = self.in_flight.clone().try_read_owned().ok()?;
        if self.shutdown.is_triggered() {
            return None;
        }
        let cancel = Cancel::default();
        let (shutdown, follow) = (self.shutdown.clone(), cancel.clone());
        let watcher = tokio::spawn(async move {
            shutdown.triggered().await;
            follow.trigger();
        });
        let engine = Engine { cancel: cancel.clone(), progress: Arc::new(Silent), ..self.engine.clone() };
        Some((engine, CancelOnDrop(cancel), InFlight { _lock: lock, watcher }))
    }

    /// Runs `op` in a task of its own, cancelled if this future is dropped
    /// (the client went away) or the server stops.
    async fn run(self: Arc<Self>, op: String, args: Value) -> Response<Body> {
        let Some((engine, _cancel_if_dropped, in_flight)) = self.begin() else { return stopping() };
        let defaults = self.config.defaults;
        // The task, not this future, holds the in-flight lock: a client that
        // went away cancels the work, and a stopping server still waits for
        // its rollback.
        let task = tokio::spawn(async move {
            let _in_flight = in_flight;
            call(&engine, &op, args, defaults).await
        });
        let done = task.await;
        match done {
            Ok(Ok(value)) => reply(StatusCode::OK, &value),
            Ok(Err(CallError::Failed(e))) => reply(status_of(e.kind()), &crate::service::error_json(&e)),
            Ok(Err(CallError::BadArguments(text) | CallError::Unknown(text))) => {
                reply(StatusCode::BAD_REQUEST, &problem("usage", &text))
            }
            Err(e) => {
                reply(StatusCode::INTERNAL_SERVER_ERROR, &problem("internal", &format!("the request failed: {e}")))
            }
        }
    }

    /// An endpoint that answers with events: refused with a status and an
    /// error body before the stream begins, as the other endpoints are.
    async fn stream(&self, streamed: Streamed, args: Value) -> Response<Body> {
        let answered = match streamed {
            Streamed::Logs => match arguments(args) {
                Ok(request) => stream::logs(&self.engine, request),
                Err((status, body)) => return reply(status, &body),
            },
            Streamed::Exec | Streamed::Wait => {
                let Some((engine, cancel_if_dropped, in_flight)) = self.begin() else { return stopping() };
                let held = (cancel_if_dropped, in_flight);
                if streamed == Streamed::Exec {
                    match arguments(args) {
                        Ok(request) => live::exec(engine, request, held).await,
                        Err((status, body)) => return reply(status, &body),
                    }
                } else {
                    match arguments(args) {
                        Ok(request) => live::wait(engine, request, held),
                        Err((status, body)) => return reply(status, &body),
                    }
                }
            }
        };
        answered.unwrap_or_else(|e| reply(status_of(e.kind()), &crate::service::error_json(&e)))
    }

    fn authorized(&self, request: &Request<Incoming>) -> bool {
        let Some(token) = &self.config.token else { return false };
        let given = request.headers().get(hyper::header::AUTHORIZATION).and_then(|v| v.to_str().ok());
        given.and_then(|v| v.strip_prefix("Bearer ")).is_some_and(|g| same(g.as_bytes(), token.as_bytes()))
    }

    /// The workspace (or repository) a request names must lie under a root.
    /// The path is replaced by the canonical one it was checked as, so that a
    /// symlink swapped after the check cannot lead the operation elsewhere.
    fn check_roots(&self, op: &str, args: &mut Value) -> Result<(), Value> {
        let field = match op {
            "create" => "workspace",
            "job" => "repo",
            _ => return Ok(()),
        };
        let Some(path) = args.get(field).and_then(Value::as_str) else { return Ok(()) };
        // A job's repository fetched over the network names no path of this
        // machine: nothing to keep it under (the job checks the URL itself).
        if op == "job" && crate::jobs::mirror::is_network_url(path) {
            return Ok(());
        }
        // A job's repository may be given as a file:// URL.
        let path = Path::new(path.strip_prefix("file://").unwrap_or(path));
        let Ok(canonical) = path.canonicalize() else {
            let text = format!("{field} {} does not exist (or cannot be reached)", path.display());
            return Err(problem("outside-roots", &text));
        };
        if self.config.roots.iter().any(|root| canonical.starts_with(root)) {
            args[field] = Value::String(canonical.display().to_string());
            return Ok(());
        }
        let roots: Vec<String> = self.config.roots.iter().map(|r| r.display().to_string()).collect();
        Err(problem(
            "outside-roots",
            &format!(
                "{field} {} is outside the directories this server may use ({}); start `serve` with --root DIR to allow one",
                canonical.display(),
                roots.join(", ")
            ),
        ))
    }
}

/// The request struct of a streaming endpoint, or the status and error refusing it.
fn arguments<T: serde::de::DeserializeOwned>(args: Value) -> Result<T, (StatusCode, Value)> {
    crate::service::call::arguments(args).map_err(|e| match e {
        CallError::BadArguments(text) | CallError::Unknown(text) => (StatusCode::BAD_REQUEST, problem("usage", &text)),
        CallError::Failed(e) => (status_of(e.kind()), crate::service::error_json(&e)),
    })
}

fn stopping() -> Response<Body> {
    reply(StatusCode::SERVICE_UNAVAILABLE, &problem("stopping", "forage's server is stopping"))
}

/// Cancels the request's work when its handler (or its stream) is dropped.
pub struct CancelOnDrop(Cancel);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.trigger();
    }
}

/// The arguments of a request: its body as a JSON object (an empty body is
/// no arguments), at most `MAX_BODY` bytes.
async fn read_arguments(body: Incoming) -> Result<Value, (StatusCode, Value)> {
    let bytes = match Limited::new(body, MAX_BODY).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) if e.downcast_ref::<http_body_util::LengthLimitError>().is_some() => {
            let text = format!("the request's body is over {} KiB: arguments only", MAX_BODY >> 10);
            return Err((StatusCode::PAYLOAD_TOO_LARGE, problem("too-large", &text)));
        }
        Err(e) => return Err((StatusCode::BAD_REQUEST, problem("usage", &format!("reading the request's body: {e}")))),
    };
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(json!({}));
    }
    match serde_json::from_slice::<Value>(&bytes) {
        Ok(value) if value.is_object() => Ok(value),
        Ok(_) => Err((StatusCode::BAD_REQUEST, problem("usage", "the request's body must be a JSON object"))),
        Err(e) => Err((StatusCode::BAD_REQUEST, problem("usage", &format!("the request's body is not JSON: {e}")))),
    }
}

/// The HTTP status of a forage error, after its exit code.
pub fn status_of(kind: ErrorKind) -> StatusCode {
    match kind {
        ErrorKind::Usage => StatusCode::BAD_REQUEST,
        ErrorKind::NotFound => StatusCode::NOT_FOUND,
        ErrorKind::Conflict => StatusCode::CONFLICT,
        ErrorKind::Engine => StatusCode::SERVICE_UNAVAILABLE,
        ErrorKind::Workspace => StatusCode::UNPROCESSABLE_ENTITY,
        ErrorKind::WouldLoseData => StatusCode::PRECONDITION_FAILED,
        ErrorKind::Other => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// An error of the server's own, shaped as forage's errors are.
fn problem(code: &str, message: &str) -> Value {
    let exit_code = if code == "internal" { 1 } else { 2 };
    json!({ "code": code, "exit_code": exit_code, "message": message, "hints": [] })
}

fn reply(status: StatusCode, body: &Value) -> Response<Body> {
    let mut text = serde_json::to_vec(body).unwrap_or_default();
    text.push(b'\n');
    let mut response = Response::new(Full::new(Bytes::from(text)).boxed_unsync());
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(hyper::header::CONTENT_TYPE, hyper::header::HeaderValue::from_static("application/json"));
    response
}

/// Compares two secrets in time that does not depend on where they differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A forage error as the server reports it when it cannot start.
pub fn refused(message: String) -> Error {
    Error::usage(message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_follow_exit_codes_and_tokens_compare_whole() {
        assert_eq!(status_of(ErrorKind::Usage), StatusCode::BAD_REQUEST);
        assert_eq!(status_of(ErrorKind::NotFound), StatusCode::NOT_FOUND);
        assert_eq!(status_of(ErrorKind::Conflict), StatusCode::CONFLICT);
        assert!(same(b"abc", b"abc"));
        assert!(!same(b"abc", b"abd") && !same(b"abc", b"abcd") && !same(b"", b"a"));
    }
}
