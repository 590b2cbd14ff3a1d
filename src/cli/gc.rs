use clap::Args;

use super::Ctx;
use crate::error::Result;

#[derive(Debug, Args)]
pub struct GcArgs {
    /// Act on the findings (archiving work first); without it, only report them.
    #[arg(long)]
    pub force: bool,
}

pub async fn run(ctx: &Ctx, args: GcArgs) -> Result<i32> {
    let engine = ctx.engine().await?;
    let findings = engine.gc(args.force).await?;
    engine.progress.finish();
    let failed = findings.iter().filter(|f| f.error.is_some()).count();
    if ctx.out.json_wanted() {
        ctx.out.json(&findings)?;
    } else if findings.is_empty() {
        ctx.out.status("nothing to clean up");
    } else {
        for f in &findings {
            let verb = if args.force { "" } else { "would " };
            ctx.out.data(format!("{}: {} ({})", f.kind, f.subject, f.why));
            match &f.error {
                Some(e) => ctx.out.data(format!("  FAILED to {}: {e}", f.action)),
                None => ctx.out.data(format!("  {verb}{}", f.action)),
            }
        }
        if !args.force {
            ctx.out.hint_run("dry run: {command} acts on the findings above", ["gc", "--force"]);
        }
    }
    Ok(if failed > 0 { 1 } else { 0 })
}
