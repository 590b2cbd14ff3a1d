use std::io::IsTerminal;

use clap::Args;

use super::{Ctx, NameArg};
use crate::error::Result;
use crate::names::SandboxName;
use crate::progress::Silent;
use crate::runtime::session::ExecOptions;
use crate::runtime::Identity;

#[derive(Debug, Args)]
pub struct ExecArgs {
    pub name: SandboxName,
    /// Keep stdin open and forward it.
    #[arg(short, long)]
    pub interactive: bool,
    /// Allocate a TTY.
    #[arg(short, long)]
    pub tty: bool,
    /// The command and its arguments (everything after NAME and the options, as
    /// `docker exec` takes it; `--` before it works too).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

pub async fn run(ctx: &Ctx, args: ExecArgs) -> Result<i32> {
    let docker = ctx.docker().await?;
    let record = ctx.engine(&docker, &Silent).record(&args.name)?;
    let opts = ExecOptions { interactive: args.interactive, tty: args.tty, identity: Identity::current() };
    let code = docker.exec(&record.container, args.command, opts).await?;
    Ok(i32::try_from(code).unwrap_or(1))
}

/// A login-like shell: bash when the image has it, else sh.
pub async fn shell(ctx: &Ctx, args: NameArg) -> Result<i32> {
    let docker = ctx.docker().await?;
    let record = ctx.engine(&docker, &Silent).record(&args.name)?;
    let cmd = ["sh", "-c", "if command -v bash >/dev/null 2>&1; then exec bash; else exec sh; fi"];
    let opts = ExecOptions { interactive: true, tty: std::io::stdin().is_terminal(), identity: Identity::current() };
    let code = docker.exec(&record.container, cmd.map(String::from).to_vec(), opts).await?;
    Ok(i32::try_from(code).unwrap_or(1))
}
