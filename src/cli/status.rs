use super::render::age;
use super::{Ctx, NameArg};
use crate::error::Result;
use crate::runtime::engine_choice::EngineInfo;
use crate::sandbox::{Activity, SandboxStatus, IDLE_AFTER};
use crate::workspace::{Mode, Synced};

/// `status --json`: the sandbox's status and the engine that answered.
#[derive(serde::Serialize)]
struct StatusJson<'a> {
    #[serde(flatten)]
    status: &'a SandboxStatus,
    engine: EngineJson<'a>,
    /// The job's context, for a job's sandbox.
    #[serde(skip_serializing_if = "Option::is_none")]
    job: Option<&'a crate::jobs::Job>,
}

/// The engine, for scripts: `{"kind": "podman", "rootless": true, "version": "4.3.1", "host": "unix://…"}`.
#[derive(serde::Serialize)]
struct EngineJson<'a> {
    kind: &'static str,
    rootless: bool,
    version: &'a str,
    host: &'a str,
}

impl<'a> From<&'a EngineInfo> for EngineJson<'a> {
    fn from(e: &'a EngineInfo) -> Self {
        EngineJson {
            kind: if e.podman { "podman" } else { "docker" },
            rootless: e.rootless,
            version: &e.version,
            host: &e.host,
        }
    }
}

pub async fn run(ctx: &Ctx, args: NameArg) -> Result<i32> {
    let engine = ctx.engine().await?;
    let job = engine.observed_job(args.name.as_str()).await?;
    let s = match (engine.status(&args.name).await, &job) {
        (Ok(s), _) => s,
        // A job's context outlives its sandbox.
        (Err(e), Some(job)) if e.kind() == crate::error::ErrorKind::NotFound => {
            super::jobs::show(ctx, job)?;
            return Ok(0);
        }
        (Err(e), _) => return Err(e),
    };
    let r = &s.record;
    let ws = r.workspace.get();
    let has_work = s.git.as_ref().is_some_and(|g| g.ahead > 0 || !g.dirty.is_empty());
    let hints = super::next::after_status(&r.name, ws.mode(), has_work);
    if ctx.out.json_wanted() {
        // Which engine answered: the same sandbox name means different
        // containers on Docker and on Podman, so a script can tell them apart.
        let engine = engine.runtime.info().await?;
        let json = StatusJson { status: &s, engine: EngineJson::from(&engine), job: job.as_ref() };
        ctx.out.json_with_hints(&json, &hints)?;
        return Ok(0);
    }
    let line = |label: &str, value: String| ctx.out.data(format!("{:<12}{value}", format!("{label}:")));
    line("name", r.name.to_string());
    line("status", s.row.status.to_string());
    let quiet = IDLE_AFTER.as_secs();
    match s.row.agent {
        Some(Activity::Working) => line("agent", format!("working (printed in the last {quiet} s)")),
        Some(Activity::Idle) => line("agent", format!("idle (printed nothing for {quiet} s or more)")),
        _ => {}
    }
    line("mode", ws.mode().to_string());
    line("workspace", ws.host_path().display().to_string());
    if let Some(e) = &s.sync_error {
        line("sync", format!("FAILED: {e}"));
    }
    if let Some(Synced::Git(report)) = &s.sync {
        if let Some(head) = &report.agent_head {
            line("agent HEAD", head.clone());
        }
    }
    history(ctx, &s, ws.mode());
    image_lines(ctx, r);
    network_lines(ctx, &s);
    container_lines(ctx, &s);
    for hint in &hints {
        ctx.out.hint(hint);
    }
    Ok(0)
}

/// The container: its name, age, id, exit code and mounts, or that it is gone.
fn container_lines(ctx: &Ctx, s: &SandboxStatus) {
    let r = &s.record;
    let line = |label: &str, value: String| ctx.out.data(format!("{:<12}{value}", format!("{label}:")));
    line("container", r.container.clone());
    line("created", format!("{} ago", age(r.created_at)));
    match &s.container {
        Some(c) => {
            line("id", c.id[..c.id.len().min(12)].to_owned());
            if let Some(code) = s.row.exit_code {
                line("exit code", code.to_string());
            }
            let mut mounts: Vec<_> = c.mounts.iter().collect();
            mounts.sort_by(|a, b| a.target.cmp(&b.target));
            for m in mounts {
                let mode = if m.read_only { "ro" } else { "rw" };
                line("mount", format!("{} -> {} ({mode})", m.source.display(), m.target));
            }
        }
        None => {
            ctx.out.status("the container is gone");
            ctx.out.hint_run("{command} makes a new one", ["reset", r.name.as_str()]);
            ctx.out.hint_run("{command} cleans up", ["down", r.name.as_str()]);
        }
    }
}

/// The template, and the profile of its agent's state when it keeps one.
fn template_line(r: &crate::record::Record) -> String {
    match &r.options.profile {
        Some(profile) => format!("{} (agent state: profile {profile})", r.template),
        None => r.template.clone(),
    }
}

/// The branch or bookmark against its base, and the uncommitted files.
fn history(ctx: &Ctx, s: &SandboxStatus, mode: Mode) {
    let Some(g) = &s.git else { return };
    let line = |label: &str, value: String| ctx.out.data(format!("{:<12}{value}", format!("{label}:")));
    let (kind, change) = if mode == Mode::Jj { ("bookmark", "change") } else { ("branch", "commit") };
    let plural = |n: usize| format!("{n} {change}{}", if n == 1 { "" } else { "s" });
    line(kind, g.branch.clone());
    let short_ids = || g.base.split(',').map(|id| &id[..id.len().min(12)]).collect::<Vec<_>>().join(", ");
    let base = g.base_ref.as_deref().map(|b| b.trim_start_matches("refs/heads/").to_owned()).unwrap_or_else(short_ids);
    line("base", format!("{base} ({} ahead, {} behind)", plural(g.ahead), plural(g.behind)));
    if g.dirty.is_empty() {
        line("changes", "none uncommitted".into());
    }
    for f in &g.dirty {
        line("changed", f.clone());
    }
    for f in &g.not_archivable {
        line("left out", f.clone());
    }
}

/// The template, its image, and the project's toolchain it was layered on.
fn image_lines(ctx: &Ctx, r: &crate::record::Record) {
    let line = |label: &str, value: String| ctx.out.data(format!("{:<12}{value}", format!("{label}:")));
    line("template", template_line(r));
    line("image", r.image.clone());
    if let Some(toolchain) = &r.toolchain {
        line("toolchain", toolchain.to_string());
    }
}

/// The network: a restricted one's proxy and allowlist, else what `up` was given.
fn network_lines(ctx: &Ctx, s: &SandboxStatus) {
    let line = |label: &str, value: String| ctx.out.data(format!("{:<12}{value}", format!("{label}:")));
    if let Some(n) = &s.network {
        line("network", format!("restricted, through egress proxy {}", n.proxy));
        if n.allow.is_empty() {
            line("allow", "nothing (every request is denied and logged)".into());
        }
        for entry in &n.allow {
            line("allow", entry.clone());
        }
        for rule in &n.inject {
            let prefix = if rule.prefix.is_empty() { String::new() } else { format!("{:?} + ", rule.prefix) };
            line(
                "inject",
                format!(
                    "{}: {} <- {prefix}secret {} (the sandbox has a placeholder)",
                    rule.host, rule.header, rule.secret
                ),
            );
        }
    } else if let Some(network) = s.record.options.network {
        line("network", network.as_str().to_owned());
    }
    for p in &s.record.ports {
        line("port", format!("{} -> 127.0.0.1:{}", p.port, p.host_port));
    }
    for p in &s.record.unpublished {
        line("port", super::port::waiting(p));
    }
}
