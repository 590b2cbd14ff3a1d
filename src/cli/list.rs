use super::render::{age, shown, Table};
use super::Ctx;
use crate::error::Result;
use crate::sandbox::{Activity, SandboxRow};

pub async fn run(ctx: &Ctx) -> Result<i32> {
    let engine = ctx.engine().await?;
    if ctx.out.quiet() && !ctx.out.json_wanted() {
        for r in engine.list().await? {
            ctx.out.data(&r.name);
        }
        return Ok(0);
    }
    let rows = engine.overview().await?;
    if ctx.out.json_wanted() {
        return ctx.out.json(&rows).map(|()| 0);
    }
    let mut table = Table::new(["NAME", "MODE", "TEMPLATE", "STATUS", "AHEAD", "DIRTY", "BRANCH", "WORKSPACE", "AGE"]);
    let or_dash = |v: Option<&str>| shown(v.unwrap_or("-"));
    for r in rows {
        let place = r.workspace.as_deref().or(r.record_problem.as_deref());
        table.row([
            shown(&r.name),
            r.mode.map(|m| m.to_string()).unwrap_or_else(|| "-".into()),
            or_dash(r.template.as_deref()),
            status(&r),
            count(r.ahead, r.ahead_at_least, r.ahead_unknown.is_some()),
            count(r.dirty, false, r.dirty_unknown.is_some()),
            or_dash(r.branch.as_deref()),
            or_dash(place),
            r.created_at.map(age).unwrap_or_else(|| "-".into()),
        ]);
    }
    ctx.out.data_block(table.to_string());
    Ok(0)
}

/// The container's state, or better: `idle` for a running agent that waits,
/// `exited (N)` with its code.
fn status(r: &SandboxRow) -> String {
    match (r.agent, r.exit_code) {
        (Some(Activity::Idle), _) => "idle".into(),
        (Some(Activity::Exited), Some(code)) => format!("{} ({code})", r.status),
        _ => r.status.to_string(),
    }
}

/// A count as the table shows it: `N`, `N+` (at least), `?` (not known
/// without a sync: `--json` says why), `-` (none: a direct workspace).
fn count(n: Option<usize>, at_least: bool, unknown: bool) -> String {
    match (n, unknown) {
        (Some(n), _) if at_least => format!("{n}+"),
        (Some(n), _) => n.to_string(),
        (None, true) => "?".into(),
        (None, false) => "-".into(),
    }
}
