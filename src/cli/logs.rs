use clap::Args;

use super::{terminal, Ctx};
use crate::error::Result;
use crate::names::SandboxName;

#[derive(Debug, Args)]
pub struct LogsArgs {
    #[arg(add = super::complete::sandboxes())]
    pub name: SandboxName,
    /// Keep printing new output until the agent exits.
    #[arg(short, long)]
    pub follow: bool,
    /// Only the last N lines.
    #[arg(short = 'n', long = "tail", value_name = "N")]
    pub tail: Option<u64>,
}

pub async fn run(ctx: &Ctx, args: LogsArgs) -> Result<i32> {
    ctx.no_json("logs", "prints the agent's output as it is")?;
    let engine = ctx.engine().await?;
    let record = engine.record(&args.name)?;
    // The agent's output, as it is, is all that reaches the terminal now.
    engine.progress.hand_over();
    terminal::pump_output(engine.logs(&record, args.follow, args.tail)).await?;
    Ok(0)
}
