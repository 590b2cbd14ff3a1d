use clap::Args;

use super::Ctx;
use crate::error::Result;
use crate::names::SandboxName;
use crate::record::ArchiveEntry;
use crate::sandbox::{restore_args, Restored};
use crate::workspace::Mode;

#[derive(Debug, Args)]
pub struct RestoreArgs {
    /// The sandbox whose archived work to bring back.
    #[arg(add = super::complete::archived())]
    pub name: SandboxName,
    /// Which archive: its ref, or its last part as `down` names it (default: the newest).
    #[arg(long, value_name = "REF")]
    pub archive: Option<String>,
    /// The branch to create (default: forage-NAME; jj: bookmark forage/NAME).
    #[arg(long)]
    pub branch: Option<String>,
    /// Also bring the sandbox up again on that branch, with the archive's template.
    #[arg(long)]
    pub up: bool,
    /// With --up: a secret the template needs, as for `up` (repeatable).
    #[arg(long = "secret", value_name = "NAME=FILE", requires = "up")]
    pub secrets: Vec<String>,
}

pub async fn run(ctx: &Ctx, args: RestoreArgs) -> Result<i32> {
    let engine = ctx.engine().await?;
    if args.up {
        ctx.cancel_on_signals();
    }
    let restored =
        engine.restore(&args.name, args.archive.as_deref(), args.branch.as_deref(), args.up, &args.secrets).await?;
    engine.progress.finish();
    if ctx.out.json_wanted() {
        ctx.out.json(&restored)?;
        return Ok(0);
    }
    match &restored {
        Restored::Sandbox { record, also_archived, warnings, .. } => {
            for warning in warnings {
                ctx.out.warn(warning);
            }
            if let Some(toolchain) = &record.toolchain {
                ctx.out.status(format!("toolchain: {toolchain}"));
            }
            super::up::report(ctx, record, true)?;
            name_the_others(ctx, also_archived);
        }
        Restored::Branch { archive, branch, also_archived } => {
            let what = if archive.mode == Mode::Jj { "bookmark" } else { "branch" };
            ctx.out.data(format!("restored {} as {what} {branch} in {}", archive.refname, archive.repo.display()));
            // Unknown for archives of an older forage: said, in case.
            if archive.mode != Mode::Jj && archive.uncommitted_files != Some(0) {
                ctx.out.hint_text(
                    "the uncommitted files came back as a commit on top; `git reset HEAD~1` on the branch un-commits them",
                );
            }
            name_the_others(ctx, also_archived);
        }
    }
    Ok(0)
}

/// The archives the same `down` made that this `restore` did not bring back
/// (a detached HEAD's, another branch's), each with the command that does.
fn name_the_others(ctx: &Ctx, others: &[ArchiveEntry]) {
    for a in others {
        let source = a.source.as_deref().unwrap_or("other work");
        ctx.out.hint_run(
            &format!("the same down also archived the agent's {source} as {}: {{command}} restores it", a.refname),
            restore_args(&a.name, &a.refname),
        );
    }
}
