//! start, stop, restart: the container only; the workspace is never touched.

use super::{Ctx, NameArg};
use crate::error::Result;

pub async fn start(ctx: &Ctx, args: NameArg) -> Result<i32> {
    let docker = ctx.docker().await?;
    let progress = ctx.progress();
    ctx.engine(&docker, progress.as_ref()).start(&args.name).await?;
    Ok(0)
}

pub async fn stop(ctx: &Ctx, args: NameArg) -> Result<i32> {
    let docker = ctx.docker().await?;
    let progress = ctx.progress();
    progress.step(&format!("stopping {}", args.name));
    ctx.engine(&docker, progress.as_ref()).stop(&args.name).await?;
    Ok(0)
}

pub async fn restart(ctx: &Ctx, args: NameArg) -> Result<i32> {
    let docker = ctx.docker().await?;
    let progress = ctx.progress();
    progress.step(&format!("restarting {}", args.name));
    ctx.engine(&docker, progress.as_ref()).restart(&args.name).await?;
    Ok(0)
}
