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
    println!("name:       {}", r.name);
    println!("status:     {}", s.row.status);
    println!("mode:       {}", r.workspace.mode());
    println!("workspace:  {}", r.workspace.host_path().display());
    if let Some(e) = &s.sync_error {
        println!("sync:       FAILED: {e}");
    }
    if let Some(head) = match &s.sync {
        Some(crate::sandbox::Synced::Git(r)) => r.agent_head.as_deref(),
        _ => None,
    } {
        println!("agent HEAD: {head}");
    }
    if let Some(g) = &s.git {
        let (kind, change) = if r.workspace.mode() == Mode::Jj { ("bookmark", "change") } else { ("branch", "commit") };
        let plural = |n: usize| format!("{n} {change}{}", if n == 1 { "" } else { "s" });
        println!("{:<12}{}", format!("{kind}:"), g.branch);
        let base = g.base_ref.as_deref().map(|b| b.trim_start_matches("refs/heads/")).unwrap_or(&g.base);
        println!("base:       {base} ({} ahead, {} behind)", plural(g.ahead), plural(g.behind));
        if g.dirty.is_empty() {
            println!("changes:    none uncommitted");
        }
        for f in &g.dirty {
            println!("changed:    {f}");
        }
    }
    println!("template:   {}", r.template);
    println!("image:      {}", r.image);
    println!("container:  {}", r.container);
    println!("created:    {} ago", age(r.created_at));
    match &s.container {
        Some(c) => {
            println!("id:         {}", &c.id[..c.id.len().min(12)]);
            if let Some(code) = c.exit_code.filter(|_| matches!(c.state.as_str(), "exited" | "dead")) {
                println!("exit code:  {code}");
            }
            for m in &c.mounts {
                let mode = if m.read_only { "ro" } else { "rw" };
                println!("mount:      {} -> {} ({mode})", m.source.display(), m.target);
            }
        }
        None => println!(
            "(the container is gone; `forage-ctl reset {0}` makes a new one, `forage-ctl down {0}` cleans up)",
            r.name
        ),
    }
    Ok(0)
}
