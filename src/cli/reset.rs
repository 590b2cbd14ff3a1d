//! reset: a new container from the sandbox's template; the workspace is untouched.

use super::{Ctx, NameArg};
use crate::error::Result;

pub async fn run(ctx: &Ctx, args: NameArg) -> Result<i32> {
    let engine = ctx.engine().await?;
    let templates = engine.templates();
    let record = engine.reset(&args.name, |name| templates.resolve(name)).await?;
    engine.progress.finish();
    if ctx.out.json_wanted() {
        ctx.out.json(&record)?;
    } else {
        ctx.out.data(format!(
            "sandbox {} has a new container {} (template {}, image {}); workspace {} untouched",
            record.name,
            record.container,
            record.template,
            record.image,
            record.workspace.host_path().display()
        ));
    }
    Ok(0)
}
