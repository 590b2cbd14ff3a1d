use clap::Args;

use super::Ctx;
use crate::error::{Error, Result};

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// bash, zsh, fish, elvish or powershell.
    pub shell: clap_complete::Shell,
}

/// The shell's completion script: it asks `forage-ctl` (found on PATH) for
/// the candidates at each Tab, so that sandbox and template names complete
/// too (`complete`). The same script as `COMPLETE=SHELL forage-ctl` prints.
pub fn run(ctx: &Ctx, args: CompletionsArgs) -> Result<i32> {
    ctx.no_json("completions", "prints a shell's completion script")?;
    let shell = args.shell.to_string();
    let shells = clap_complete::env::Shells::builtins();
    let completer =
        shells.completer(&shell).ok_or_else(|| Error::usage(format!("no completion script for {shell}")))?;
    let mut script = Vec::new();
    completer
        .write_registration(super::complete::VAR, "forage-ctl", "forage-ctl", "forage-ctl", &mut script)
        .map_err(Error::other)?;
    ctx.out.data_block(String::from_utf8_lossy(&script));
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
        clap_mangen::Man::new(super::command()).render(&mut std::io::stdout()).map_err(Error::other)?;
        return Ok(0);
    };
    let failed = |e: std::io::Error| Error::other(format!("writing the man pages into {}: {e}", dir.display()));
    std::fs::create_dir_all(&dir).map_err(failed)?;
    clap_mangen::generate_to(super::command(), &dir).map_err(failed)?;
    Ok(0)
}
