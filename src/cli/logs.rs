use clap::Args;

use super::Ctx;
use crate::error::Result;
use crate::names::SandboxName;
use crate::progress::Silent;

#[derive(Debug, Args)]
pub struct LogsArgs {
    pub name: SandboxName,
    /// Keep printing new output until the agent exits.
    #[arg(short, long)]
    pub follow: bool,
    /// Only the last N lines.
    #[arg(short = 'n', long = "tail", value_name = "N")]
    pub tail: Option<u64>,
}

pub async fn run(ctx: &Ctx, args: LogsArgs) -> Result<i32> {
    let docker = ctx.docker().await?;
    let record = ctx.engine(&docker, &Silent).record(&args.name)?;
    docker.logs(&record.container, args.follow, args.tail).await?;
    Ok(0)
}
