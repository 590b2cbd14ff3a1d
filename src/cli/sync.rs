use clap::Args;

use super::render::{print_json, shown};
use super::Ctx;
use crate::error::Result;
use crate::names::SandboxName;
use crate::progress::Silent;
use crate::sandbox::Synced;
use crate::workspace::git::SyncReport;
use crate::workspace::jj::JjSync;

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
    let synced = ctx.engine(&docker, &Silent).sync(&args.name).await?;
    if args.json {
        print_json(&synced)?;
    } else if !ctx.quiet {
        match &synced {
            Synced::Git(report) => print_git(report),
            Synced::Jj(sync) => print_jj(sync),
        }
    }
    Ok(0)
}

fn short(id: &str) -> &str {
    &id[..id.len().min(12)]
}

fn print_git(report: &SyncReport) {
    match (report.new_commits, report.after.as_deref().map(short)) {
        (_, None) => say!("{}: the branch is gone from the host repository; nothing to sync onto", report.branch),
        (0, Some(tip)) if report.before == report.after => say!("{} is up to date ({tip})", report.branch),
        (0, Some(tip)) => say!("{} moved to {tip} (the agent rewrote its branch)", report.branch),
        (n, Some(tip)) => {
            say!("{} moved to {tip}: {n} new commit{} from the sandbox", report.branch, if n == 1 { "" } else { "s" })
        }
    }
    if let Some(head) = &report.agent_head {
        say!("  note: the agent's HEAD is {head}; only {} is synced (`down` archives the rest)", report.branch);
    }
}

fn print_jj(sync: &JjSync) {
    let changes = format!("{} change{}", sync.changes, if sync.changes == 1 { "" } else { "s" });
    match sync.heads.first() {
        None => say!("{}: no changes of the agent's yet (no bookmark)", sync.bookmark),
        Some(head) => say!("{} at {} ({changes} of the agent's)", sync.bookmark, short(head)),
    }
    if sync.heads.len() > 1 {
        say!("  and {} more heads, as forage-heads/… bookmarks", sync.heads.len() - 1);
    }
    for id in &sync.not_the_agents {
        eprintln!(
            "forage-ctl: warning: {}",
            shown(&format!(
                "jj inside the sandbox named your repository's commit {} as the agent's work; it got no bookmark",
                short(id)
            ))
        );
    }
}
