use clap::Args;

use super::Ctx;
use crate::error::Result;
use crate::names::SandboxName;
use crate::sandbox::Restored;
use crate::workspace::Mode;

#[derive(Debug, Args)]
pub struct RestoreArgs {
    /// The sandbox whose archived work to bring back.
    #[arg(add = super::complete::archived())]
    pub name: SandboxName,
    /// Which archive: its ref or its timestamp (default: the newest).
    #[arg(long, value_name = "REF")]
    pub archive: Option<String>,
    /// The branch to create (default: forage-NAME).
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
    match &restored {
        Restored::Sandbox { record, .. } if !ctx.out.json_wanted() => super::up::report(ctx, record, true)?,
        _ if ctx.out.json_wanted() => ctx.out.json(&restored)?,
        Restored::Branch { archive, branch } => {
            let what = if archive.mode == Mode::Jj { "bookmark" } else { "branch" };
            ctx.out.data(format!("restored {} as {what} {branch} in {}", archive.refname, archive.repo.display()));
            // Unknown for archives of an older forage: said, in case.
            if archive.mode != Mode::Jj && archive.uncommitted_files != Some(0) {
                ctx.out.hint_text(
                    "the uncommitted files came back as a commit on top; `git reset HEAD~1` on the branch un-commits them",
                );
            }
        }
        Restored::Sandbox { .. } => {}
    }
    Ok(0)
}
