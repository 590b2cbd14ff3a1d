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
    const HEADER: [&str; 9] = ["NAME", "MODE", "TEMPLATE", "STATUS", "AHEAD", "DIRTY", "BRANCH", "WORKSPACE", "AGE"];
    let or_dash = |v: Option<&str>| shown(v.unwrap_or("-"));
    let cells = |r: &SandboxRow| {
        let place = r.workspace.as_deref().or(r.record_problem.as_deref());
        [
            shown(&r.name),
            r.mode.map(|m| m.to_string()).unwrap_or_else(|| "-".into()),
            or_dash(r.template.as_deref()),
            status(r),
            count(r.ahead, r.ahead_at_least, r.ahead_unknown.is_some()),
            count(r.dirty, false, r.dirty_unknown.is_some()),
            or_dash(r.branch.as_deref()),
            or_dash(place),
            r.created_at.map(age).unwrap_or_else(|| "-".into()),
        ]
    };
    // PORTS only when some sandbox publishes one: the table stays as wide
    // as it was for everyone else.
    if rows.iter().all(|r| r.ports.is_empty()) {
        let mut table = Table::new(HEADER);
        for r in &rows {
            table.row(cells(r));
        }
        ctx.out.data_block(table.to_string());
    } else {
        let mut header = HEADER.to_vec();
        header.insert(8, "PORTS");
        let mut table = Table::new(<[&str; 10]>::try_from(header).expect("ten columns"));
        for r in &rows {
            let mut row = cells(r).to_vec();
            row.insert(8, ports(r));
            table.row(<[String; 10]>::try_from(row).expect("ten cells"));
        }
        ctx.out.data_block(table.to_string());
    }
    Ok(0)
}

/// `49153->3000,8080->8080`: host port on 127.0.0.1, then the sandbox's.
fn ports(r: &SandboxRow) -> String {
    if r.ports.is_empty() {
        return "-".into();
    }
    r.ports.iter().map(|p| format!("{}->{}", p.host_port, p.port)).collect::<Vec<_>>().join(",")
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
