use clap::Args;

use super::render::print_json;
use super::Ctx;
use crate::error::Result;

#[derive(Debug, Args)]
pub struct GcArgs {
    /// Act on the findings (archiving work first); without it, only report them.
    #[arg(long)]
    pub force: bool,
    /// Machine-readable output: the findings.
    #[arg(long)]
    pub json: bool,
}

pub async fn run(ctx: &Ctx, args: GcArgs) -> Result<i32> {
    let docker = ctx.docker().await?;
    let progress = ctx.progress();
    let findings = ctx.engine(&docker, progress.as_ref()).gc(args.force).await?;
    progress.finish();
    let failed = findings.iter().filter(|f| f.error.is_some()).count();
    if args.json {
        print_json(&findings)?;
    } else if findings.is_empty() {
        if !ctx.quiet {
            say!("nothing to clean up");
        }
    } else {
        for f in &findings {
            let verb = if args.force { "" } else { "would " };
            let kind = serde_json::to_value(&f.kind).unwrap_or_default();
            say!("{}: {} ({})", kind.as_str().unwrap_or(""), f.subject, f.why);
            match &f.error {
                Some(e) => say!("  FAILED to {}: {e}", f.action),
                None => say!("  {verb}{}", f.action),
            }
        }
        if !args.force && !ctx.quiet {
            say!("dry run: `forage-ctl gc --force` acts on the findings above");
        }
    }
    Ok(if failed > 0 { 1 } else { 0 })
}
