use clap::{Args, CommandFactory};

use super::{Cli, Ctx};
use crate::error::{Error, Result};

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// bash, zsh, fish, elvish or powershell.
    pub shell: clap_complete::Shell,
}

pub fn run(ctx: &Ctx, args: CompletionsArgs) -> Result<i32> {
    ctx.no_json("completions", "prints a shell's completion script")?;
    clap_complete::generate(args.shell, &mut Cli::command(), "forage-ctl", &mut std::io::stdout());
    Ok(0)
}

#[derive(Debug, Args)]
pub struct ManArgs {
    /// Write every page (forage-ctl.1 and one forage-ctl-COMMAND.1 per command,
    /// which forage-ctl.1 refers to) into this directory, made if missing,
    /// instead of printing forage-ctl.1.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<std::path::PathBuf>,
}

pub fn man(ctx: &Ctx, args: ManArgs) -> Result<i32> {
    ctx.no_json("man", "prints or writes man pages")?;
    let Some(dir) = args.dir else {
        clap_mangen::Man::new(Cli::command()).render(&mut std::io::stdout()).map_err(Error::other)?;
        return Ok(0);
    };
    let failed = |e: std::io::Error| Error::other(format!("writing the man pages into {}: {e}", dir.display()));
    std::fs::create_dir_all(&dir).map_err(failed)?;
    clap_mangen::generate_to(Cli::command(), &dir).map_err(failed)?;
    Ok(0)
}
