use clap::Args;

use super::render::{age, print_json};
use super::Ctx;
use crate::error::Result;
use crate::names::SandboxName;
use crate::progress::Silent;
use crate::workspace::Mode;

#[derive(Debug, Args)]
pub struct StatusArgs {
    pub name: SandboxName,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
}

pub async fn run(ctx: &Ctx, args: StatusArgs) -> Result<i32> {
    let docker = ctx.docker().await?;
    let s = ctx.engine(&docker, &Silent).status(&args.name).await?;
    if args.json {
        print_json(&s)?;
        return Ok(0);
    }
    let r = &s.record;
    say!("name:       {}", r.name);
    say!("status:     {}", s.row.status);
    say!("mode:       {}", r.workspace.mode());
    say!("workspace:  {}", r.workspace.host_path().display());
    if let Some(e) = &s.sync_error {
        say!("sync:       FAILED: {e}");
    }
    if let Some(head) = match &s.sync {
        Some(crate::sandbox::Synced::Git(r)) => r.agent_head.as_deref(),
        _ => None,
    } {
        say!("agent HEAD: {head}");
    }
    if let Some(g) = &s.git {
        let (kind, change) = if r.workspace.mode() == Mode::Jj { ("bookmark", "change") } else { ("branch", "commit") };
        let plural = |n: usize| format!("{n} {change}{}", if n == 1 { "" } else { "s" });
        say!("{:<12}{}", format!("{kind}:"), g.branch);
        let short_ids = || g.base.split(',').map(|id| &id[..id.len().min(12)]).collect::<Vec<_>>().join(", ");
        let base =
            g.base_ref.as_deref().map(|b| b.trim_start_matches("refs/heads/").to_owned()).unwrap_or_else(short_ids);
        say!("base:       {base} ({} ahead, {} behind)", plural(g.ahead), plural(g.behind));
        if g.dirty.is_empty() {
            say!("changes:    none uncommitted");
        }
        for f in &g.dirty {
            say!("changed:    {f}");
        }
    }
    say!("template:   {}", r.template);
    say!("image:      {}", r.image);
    say!("container:  {}", r.container);
    say!("created:    {} ago", age(r.created_at));
    match &s.container {
        Some(c) => {
            say!("id:         {}", &c.id[..c.id.len().min(12)]);
            if let Some(code) = c.exit_code.filter(|_| matches!(c.state.as_str(), "exited" | "dead")) {
                say!("exit code:  {code}");
            }
            let mut mounts: Vec<_> = c.mounts.iter().collect();
            mounts.sort_by(|a, b| a.target.cmp(&b.target));
            for m in mounts {
                let mode = if m.read_only { "ro" } else { "rw" };
                say!("mount:      {} -> {} ({mode})", m.source.display(), m.target);
            }
        }
        None => say!(
            "(the container is gone; `forage-ctl reset {0}` makes a new one, `forage-ctl down {0}` cleans up)",
            r.name
        ),
    }
    Ok(0)
}
