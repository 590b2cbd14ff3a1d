use super::{Ctx, NameArg};
use crate::error::Result;
use crate::workspace::git::SyncReport;
use crate::workspace::jj::{Divergent, JjSync, MAX_HEADS};
use crate::workspace::Synced;

pub async fn run(ctx: &Ctx, args: NameArg) -> Result<i32> {
    let synced = ctx.engine().await?.sync(&args.name).await?;
    if ctx.out.json_wanted() {
        ctx.out.json(&synced)?;
        return Ok(0);
    }
    match &synced {
        Synced::Git(report) => print_git(ctx, report),
        Synced::Jj(sync) => print_jj(ctx, sync),
    }
    Ok(0)
}

fn short(id: &str) -> &str {
    &id[..id.len().min(12)]
}

fn print_git(ctx: &Ctx, report: &SyncReport) {
    let branch = &report.branch;
    ctx.out.data(match (report.new_commits, report.after.as_deref().map(short)) {
        (_, None) => format!("{branch}: the branch is gone from the host repository; nothing to sync onto"),
        (0, Some(tip)) if report.before == report.after => format!("{branch} is up to date ({tip})"),
        (0, Some(tip)) => format!("{branch} moved to {tip} (the agent rewrote its branch)"),
        (n, Some(tip)) => {
            format!("{branch} moved to {tip}: {n} new commit{} from the sandbox", if n == 1 { "" } else { "s" })
        }
    });
    if let Some(head) = &report.agent_head {
        ctx.out.status(format!("note: the agent's HEAD is {head}; only {branch} is synced (`down` archives the rest)"));
    }
}

fn print_jj(ctx: &Ctx, sync: &JjSync) {
    let changes = format!("{} change{}", sync.changes, if sync.changes == 1 { "" } else { "s" });
    ctx.out.data(match sync.heads.first() {
        None => format!("{}: no changes of the agent's yet (no bookmark)", sync.bookmark),
        Some(head) => format!("{} at {} ({changes} of the agent's)", sync.bookmark, short(head)),
    });
    if sync.heads.len() > 1 {
        ctx.out.data(format!("  and {} more heads, as forage-heads/… bookmarks", sync.heads.len() - 1));
    }
    if let Some(why) = &sync.jj_failed {
        ctx.out.warn(format!("{why}; the agent's commits were read from its repository instead"));
    }
    if sync.heads_left_out > 0 {
        ctx.out.warn(format!(
            "{} further work heads of the agent's got no bookmark: forage gives at most {MAX_HEADS} heads one (the working copy's first, then the newest); combine or abandon the others inside",
            sync.heads_left_out
        ));
    }
    let sandbox = sync.bookmark.strip_prefix("forage/").unwrap_or(&sync.bookmark);
    warn_divergent(ctx, sandbox, &sync.divergent, true);
    for id in &sync.not_the_agents {
        ctx.out.warn(format!(
            "jj inside the sandbox named your repository's commit {} as the agent's work; it got no bookmark",
            short(id)
        ));
    }
}

/// Changes a `merge` landed that the agent edited again since, which the
/// user's jj shows as divergent: each named, with the two ways out. While
/// the sandbox is up (`live`) the fix is made inside it, where the edit
/// lives (a fix in the user's repository would come back at the next sync);
/// after `down`, in the user's repository.
pub(super) fn warn_divergent(ctx: &Ctx, name: &str, divergent: &[Divergent], live: bool) {
    for d in divergent {
        ctx.out.warn(d.describe());
        if live {
            ctx.out.hint_run("keep the edit as a change of its own with {command}, then sync", d.keep_inside(name));
            ctx.out.hint_run("or drop it with {command}", d.drop_inside(name));
        } else {
            let edited = short(&d.edited);
            ctx.out.hint_text(&format!(
                "keep the edit as a change of its own with `jj metaedit --update-change-id -r {edited}`, or drop it with `jj abandon {edited}`"
            ));
        }
    }
}
