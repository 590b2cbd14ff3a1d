use std::io::IsTerminal;

use super::{Ctx, NameArg};
use crate::error::Result;
use crate::progress::Silent;

pub async fn run(ctx: &Ctx, args: NameArg) -> Result<i32> {
    let docker = ctx.docker().await?;
    let record = ctx.engine(&docker, &Silent).attachable(&args.name).await?;
    if !ctx.quiet && std::io::stdin().is_terminal() {
        eprintln!("attached to {}; detach with ctrl-p ctrl-q", args.name);
    }
    docker.attach(&record.container).await?;
    Ok(0)
}
