use clap::Args;

use super::Ctx;
use crate::error::{Error, Result};
use crate::names::SandboxName;
use crate::sandbox::{restore_args, DownOptions, DownReport, PlannedDown, SandboxState};
use crate::workspace::Mode;

#[derive(Debug, Args)]
pub struct DownArgs {
    /// The sandboxes to tear down.
    #[arg(required_unless_present = "all", conflicts_with = "all", add = super::complete::sandboxes())]
    pub names: Vec<SandboxName>,
    /// Tear down every sandbox of this FORAGE_HOME.
    #[arg(long)]
    pub all: bool,
    /// git: keep the sandbox's branch (the worktree is still removed).
    #[arg(long)]
    pub keep_branch: bool,
    /// Throw uncommitted and unmerged work away instead of archiving it.
    #[arg(long)]
    pub discard: bool,
    /// Show what would be removed, and change nothing.
    #[arg(long)]
    pub dry_run: bool,
}

pub async fn run(ctx: &Ctx, args: DownArgs) -> Result<i32> {
    let engine = ctx.engine().await?;
    let names = if args.all { engine.all_names().await? } else { args.names.clone() };
    if args.dry_run {
        let plan = engine.plan_down(&names).await?;
        engine.progress.finish();
        if ctx.out.json_wanted() {
            ctx.out.json(&plan)?;
        } else {
            print_plan(ctx, &plan, args.discard);
        }
        return Ok(0);
    }
    let opts = DownOptions { keep_branch: args.keep_branch, discard: args.discard };
    let mut reports = Vec::new();
    let mut first_error: Option<Error> = None;
    // Each sandbox on its own: one that cannot be removed stops none of the others.
    for name in &names {
        let done = engine.down(name, opts).await;
        engine.progress.finish();
        match done {
            Ok(report) => {
                // Said even with -q and --json: work that was not kept.
                for n in &report.not_archived {
                    ctx.out.warn(format!("sandbox {}: not archived: {}: {}", report.name, n.source, n.why));
                }
                super::sync::warn_divergent(ctx, report.name.as_str(), &report.divergent, false);
                if !ctx.out.json_wanted() {
                    print_report(ctx, &report);
                }
                reports.push(report);
            }
            Err(e) => {
                ctx.out.error(&e);
                first_error.get_or_insert(e);
            }
        }
    }
    if ctx.out.json_wanted() {
        ctx.out.json(&reports)?;
    }
    // The errors were printed already; the first one's exit code is the command's.
    Ok(first_error.map(|e| e.exit_code()).unwrap_or(0))
}

fn plural(n: usize, word: &str) -> String {
    format!("{n} {word}{}", if n == 1 { "" } else { "s" })
}

fn print_report(ctx: &Ctx, r: &DownReport) {
    let name = &r.name;
    ctx.out.data(match (&r.workspace, &r.branch, r.mode) {
        (None, ..) => format!("removed container {} of sandbox {name}", r.container),
        (Some(ws), None, _) => format!("removed sandbox {name} (container {}); {ws} left as it was", r.container),
        (Some(ws), Some(bookmark), Some(Mode::Jj)) => {
            format!("removed sandbox {name} (container {}, {ws}); bookmark {bookmark} removed", r.container)
        }
        (Some(ws), Some(branch), _) => {
            let fate = if r.kept_branch { "kept" } else { "deleted" };
            format!("removed sandbox {name} (container {}, worktree {ws}); branch {branch} {fate}", r.container)
        }
    });
    let kind = if r.mode == Some(Mode::Jj) { "bookmark" } else { "ref" };
    for a in &r.archived_elsewhere {
        let short = &a.commit[..a.commit.len().min(12)];
        let source = a.source.as_deref().unwrap_or("elsewhere");
        ctx.out.data(match r.mode {
            Some(Mode::Jj) => format!("archived the agent's {source} as bookmark {} ({short})", a.refname),
            _ => format!(
                "archived the agent's {source} ({}) as ref {} ({short})",
                plural(a.commits, "commit"),
                a.refname
            ),
        });
    }
    if let Some(a) = &r.archived {
        let mut what = Vec::new();
        if a.commits > 0 {
            what.push(match r.mode {
                Some(Mode::Jj) => plural(a.commits, "change"),
                _ => format!("{} found on no other branch", plural(a.commits, "commit")),
            });
        }
        if !a.dirty_files.is_empty() {
            what.push(match r.mode {
                Some(Mode::Jj) => format!("{} changed after jj's last snapshot", plural(a.dirty_files.len(), "file")),
                _ => plural(a.dirty_files.len(), "uncommitted file"),
            });
        }
        ctx.out.data(format!(
            "archived {} as {kind} {} ({})",
            what.join(" and "),
            a.refname,
            &a.commit[..a.commit.len().min(12)]
        ));
    }
    // One command per archive: each brings back its own work, under a name
    // of its own (`sandbox::archives::restore_name`).
    if let Some(a) = &r.archived {
        let what = if r.archived_elsewhere.is_empty() { "it" } else { "the sandbox's work" };
        ctx.out.hint_run(&format!("restore {what} with {{command}}"), restore_args(name, &a.refname));
    }
    for a in &r.archived_elsewhere {
        let source = a.source.as_deref().unwrap_or("work found elsewhere");
        ctx.out.hint_run(&format!("restore the agent's {source} with {{command}}"), restore_args(name, &a.refname));
    }
}

fn print_plan(ctx: &Ctx, plan: &[PlannedDown], discard: bool) {
    for p in plan {
        if let Some(why) = &p.refused {
            ctx.out.data(format!("would not remove sandbox {}: {why}", p.name));
            continue;
        }
        if p.status == SandboxState::Orphan {
            ctx.out.data(format!("would remove container {} of sandbox {} (it has no record)", p.container, p.name));
            continue;
        }
        let mode = p.mode.unwrap_or(Mode::GitWorktree);
        let kind = if mode == Mode::Jj { "bookmark" } else { "branch" };
        let branch = p.branch.as_deref().map(|b| format!(", {kind} {b}")).unwrap_or_default();
        ctx.out.data(format!("would remove sandbox {} (container {}{branch})", p.name, p.container));
        match (&p.at_stake, discard) {
            (Some(s), _) if s.is_empty() => ctx.out.data("  nothing of the agent's to archive"),
            (Some(s), false) => ctx.out.data(format!("  would archive {}", s.describe(mode))),
            (Some(s), true) => ctx.out.data(format!("  would throw away {}", s.describe(mode))),
            (None, _) => {}
        }
    }
}
