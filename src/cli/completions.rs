use clap::{Args, CommandFactory};

use super::Cli;
use crate::error::{Error, Result};

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// bash, zsh, fish, elvish or powershell.
    pub shell: clap_complete::Shell,
}

pub fn run(args: CompletionsArgs) -> Result<i32> {
    clap_complete::generate(args.shell, &mut Cli::command(), "forage-ctl", &mut std::io::stdout());
    Ok(0)
}

pub fn man() -> Result<i32> {
    clap_mangen::Man::new(Cli::command()).render(&mut std::io::stdout()).map_err(Error::other)?;
    Ok(0)
}
