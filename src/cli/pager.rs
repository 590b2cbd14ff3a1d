//! Long output (`diff`, `log`) through the user's pager when stdout is a
//! terminal, as git does: `FORAGE_PAGER`, else `PAGER`, else `less` (with
//! `LESS=FRX`, so that one screenful is just printed and colours pass). Plain
//! on stdout when piped, with `--no-pager`, or when the pager is `cat`.

use std::io::{IsTerminal, Write};
use std::process::{Command, Stdio};

use super::Ctx;
use crate::error::Result;

/// Shows `text` (already escaped and coloured for a terminal).
pub fn show(ctx: &Ctx, text: &str, allowed: bool) -> Result<()> {
    let pager = ctx.settings.pager.clone().unwrap_or_else(|| "less".into());
    let wanted = allowed && std::io::stdout().is_terminal() && !pager.trim().is_empty() && pager.trim() != "cat";
    if wanted {
        ctx.out.hand_over_terminal();
        let mut command = Command::new("sh");
        command.arg("-c").arg(&pager).stdin(Stdio::piped());
        if !ctx.settings.less_set {
            command.env("LESS", "FRX");
        }
        if let Ok(mut child) = command.spawn() {
            if let Some(mut stdin) = child.stdin.take() {
                // The user quitting the pager early closes the pipe: not an error.
                let _ = stdin.write_all(text.as_bytes());
            }
            let _ = child.wait();
            return Ok(());
        }
    }
    ctx.out.data_block(text);
    Ok(())
}
