//! start, stop, restart: the container only; the workspace is never touched.

use super::{Ctx, NameArg};
use crate::error::Result;

/// What the command left the sandbox as (`--json`: its status).
async fn report(ctx: &Ctx, args: &NameArg, done: &str) -> Result<i32> {
    if ctx.out.json_wanted() {
        ctx.out.json(&ctx.engine().await?.status(&args.name).await?)?;
    } else {
        ctx.out.status(format!("sandbox {} {done}", args.name));
    }
    Ok(0)
}

pub async fn start(ctx: &Ctx, args: NameArg) -> Result<i32> {
    let engine = ctx.engine().await?;
    engine.start(&args.name).await?;
    engine.progress.finish();
    report(ctx, &args, "started").await
}

pub async fn stop(ctx: &Ctx, args: NameArg) -> Result<i32> {
    let engine = ctx.engine().await?;
    engine.stop(&args.name).await?;
    engine.progress.finish();
    report(ctx, &args, "stopped").await
}

pub async fn restart(ctx: &Ctx, args: NameArg) -> Result<i32> {
    let engine = ctx.engine().await?;
    engine.restart(&args.name).await?;
    engine.progress.finish();
    report(ctx, &args, "restarted").await
}
