//! forage as a service: the requests a program (an orchestrating agent over
//! MCP today, an HTTP client later) sends, as plain structs in, and the JSON
//! results it gets back, the same data the CLI's `--json` prints. Every
//! operation calls the library (`sandbox::Engine`) directly, so a request
//! gets every check, lock, journal and rollback a command gets. Errors stay
//! forage's `Error`: the transport decides how to show them (`error_json`).

pub mod call;
pub mod exec;
mod requests;

pub use requests::*;

use std::time::Duration;

use serde::Serialize;
use serde_json::{json, Value};

use self::call::Defaults;
use crate::error::{Error, ErrorKind, Hint, Result};
use crate::jobs::{self, JobSpec};
use crate::names::SandboxName;
use crate::runtime::docker::Docker;
use crate::sandbox::{DownOptions, Engine, MergeRequest, Until};

/// An error as a client gets it: a stable `code` (the error's kind, e.g.
/// `not-found`), the CLI's exit code for it, the message, and the hints,
/// each with the forage command it names (as arguments) when it names one.
pub fn error_json(err: &Error) -> Value {
    json!({
        "code": err.kind(),
        "exit_code": err.exit_code(),
        "message": err.to_string(),
        "hints": hints_json(err.hints()),
    })
}

fn hints_json(hints: &[Hint]) -> Value {
    let shown = |h: &Hint| h.render(|c| format!("`forage-ctl {}`", c.0.join(" ")));
    hints.iter().map(|h| json!({ "text": shown(h), "command": h.command })).collect()
}

/// A sandbox name from a request, or a usage error naming it.
pub fn sandbox_name(raw: &str) -> Result<SandboxName> {
    SandboxName::parse(raw).map_err(Error::usage)
}

fn to_value(value: &impl Serialize) -> Result<Value> {
    serde_json::to_value(value).map_err(|e| Error::other(format!("could not encode the result: {e}")))
}

/// Creates a sandbox (what `up --json` prints: its record), with the
/// warnings `up` would print.
pub async fn create(engine: &Engine<Docker>, request: CreateRequest) -> Result<Value> {
    let spec = request.into_spec()?;
    let prepared = engine.prepare_up(spec).await?;
    let mut warnings = prepared.warnings.clone();
    let host_uncommitted = prepared.host_uncommitted.clone();
    let record = engine.up(prepared).await?;
    match host_uncommitted.left_out() {
        Ok(Some(found)) => warnings.push(format!(
            "{} has {} uncommitted change(s) that the agent will not see: it starts from the last commit \
             (include_uncommitted copies them in)",
            found.checkout.display(),
            found.count
        )),
        Ok(None) => {}
        Err(why) => warnings.push(format!("whether the checkout has uncommitted changes is not known: {why}")),
    }
    let mut value = to_value(&record)?;
    value["warnings"] = warnings.into();
    Ok(value)
}

/// Every sandbox, as `list --json` prints them.
pub async fn list(engine: &Engine<Docker>) -> Result<Value> {
    Ok(json!({ "sandboxes": to_value(&engine.overview().await?)? }))
}

/// One sandbox, as `status --json` prints it (with `job`, the job's context,
/// for a job's sandbox); or a job's context once its sandbox is gone.
pub async fn status(engine: &Engine<Docker>, request: NameRequest) -> Result<Value> {
    let name = sandbox_name(&request.name)?;
    let job = engine.observed_job(name.as_str()).await?;
    let status = match (engine.status(&name).await, &job) {
        (Ok(status), _) => status,
        (Err(e), Some(job)) if e.kind() == ErrorKind::NotFound => return Ok(json!({ "job": to_value(job)? })),
        (Err(e), _) => return Err(e),
    };
    let info = engine.runtime.info().await?;
    let mut value = to_value(&status)?;
    value["engine"] = json!({
        "kind": if info.podman { "podman" } else { "docker" },
        "rootless": info.rootless,
        "version": info.version,
        "host": info.host,
    });
    if let Some(job) = job {
        value["job"] = to_value(&job)?;
    }
    Ok(value)
}

/// How often a `wait` says how long it has waited (MCP progress, and the
/// streaming `wait`'s `progress` events).
pub const WAIT_PROGRESS_EVERY: Duration = Duration::from_secs(10);

/// The sandboxes a `wait` names, or a usage error (none, or a bad name).
pub fn wait_names(request: &WaitRequest) -> Result<Vec<SandboxName>> {
    let names = request.names.iter().map(|n| sandbox_name(n)).collect::<Result<Vec<_>>>()?;
    if names.is_empty() {
        return Err(Error::usage("`wait` needs at least one sandbox name in `names`"));
    }
    Ok(names)
}

/// What `wait` says of itself after `secs` seconds.
pub fn waiting_message(names: &[SandboxName], secs: u64) -> String {
    let shown: Vec<&str> = names.iter().map(SandboxName::as_str).collect();
    format!("waiting for {}: {secs} s so far", shown.join(", "))
}

/// Waits for one of the sandboxes' agents to exit or go idle, or the timeout.
pub async fn wait(engine: &Engine<Docker>, request: WaitRequest) -> Result<Value> {
    let names = wait_names(&request)?;
    let until = match request.until {
        UntilArg::Exited => Until::Exited,
        UntilArg::Idle => Until::Idle,
        UntilArg::Any => Until::Either,
    };
    let idle_for = Duration::from_secs(request.idle_for_secs);
    let timeout = Duration::from_secs(request.timeout_secs);
    let waited = tokio::select! {
        waited = engine.wait(&names, until, idle_for, Some(timeout)) => waited?,
        never = still_waiting(engine, &names) => match never {},
    };
    Ok(match waited {
        Some((name, waited)) => {
            let mut value = to_value(&waited)?;
            value["sandbox"] = name.to_string().into();
            value
        }
        None => json!({ "agent": "timed-out" }),
    })
}

/// The most of the patches one `diff` result holds, all files together.
pub const PATCH_CAP: usize = 1 << 20;

/// Says every `WAIT_PROGRESS_EVERY` how long `wait` has waited (a client's progress, and a
/// sign of life for one that times calls out); never returns.
async fn still_waiting(engine: &Engine<Docker>, names: &[SandboxName]) -> std::convert::Infallible {
    let began = std::time::Instant::now();
    loop {
        tokio::time::sleep(WAIT_PROGRESS_EVERY).await;
        engine.progress.step(&waiting_message(names, began.elapsed().as_secs()));
    }
}

/// The agent's change, as `diff --json` prints it, with each file's patch
/// (until `PATCH_CAP`; a file whose patch did not fit says `patch_truncated`).
pub async fn diff(engine: &Engine<Docker>, request: DiffRequest) -> Result<Value> {
    let name = sandbox_name(&request.name)?;
    let other = request.other.as_deref().map(sandbox_name).transpose()?;
    let report = engine.diff(&name, other.as_ref(), request.part.into()).await?;
    let mut value = to_value(&report)?;
    let mut room = PATCH_CAP;
    for (file, json) in report.files.iter().zip(value["files"].as_array_mut().into_iter().flatten()) {
        let fits = file.patch.len() <= room;
        json["patch"] = if fits { file.patch.clone() } else { String::new() }.into();
        json["patch_truncated"] = (!fits).into();
        room = room.saturating_sub(if fits { file.patch.len() } else { 0 });
    }
    Ok(value)
}

/// The agent's commits, as `log --json` prints them.
pub async fn log(engine: &Engine<Docker>, request: NameRequest) -> Result<Value> {
    to_value(&engine.log(&sandbox_name(&request.name)?).await?)
}

/// Lands the agent's work, as `merge --json` does: uncommitted files land
/// only with `yes`; `dry_run` says what would land and changes nothing.
pub async fn merge(engine: &Engine<Docker>, request: MergeToolRequest) -> Result<Value> {
    let name = sandbox_name(&request.name)?;
    if request.message.is_some() && request.how != HowArg::Squash {
        return Err(Error::usage("`message` is the commit message of `how: squash`; it needs `how: squash`"));
    }
    let merge = MergeRequest {
        into: request.into.clone(),
        how: request.how.into(),
        message: request.message.clone(),
        keep_conflicts: request.conflicts,
    };
    let plan = engine.plan_merge(&name, merge).await?;
    let plan = if request.dry_run {
        plan
    } else {
        if !plan.uncommitted.is_empty() && !request.yes {
            return Err(Error::usage(format!(
                "sandbox {name} has {} uncommitted file(s) ({}), which would land too; pass `yes: true`",
                plan.uncommitted.len(),
                plan.uncommitted.join(", ")
            )));
        }
        engine.merge(&name, plan).await?
    };
    let done = !request.dry_run;
    let mut value = to_value(&plan)?;
    value["landed"] = (done && !plan.is_empty() && !plan.leaves_conflicts()).into();
    value["conflicts_left"] = (done && plan.leaves_conflicts()).into();
    Ok(value)
}

/// The agent's change as uncommitted edits in the user's checkout.
pub async fn apply(engine: &Engine<Docker>, request: NameRequest) -> Result<Value> {
    to_value(&engine.apply(&sandbox_name(&request.name)?).await?)
}

/// Tears one sandbox down (archiving its work unless `discard`), as `down --json`.
pub async fn down(engine: &Engine<Docker>, request: DownRequest) -> Result<Value> {
    let name = sandbox_name(&request.name)?;
    let opts = DownOptions { keep_branch: request.keep_branch, discard: request.discard };
    to_value(&engine.down(&name, opts).await?)
}

/// What `down` archived, of one sandbox or of all.
pub fn archives(engine: &Engine<Docker>, request: ArchivesRequest) -> Result<Value> {
    let name = request.name.as_deref().map(sandbox_name).transpose()?;
    Ok(json!({ "archives": to_value(&engine.archives(name.as_ref())?)? }))
}

/// Starts a job; with `cleanup`, also waits for its agent to exit and tears
/// its sandbox down. Returns the job's context (and, without `cleanup`, the
/// sandbox's record).
pub async fn job(engine: &Engine<Docker>, request: JobRequest, defaults: Defaults) -> Result<Value> {
    let (up, source, cleanup) = request.into_spec(defaults.cleanup_on_complete)?;
    let (job, record) = engine.start_job(JobSpec { up, source, cleanup }).await?;
    if !cleanup {
        return Ok(json!({ "job": to_value(&job)?, "sandbox": to_value(&record)? }));
    }
    engine.progress.step(&format!("job {}: waiting for its agent to exit", job.name));
    engine.wait(std::slice::from_ref(&record.name), Until::Exited, Duration::from_secs(30), None).await?;
    engine.down(&record.name, DownOptions { keep_branch: true, discard: false }).await?;
    let job = jobs::load(&engine.home, &job.name)?.ok_or_else(|| Error::other("the job's context is gone"))?;
    Ok(json!({ "job": to_value(&job)? }))
}

/// Every job's context.
pub async fn jobs_list(engine: &Engine<Docker>) -> Result<Value> {
    Ok(json!({ "jobs": to_value(&engine.observe_jobs().await?)? }))
}
