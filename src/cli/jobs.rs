//! `up --job` and `jobs`: a sandbox made from a repository URL through
//! forage's mirror, and the contexts jobs keep (`crate::jobs`).

use std::time::Duration;

use super::render::{age, shown, Table};
use super::up::UpArgs;
use super::Ctx;
use crate::error::{Error, Result};
use crate::jobs::{Job, JobSpec, JobStatus};
use crate::sandbox::{DownOptions, Until};

/// `up --repo SOURCE --job [--cleanup]`.
pub async fn up(ctx: &Ctx, args: UpArgs) -> Result<i32> {
    let engine = ctx.engine().await?;
    let cleanup = args.cleanup;
    let source = args.repo.as_ref().map(|p| p.to_string_lossy().into_owned());
    let source = source.ok_or_else(|| Error::usage("--job needs --repo SOURCE (a path or file:// URL)"))?;
    let spec = args.spec()?;
    ctx.cancel_on_signals();
    let (job, record) = engine.start_job(JobSpec { up: spec, source, cleanup }).await?;
    engine.progress.finish();
    if !cleanup {
        super::up::report(ctx, &record, true)?;
        ctx.out.hint_run("{command} shows the job's context, after its sandbox too", ["status", &job.name]);
        return Ok(0);
    }
    ctx.out.status(format!("job {}: waiting for its agent to exit", job.name));
    engine.wait(std::slice::from_ref(&record.name), Until::Exited, Duration::from_secs(30), None).await?;
    let down = engine.down(&record.name, DownOptions { keep_branch: true, discard: false }).await?;
    engine.progress.finish();
    for n in &down.not_archived {
        ctx.out.warn(format!("job {}: not archived: {}: {}", job.name, n.source, n.why));
    }
    let job = crate::jobs::load(&ctx.home, &job.name)?.ok_or_else(|| Error::other("the job's context is gone"))?;
    show(ctx, &job)?;
    Ok(if job.status == JobStatus::Failed { 1 } else { 0 })
}

/// A job's context: `--json` as stored, else a few lines.
pub fn show(ctx: &Ctx, job: &Job) -> Result<()> {
    if ctx.out.json_wanted() {
        return ctx.out.json(job);
    }
    let line = |label: &str, value: String| ctx.out.data(format!("{:<12}{value}", format!("{label}:")));
    line("job", shown(&job.name));
    line("status", status_word(job));
    line("source", shown(&job.source));
    line("mirror", job.mirror.display().to_string());
    if let Some(branch) = &job.branch {
        line("branch", shown(branch));
    }
    line("created", format!("{} ago", age(job.created_at)));
    if let Some(error) = &job.error {
        line("error", shown(error));
    }
    if let Some(result) = &job.result {
        let commits = result["commits"].as_array().map_or(0, Vec::len);
        let files = result["diff"]["files"].as_array().map_or(0, Vec::len);
        line("result", format!("{commits} commit(s), {files} file(s) changed"));
    }
    line(
        "sandbox",
        if job.sandbox {
            "up".into()
        } else {
            format!("gone (`forage-ctl archives {}` lists what was archived)", shown(&job.name))
        },
    );
    Ok(())
}

fn status_word(job: &Job) -> String {
    let word = serde_json::to_value(job.status).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default();
    match job.exit_code {
        Some(code) => format!("{word} (exit code {code})"),
        None => word,
    }
}

/// `jobs`: one row per job whose context forage keeps.
pub async fn list(ctx: &Ctx) -> Result<i32> {
    let mut jobs = crate::jobs::all(&ctx.home)?;
    // Only a job whose sandbox is up needs the engine, to read its agent's state.
    if jobs.iter().any(|j| j.status == JobStatus::Running && j.sandbox) {
        jobs = ctx.engine().await?.observe_jobs().await?;
    }
    if ctx.out.json_wanted() {
        return ctx.out.json(&jobs).map(|()| 0);
    }
    if jobs.is_empty() {
        ctx.out.status("no jobs");
        return Ok(0);
    }
    let mut table = Table::new(["NAME", "STATUS", "SANDBOX", "BRANCH", "SOURCE", "AGE"]);
    for j in &jobs {
        table.row([
            shown(&j.name),
            status_word(j),
            if j.sandbox { "up" } else { "gone" }.into(),
            shown(j.branch.as_deref().unwrap_or("-")),
            shown(&j.source),
            age(j.created_at),
        ]);
    }
    ctx.out.data_block(table.to_string());
    Ok(0)
}
