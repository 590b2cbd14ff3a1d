use std::io::IsTerminal;

use clap::Args;

use super::{terminal, Ctx, NameArg};
use crate::error::Result;
use crate::names::SandboxName;

#[derive(Debug, Args)]
pub struct ExecArgs {
    #[arg(add = super::complete::sandboxes())]
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
    ctx.no_json("exec", "passes the command's own output through")?;
    run_in(ctx, &args.name, args.command, args.interactive, args.tty).await
}

/// A login-like shell: bash when the image has it, else sh.
pub async fn shell(ctx: &Ctx, args: NameArg) -> Result<i32> {
    ctx.no_json("shell", "streams the container's terminal")?;
    let cmd = ["sh", "-c", "if command -v bash >/dev/null 2>&1; then exec bash; else exec sh; fi"];
    run_in(ctx, &args.name, cmd.map(String::from).to_vec(), true, std::io::stdin().is_terminal()).await
}

/// Runs `command` in the sandbox with this terminal; exits with its exit code.
async fn run_in(ctx: &Ctx, name: &SandboxName, command: Vec<String>, stdin: bool, tty: bool) -> Result<i32> {
    let engine = ctx.engine().await?;
    let size = tty.then(terminal::window_size).flatten();
    let session = engine.exec(name, command, stdin, tty, size).await?;
    let id = session.id.clone();
    terminal::connect(&engine, session, tty, stdin).await?;
    let code = engine.exit_code(&id).await?.unwrap_or(-1);
    Ok(i32::try_from(code).unwrap_or(1))
}
