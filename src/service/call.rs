//! One call of an operation by name, with its arguments as JSON: what every
//! transport (`forage-ctl serve` over HTTP; MCP) does with a request once it
//! has the operation's name and arguments. The table of operations is here
//! too, so that each transport lists the same ones with the same schemas.

use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::*;
use crate::error::Error;
use crate::runtime::docker::Docker;
use crate::sandbox::Engine;

/// An operation: its name, what it does, whether it only reads, and the
/// schema of its arguments.
pub struct Operation {
    pub name: &'static str,
    pub description: &'static str,
    pub read_only: bool,
    pub schema: fn(&mut SchemaGenerator) -> Schema,
}

const fn op<T: JsonSchema>(name: &'static str, description: &'static str, read_only: bool) -> Operation {
    Operation { name, description, read_only, schema: |generator| generator.subschema_for::<T>() }
}

/// Every operation, in the order they are listed.
pub const OPERATIONS: &[Operation] = &[
    op::<CreateRequest>("create", "Create a sandbox: a workspace (its own git worktree and branch, a private jj repository, or a directory as it is) and a container running the template's agent, given its first task. Returns the sandbox's record. Reports progress.", false),
    op::<NoArgs>("list", "Every sandbox: name, mode, status, agent activity, commits ahead, uncommitted files, branch, workspace.", true),
    op::<NameRequest>("status", "Everything forage knows about one sandbox: record, container, branch against its base, uncommitted files, network.", true),
    op::<ExecRequest>("exec", "Run a command in a running sandbox (in /workspace, as the agent's user) and return its exit code and output (each stream cut at 1 MiB, `truncated` says so).", false),
    op::<WaitRequest>("wait", "Wait until the agent of one of the named sandboxes exits or goes idle, or the timeout passes. Reports progress every 10 s.", true),
    op::<DiffRequest>("diff", "The agent's change since its base (committed and not, or one part): each file's status, line counts and patch (patches cut at 1 MiB in all).", true),
    op::<NameRequest>("log", "The agent's commits since its base, newest first.", true),
    op::<MergeToolRequest>("merge", "Land the agent's work on your branch (jj: bookmark) in your checkout: merge, squash or rebase; `dry_run` only says what would land.", false),
    op::<NameRequest>("apply", "The agent's whole change as uncommitted edits in your checkout.", false),
    op::<DownRequest>("down", "Tear a sandbox down: container first, then workspace and record; its unmerged work is archived (unless `discard`). Reports progress.", false),
    op::<JobRequest>("job", "Run a job: the repository (an absolute path, or a file://, https://, http:// or git:// URL) fetched into forage's mirror, a sandbox made from the mirror on a branch of its own, and the job's context (task, status, times, result) kept on disk after the sandbox goes. With `cleanup` (default: the server's --cleanup-on-complete, off), waits for the agent to exit and tears the sandbox down. Reports progress.", false),
    op::<NoArgs>("jobs", "Every job's context: task, status (queued, running, done, failed), times, exit code, output tail, result.", true),
    op::<ArchivesRequest>("archives", "What `down` archived, for `forage-ctl restore`.", true),
];

/// Why a call did not give a result.
#[derive(Debug)]
pub enum CallError {
    /// No operation of that name.
    Unknown(String),
    /// The arguments are not what the operation takes (the field named).
    BadArguments(String),
    /// The operation ran, or was refused by forage, with this error.
    Failed(Error),
}

impl From<Error> for CallError {
    fn from(e: Error) -> Self {
        CallError::Failed(e)
    }
}

/// The request struct of an operation, from its JSON arguments.
pub fn arguments<T: DeserializeOwned>(args: Value) -> Result<T, CallError> {
    let args = if args.is_null() { Value::Object(Default::default()) } else { args };
    serde_json::from_value(args).map_err(|e| CallError::BadArguments(format!("invalid arguments: {e}")))
}

/// What the server running the operations (`serve`, `mcp`) was started
/// with, for what a request leaves to it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Defaults {
    /// A job asked for without `cleanup` is torn down once its agent exits
    /// (`--cleanup-on-complete`); off, its sandbox stays, debuggable.
    pub cleanup_on_complete: bool,
}

/// Runs operation `name` with `args` on `engine`.
pub async fn call(engine: &Engine<Docker>, name: &str, args: Value, defaults: Defaults) -> Result<Value, CallError> {
    Ok(match name {
        "create" => create(engine, arguments(args)?).await?,
        "list" => {
            arguments::<NoArgs>(args)?;
            list(engine).await?
        }
        "status" => status(engine, arguments(args)?).await?,
        "exec" => {
            let executed = exec::run(engine, arguments(args)?).await?;
            serde_json::to_value(&executed).map_err(|e| Error::other(format!("could not encode the result: {e}")))?
        }
        "wait" => wait(engine, arguments(args)?).await?,
        "diff" => diff(engine, arguments(args)?).await?,
        "log" => log(engine, arguments(args)?).await?,
        "merge" => merge(engine, arguments(args)?).await?,
        "apply" => apply(engine, arguments(args)?).await?,
        "down" => down(engine, arguments(args)?).await?,
        "archives" => archives(engine, arguments(args)?)?,
        "job" => job(engine, arguments(args)?, defaults).await?,
        "jobs" => {
            arguments::<NoArgs>(args)?;
            jobs_list(engine).await?
        }
        other => {
            let known: Vec<&str> = OPERATIONS.iter().map(|o| o.name).collect();
            return Err(CallError::Unknown(format!("unknown operation {other:?}: forage's are {}", known.join(", "))));
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_operation_is_one_call_knows() {
        let names: Vec<&str> = OPERATIONS.iter().map(|o| o.name).collect();
        let mut unique = names.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), names.len(), "{names:?}");
        let err = arguments::<NameRequest>(serde_json::json!({"name": "a", "bogus": 1})).unwrap_err();
        assert!(matches!(&err, CallError::BadArguments(m) if m.contains("bogus")), "{err:?}");
    }
}
