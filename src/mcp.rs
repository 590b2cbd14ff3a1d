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
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::sync::{mpsc, RwLock};
use tokio::task::JoinHandle;

use crate::error::{Error, ErrorKind, Result};
use crate::progress::{Progress, Silent};
use crate::runtime::docker::Docker;
use crate::sandbox::{Cancel, Engine};
use crate::service::{self, *};

/// The server: the engine every call clones, and what shutdown needs.
#[derive(Clone)]
pub struct Server {
    engine: Engine<Docker>,
    /// Set once the server stops taking calls; each call's `Cancel` follows it.
    shutdown: Cancel,
    /// Held shared by every call in flight; `shutdown` takes it exclusively.
    in_flight: Arc<RwLock<()>>,
}

/// A tool: its name, what it does, its input schema, and whether it only reads.
struct ToolDef {
    name: &'static str,
    description: &'static str,
    schema: fn() -> Arc<JsonObject>,
    read_only: bool,
}

const fn tool(
    name: &'static str,
    description: &'static str,
    schema: fn() -> Arc<JsonObject>,
    read_only: bool,
) -> ToolDef {
    ToolDef { name, description, schema, read_only }
}

/// Every tool, in the order a client lists them.
const TOOLS: &[ToolDef] = &[
    tool("create", "Create a sandbox: a workspace (its own git worktree and branch, a private jj repository, or a directory as it is) and a container running the template's agent, given its first task. Returns the sandbox's record. Reports progress.", schema_for_type::<CreateRequest>, false),
    tool("list", "Every sandbox: name, mode, status, agent activity, commits ahead, uncommitted files, branch, workspace.", schema_for_type::<NoArgs>, true),
    tool("status", "Everything forage knows about one sandbox: record, container, branch against its base, uncommitted files, network.", schema_for_type::<NameRequest>, true),
    tool("exec", "Run a command in a running sandbox (in /workspace, as the agent's user) and return its exit code and output (each stream cut at 1 MiB, `truncated` says so).", schema_for_type::<ExecRequest>, false),
    tool("wait", "Wait until the agent of one of the named sandboxes exits or goes idle, or the timeout passes. Reports progress every 10 s.", schema_for_type::<WaitRequest>, true),
    tool("diff", "The agent's change since its base (committed and not, or one part): each file's status, line counts and patch (patches cut at 1 MiB in all).", schema_for_type::<DiffRequest>, true),
    tool("log", "The agent's commits since its base, newest first.", schema_for_type::<NameRequest>, true),
    tool("merge", "Land the agent's work on your branch (jj: bookmark) in your checkout: merge, squash or rebase; `dry_run` only says what would land.", schema_for_type::<MergeToolRequest>, false),
    tool("apply", "The agent's whole change as uncommitted edits in your checkout.", schema_for_type::<NameRequest>, false),
    tool("down", "Tear a sandbox down: container first, then workspace and record; its unmerged work is archived (unless `discard`). Reports progress.", schema_for_type::<DownRequest>, false),
    tool("job", "Run a job: the repository (a path or file:// URL) fetched into forage's mirror, a sandbox made from the mirror on a branch of its own, and the job's context (task, status, times, result) kept on disk after the sandbox goes. With `cleanup`, waits for the agent to exit and tears the sandbox down. Reports progress.", schema_for_type::<JobRequest>, false),
    tool("jobs", "Every job's context: task, status (queued, running, done, failed), times, exit code, output tail, result.", schema_for_type::<NoArgs>, true),
    tool("archives", "What `down` archived, for `forage-ctl restore`.", schema_for_type::<ArchivesRequest>, true),
];

impl Server {
    pub fn new(engine: Engine<Docker>) -> Self {
        Server { engine, shutdown: Cancel::default(), in_flight: Arc::new(RwLock::new(())) }
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
        let args = params.arguments.unwrap_or_default();
        let done = match params.name.as_ref() {
            "create" => service::create(engine, parse(args)?).await,
            "list" => {
                parse::<NoArgs>(args)?;
                service::list(engine).await
            }
            "status" => service::status(engine, parse(args)?).await,
            "exec" => service::exec::run(engine, parse(args)?).await.and_then(|e| to_value(&e)),
            "wait" => service::wait(engine, parse(args)?).await,
            "diff" => service::diff(engine, parse(args)?).await,
            "log" => service::log(engine, parse(args)?).await,
            "merge" => service::merge(engine, parse(args)?).await,
            "apply" => service::apply(engine, parse(args)?).await,
            "down" => service::down(engine, parse(args)?).await,
            "archives" => service::archives(engine, parse(args)?),
            "job" => service::job(engine, parse(args)?).await,
            "jobs" => {
                parse::<NoArgs>(args)?;
                service::jobs_list(engine)
            }
            other => {
                let known: Vec<&str> = TOOLS.iter().map(|t| t.name).collect();
                return Err(ErrorData::invalid_params(
                    format!("unknown tool {other:?}: forage's tools are {}", known.join(", ")),
                    None,
                ));
            }
        };
        answer(done)
    }
}

fn to_value(value: &impl serde::Serialize) -> Result<Value> {
    serde_json::to_value(value).map_err(|e| Error::other(format!("could not encode the result: {e}")))
}

/// A tool's arguments as its request struct, or the JSON-RPC error that says
/// which field is wrong.
fn parse<T: DeserializeOwned>(args: JsonObject) -> Result<T, ErrorData> {
    serde_json::from_value(Value::Object(args))
        .map_err(|e| ErrorData::invalid_params(format!("invalid arguments: {e}"), None))
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
        Ok(ListToolsResult::with_all_items(TOOLS.iter().map(as_tool).collect()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        TOOLS.iter().find(|t| t.name == name).map(as_tool)
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

fn as_tool(def: &ToolDef) -> Tool {
    let annotations = ToolAnnotations::new().read_only(def.read_only).destructive(!def.read_only);
    Tool::new(Cow::Borrowed(def.name), Cow::Borrowed(def.description), (def.schema)()).with_annotations(annotations)
}
