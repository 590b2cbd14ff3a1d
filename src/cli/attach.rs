use std::io::IsTerminal;

use super::{terminal, Ctx, NameArg};
use crate::error::Result;

pub async fn run(ctx: &Ctx, args: NameArg) -> Result<i32> {
    ctx.no_json("attach", "streams the agent's terminal")?;
    let engine = ctx.engine().await?;
    let session = engine.attach(&args.name).await?;
    if std::io::stdin().is_terminal() {
        ctx.out.status(format!("attached to {}; detach with ctrl-p ctrl-q", args.name));
    }
    terminal::connect(&engine, session, true, true).await?;
    Ok(0)
}
