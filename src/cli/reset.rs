//! reset: a new container from the sandbox's template; the workspace is untouched.

use super::{Ctx, NameArg};
use crate::error::Result;
use crate::template;

pub async fn run(ctx: &Ctx, args: NameArg) -> Result<i32> {
    let docker = ctx.docker().await?;
    let progress = ctx.progress();
    let record = ctx.engine(&docker, progress.as_ref()).reset(&args.name, template::resolve).await?;
    progress.finish();
    if !ctx.quiet {
        say!(
            "sandbox {} has a new container {} (template {}, image {}); workspace {} untouched",
            record.name,
            record.container,
            record.template,
            record.image,
            record.workspace.host_path().display()
        );
    }
    Ok(0)
}
