//! `archives`: what `down` archived; `archives prune`: deletes old archives,
//! after listing them and with the user's yes.

use std::io::IsTerminal;

use clap::{Args, Subcommand};

use super::render::{age, shown, Table};
use super::Ctx;
use crate::error::{Error, Result};
use crate::names::SandboxName;
use crate::record::ArchiveEntry;
use crate::sandbox::PruneOutcome;

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct ArchivesArgs {
    /// Only this sandbox's archives.
    #[arg(add = super::complete::archived())]
    pub name: Option<SandboxName>,
    #[command(subcommand)]
    pub action: Option<ArchivesAction>,
}

#[derive(Debug, Subcommand)]
pub enum ArchivesAction {
    /// Delete archives older than a duration: their refs (jj: bookmarks) and index entries.
    Prune(PruneArgs),
}

#[derive(Debug, Args)]
pub struct PruneArgs {
    /// Only this sandbox's archives.
    #[arg(add = super::complete::archived())]
    pub name: Option<SandboxName>,
    /// Archives made longer ago than this go (`30d`, `2w`, `12h`).
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub older_than: std::time::Duration,
    /// Delete without asking.
    #[arg(short, long)]
    pub yes: bool,
    /// List what would go, and delete nothing.
    #[arg(long)]
    pub dry_run: bool,
}

pub async fn run(ctx: &Ctx, args: ArchivesArgs) -> Result<i32> {
    match args.action {
        Some(ArchivesAction::Prune(prune_args)) => prune(ctx, prune_args).await,
        None => list(ctx, args.name.as_ref()).await,
    }
}

async fn list(ctx: &Ctx, name: Option<&SandboxName>) -> Result<i32> {
    let engine = ctx.engine().await?;
    let archives = engine.archives(name)?;
    if ctx.out.json_wanted() {
        return ctx.out.json(&archives).map(|()| 0);
    }
    if archives.is_empty() {
        ctx.out.status("no archives");
        return Ok(0);
    }
    ctx.out.data_block(table(&archives).to_string());
    Ok(0)
}

fn table(archives: &[ArchiveEntry]) -> Table<7> {
    let count = |n: Option<usize>| n.map_or("?".to_owned(), |n| n.to_string());
    let mut table = Table::new(["SANDBOX", "ARCHIVED", "MODE", "COMMITS", "FILES", "REF", "REPOSITORY"]);
    for a in archives {
        table.row([
            a.name.to_string(),
            format!("{} ago", age(a.archived_at)),
            a.mode.to_string(),
            count(a.commits),
            count(a.uncommitted_files),
            shown(&a.refname),
            shown(&a.repo.display().to_string()),
        ]);
    }
    table
}

async fn prune(ctx: &Ctx, args: PruneArgs) -> Result<i32> {
    let engine = ctx.engine().await?;
    let doomed = engine.archives_older_than(args.name.as_ref(), args.older_than)?;
    if doomed.is_empty() {
        if ctx.out.json_wanted() {
            return ctx.out.json(&doomed).map(|()| 0);
        }
        ctx.out.status("no archives that old");
        return Ok(0);
    }
    if args.dry_run {
        if ctx.out.json_wanted() {
            return ctx.out.json(&doomed).map(|()| 0);
        }
        ctx.out.data("would delete:");
        ctx.out.data_block(table(&doomed).to_string());
        return Ok(0);
    }
    if !args.yes {
        if !std::io::stdin().is_terminal() || ctx.out.json_wanted() {
            return Err(Error::usage(format!(
                "{} archive{} would be deleted, with the work only they keep; pass --yes (or see them with --dry-run)",
                doomed.len(),
                if doomed.len() == 1 { "" } else { "s" }
            )));
        }
        ctx.out.status("these archives, and the work only they keep, would be deleted:");
        for line in table(&doomed).to_string().lines() {
            ctx.out.status(line);
        }
        if !ctx.out.ask("delete them? [y/N] ") {
            return Err(Error::other("nothing was deleted"));
        }
    }
    let pruned = engine.prune(doomed).await?;
    if ctx.out.json_wanted() {
        ctx.out.json(&pruned)?;
    }
    let mut kept = 0;
    for p in &pruned {
        let what = match p.outcome {
            PruneOutcome::Kept => {
                kept += 1;
                ctx.out.warn(format!("{}: {}", shown(&p.archive.refname), p.why.as_deref().unwrap_or("kept")));
                continue;
            }
            PruneOutcome::Gone => "forgot (its ref was gone already)",
            PruneOutcome::Deleted => "deleted",
        };
        if !ctx.out.json_wanted() {
            ctx.out.data(format!("{what} {} of sandbox {}", shown(&p.archive.refname), p.archive.name));
        }
    }
    Ok(if kept > 0 { 1 } else { 0 })
}
