//! `forage-ctl mcp`: forage's operations as the tools of an MCP server (the
//! official Rust SDK, `rmcp`), for an orchestrating agent to fan work out to
//! sandboxed agents and land the results. The tools are `service`'s
//! operations: this module only names them, reads their arguments, and turns
//! results and errors into MCP's shapes.
//!
//! Errors: arguments that are not what a tool takes (an unknown tool, a
//! missing or unknown field, a bad name or path: forage's usage errors) are
//! JSON-RPC errors (-32602, with forage's error as `data`); a tool that ran
//! and failed returns `isError` with forage's error as its structured result
//! (`service::error_json`: a stable `code`, the CLI's `exit_code`, the
//! message and hints).
//!
//! Each call gets its own `Cancel`: the client cancelling it, or the server
//! shutting down (the client went away, a signal), stops it after its current
//! step, and `create` rolls back what it made, as `up` does at Ctrl-C. The
//! server does not exit before every call in flight has finished so.

use std::borrow::Cow;
use std::sync::Arc;

use rmcp::handler::server::common::schema_for_type;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, Implementation, JsonObject, ListToolsResult,
    PaginatedRequestParams, ProgressNotificationParam, ProgressToken, ServerCapabilities, ServerConfig, Tool,
    ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::Value;
use tokio::sync::{mpsc, RwLock};
use tokio::task::JoinHandle;

use crate::error::{ErrorKind, Result};
use crate::progress::{Progress, Silent};
use crate::runtime::docker::Docker;
use crate::sandbox::{Cancel, Engine};
use crate::service::call::{call, CallError, Defaults, Operation, OPERATIONS};
use crate::service::{self, *};

/// The server: the engine every call clones, and what shutdown needs.
#[derive(Clone)]
pub struct Server {
    engine: Engine<Docker>,
    /// What requests leave to the server.
    defaults: Defaults,
    /// Set once the server stops taking calls; each call's `Cancel` follows it.
    shutdown: Cancel,
    /// Held shared by every call in flight; `shutdown` takes it exclusively.
    in_flight: Arc<RwLock<()>>,
}

/// Each tool's input schema, as rmcp makes it from the request type; the
/// tools themselves (names, descriptions, what only reads) are
/// `service::call::OPERATIONS`, in that order.
/// A tool's input schema, made on demand.
type SchemaFn = fn() -> Arc<JsonObject>;

const SCHEMAS: &[(&str, SchemaFn)] = &[
    ("create", schema_for_type::<CreateRequest>),
    ("list", schema_for_type::<NoArgs>),
    ("status", schema_for_type::<NameRequest>),
    ("exec", schema_for_type::<ExecRequest>),
    ("wait", schema_for_type::<WaitRequest>),
    ("diff", schema_for_type::<DiffRequest>),
    ("log", schema_for_type::<NameRequest>),
    ("merge", schema_for_type::<MergeToolRequest>),
    ("apply", schema_for_type::<NameRequest>),
    ("down", schema_for_type::<DownRequest>),
    ("job", schema_for_type::<JobRequest>),
    ("jobs", schema_for_type::<NoArgs>),
    ("archives", schema_for_type::<ArchivesRequest>),
];

impl Server {
    pub fn new(engine: Engine<Docker>, defaults: Defaults) -> Self {
        Server { engine, defaults, shutdown: Cancel::default(), in_flight: Arc::new(RwLock::new(())) }
    }

    /// Stops taking calls, cancels those in flight, and returns once each has
    /// finished (rolled back what it had made, for `create`).
    pub async fn shutdown(&self) {
        self.shutdown.trigger();
        let _all_done = self.in_flight.write().await;
    }

    /// The engine for one call: its own cancel (the client's cancellation or
    /// the server's shutdown) and progress (to the client's token, if any).
    fn engine_for(
        &self,
        context: &RequestContext<RoleServer>,
    ) -> (Engine<Docker>, JoinHandle<()>, Option<JoinHandle<()>>) {
        let cancel = Cancel::default();
        let (ct, shutdown, trigger) = (context.ct.clone(), self.shutdown.clone(), cancel.clone());
        let watcher = tokio::spawn(async move {
            tokio::select! {
                () = ct.cancelled() => {}
                () = shutdown.triggered() => {}
            }
            trigger.trigger();
        });
        let (progress, forwarder): (Arc<dyn Progress>, _) = match context.meta.get_progress_token() {
            Some(token) => {
                let (progress, forwarder) = progress_to(context.peer.clone(), token);
                (Arc::new(progress), Some(forwarder))
            }
            None => (Arc::new(Silent), None),
        };
        (Engine { cancel, progress, ..self.engine.clone() }, watcher, forwarder)
    }

    async fn call(&self, params: CallToolRequestParams, engine: &Engine<Docker>) -> Result<CallToolResult, ErrorData> {
        let args = Value::Object(params.arguments.unwrap_or_default());
        match call(engine, params.name.as_ref(), args, self.defaults).await {
            Ok(value) => answer(Ok(value)),
            Err(CallError::Unknown(text) | CallError::BadArguments(text)) => Err(ErrorData::invalid_params(text, None)),
            Err(CallError::Failed(e)) => answer(Err(e)),
        }
    }
}

/// A call's outcome in MCP's shapes: usage errors are the client's bad
/// arguments (a JSON-RPC error), other errors the tool's failure (a result
/// with `isError`), both with forage's error as data.
fn answer(done: Result<Value>) -> Result<CallToolResult, ErrorData> {
    match done {
        Ok(value) => Ok(CallToolResult::structured(value)),
        Err(e) if e.kind() == ErrorKind::Usage => {
            Err(ErrorData::invalid_params(e.to_string(), Some(service::error_json(&e))))
        }
        Err(e) => Ok(CallToolResult::structured_error(service::error_json(&e))),
    }
}

/// A `Progress` that sends each step to the client as a progress
/// notification on `token`, through a task (the trait's methods are not async).
fn progress_to(peer: rmcp::Peer<RoleServer>, token: ProgressToken) -> (ChannelProgress, JoinHandle<()>) {
    let (tx, mut rx) = mpsc::unbounded_channel::<String>();
    let forwarder = tokio::spawn(async move {
        let mut n = 0.0;
        while let Some(message) = rx.recv().await {
            n += 1.0;
            let note = ProgressNotificationParam::new(token.clone(), n).with_message(message);
            // A client that left cannot be told; the call goes on to its end.
            let _ = peer.notify_progress(note).await;
        }
    });
    (ChannelProgress(tx), forwarder)
}

struct ChannelProgress(mpsc::UnboundedSender<String>);

impl Progress for ChannelProgress {
    fn step(&self, message: &str) {
        let _ = self.0.send(message.to_owned());
    }
    fn note(&self, message: &str) {
        let _ = self.0.send(message.to_owned());
    }
    fn warn(&self, message: &str) {
        let _ = self.0.send(format!("warning: {message}"));
    }
}

impl ServerHandler for Server {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("forage", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "forage runs coding agents in sandboxes: one container and one workspace (a git worktree on \
                 its own branch, or a private jj repository) per agent. `create` one per task, `wait` for the \
                 agents, review with `diff` and `log`, land the best with `merge`, then `down` each. Errors \
                 carry forage's `code`, `exit_code`, message and hints.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> std::result::Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(OPERATIONS.iter().filter_map(as_tool).collect()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        OPERATIONS.iter().find(|o| o.name == name).and_then(as_tool)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> std::result::Result<CallToolResponse, ErrorData> {
        let Ok(_in_flight) = self.in_flight.try_read() else {
            return Err(ErrorData::internal_error("forage's MCP server is shutting down", None));
        };
        if self.shutdown.is_triggered() {
            return Err(ErrorData::internal_error("forage's MCP server is shutting down", None));
        }
        let (engine, watcher, forwarder) = self.engine_for(&context);
        let result = self.call(request, &engine).await;
        watcher.abort();
        // Every progress notification goes out before the result.
        drop(engine);
        if let Some(forwarder) = forwarder {
            let _ = forwarder.await;
        }
        result.map(Into::into)
    }
}

fn as_tool(op: &Operation) -> Option<Tool> {
    let (_, schema) = SCHEMAS.iter().find(|(name, _)| *name == op.name)?;
    let annotations = ToolAnnotations::new().read_only(op.read_only).destructive(!op.read_only);
    Some(Tool::new(Cow::Borrowed(op.name), Cow::Borrowed(op.description), schema()).with_annotations(annotations))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_operation_is_a_tool_with_a_schema() {
        let names: Vec<&str> = SCHEMAS.iter().map(|(name, _)| *name).collect();
        let operations: Vec<&str> = OPERATIONS.iter().map(|o| o.name).collect();
        assert_eq!(names, operations);
        assert!(OPERATIONS.iter().all(|o| as_tool(o).is_some()));
    }
}
