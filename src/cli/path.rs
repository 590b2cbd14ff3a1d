//! `path` and `checkout`: where the agent's files are on the host, and a
//! branch of its work the user can switch to (`git switch forage-NAME` fails
//! in the user's checkout: that branch is checked out in the sandbox's
//! worktree).

use super::{Ctx, NameArg};
use crate::error::Result;

pub async fn run(ctx: &Ctx, args: NameArg) -> Result<i32> {
    let engine = ctx.engine().await?;
    let record = engine.record(&args.name)?;
    let ws = record.workspace.get();
    let path = engine.host_view(&args.name).await?;
    if ctx.out.json_wanted() {
        ctx.out.json(&serde_json::json!({
            "sandbox": record.name.as_str(),
            "mode": ws.mode(),
            "path": path,
        }))?;
    } else {
        ctx.out.data(path.display().to_string());
    }
    Ok(0)
}

pub async fn checkout(ctx: &Ctx, args: NameArg) -> Result<i32> {
    let engine = ctx.engine().await?;
    ctx.cancel_on_signals();
    let made = engine.checkout(&args.name).await?;
    engine.progress.finish();
    if ctx.out.json_wanted() {
        return ctx.out.json(&made).map(|()| 0);
    }
    let at = &made.commit[..made.commit.len().min(12)];
    let verb = match &made.before {
        None => "made",
        Some(b) if *b == made.commit => "left",
        Some(_) => "moved",
    };
    ctx.out.data(format!("{verb} branch {} at {at}: the synced work of sandbox {}", made.branch, made.sandbox));
    ctx.out.hint_text(&format!("`git switch {}` in {} to look at it", made.branch, made.checkout));
    ctx.out.hint_run("{command} again moves it to the agent's newer work", ["checkout", made.sandbox.as_str()]);
    let files = match made.uncommitted {
        0 => None,
        1 => Some("uncommitted file is".to_owned()),
        n => Some(format!("{n} uncommitted files are")),
    };
    if let Some(files) = files {
        ctx.out.hint_run(
            &format!("the agent's {files} not on it: {{command}} shows them"),
            ["diff", made.sandbox.as_str(), "--uncommitted"],
        );
    }
    Ok(0)
}
