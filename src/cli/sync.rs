use clap::Args;

use super::render::print_json;
use super::Ctx;
use crate::error::Result;
use crate::names::SandboxName;
use crate::progress::Silent;

#[derive(Debug, Args)]
pub struct SyncArgs {
    /// The sandbox whose work to bring to the host repository.
    pub name: SandboxName,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
}

pub async fn run(ctx: &Ctx, args: SyncArgs) -> Result<i32> {
    let docker = ctx.docker().await?;
    let report = ctx.engine(&docker, &Silent).sync(&args.name).await?;
    if args.json {
        print_json(&report)?;
        return Ok(0);
    }
    if ctx.quiet {
        return Ok(0);
    }
    let short = |id: &Option<String>| id.as_deref().map(|i| i[..i.len().min(12)].to_owned());
    match (report.new_commits, short(&report.after)) {
        (_, None) => println!("{}: the branch is gone from the host repository; nothing to sync onto", report.branch),
        (0, Some(tip)) if report.before == report.after => println!("{} is up to date ({tip})", report.branch),
        (0, Some(tip)) => println!("{} moved to {tip} (the agent rewrote its branch)", report.branch),
        (n, Some(tip)) => println!(
            "{} moved to {tip}: {n} new commit{} from the sandbox",
            report.branch,
            if n == 1 { "" } else { "s" }
        ),
    }
    if let Some(head) = &report.agent_head {
        println!("  note: the agent's HEAD is {head}; only {} is synced (`down` archives the rest)", report.branch);
    }
    Ok(0)
}
