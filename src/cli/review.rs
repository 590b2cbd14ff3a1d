//! `diff`, `log`, `merge` and `apply`: the agent's work, looked at and landed.

use std::io::IsTerminal;

use clap::Args;

use super::render::{shown, shown_text};
use super::{pager, Ctx};
use crate::error::{Error, Result};
use crate::names::SandboxName;
use crate::sandbox::{DiffPart, DiffReport, MergeRequest};
use crate::workspace::review::{DetachedHead, FileChange, LandHow, LandPlan};

#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The sandbox whose work to show.
    #[arg(add = super::complete::sandboxes())]
    pub name: SandboxName,
    /// Compare its files with this sandbox's (on the same repository) instead.
    #[arg(add = super::complete::sandboxes())]
    pub other: Option<SandboxName>,
    /// A line per file with its count of changed lines, and a total.
    #[arg(long, conflicts_with = "name_only")]
    pub stat: bool,
    /// The changed files' paths only.
    #[arg(long)]
    pub name_only: bool,
    /// Only what the agent committed (jj: its changes under the working copy).
    #[arg(long, conflicts_with_all = ["uncommitted", "other"])]
    pub committed: bool,
    /// Only what it has not committed (jj: the working-copy change).
    #[arg(long, conflicts_with = "other")]
    pub uncommitted: bool,
    /// Print straight to stdout, never through the pager.
    #[arg(long)]
    pub no_pager: bool,
}

#[derive(Debug, Args)]
pub struct LogArgs {
    /// The sandbox whose commits to list.
    #[arg(add = super::complete::sandboxes())]
    pub name: SandboxName,
    /// Print straight to stdout, never through the pager.
    #[arg(long)]
    pub no_pager: bool,
}

#[derive(Debug, Args)]
pub struct MergeArgs {
    /// The sandbox whose work to land.
    #[arg(add = super::complete::sandboxes())]
    pub name: SandboxName,
    /// Where the work conflicts, leave the conflicts marked in your checkout (git:
    /// as `git merge` does), for your `git commit`; refused when it is dirty.
    #[arg(long, conflicts_with_all = ["squash", "rebase", "abort"])]
    pub conflicts: bool,
    /// Undo a `merge --conflicts`: your checkout back as it was (as `git merge --abort`).
    #[arg(long, conflicts_with_all = ["squash", "rebase", "into", "message", "yes", "dry_run"])]
    pub abort: bool,
    /// The branch (jj: bookmark) to land it on (default: the one the sandbox was made from).
    #[arg(long, value_name = "BRANCH")]
    pub into: Option<String>,
    /// One new commit with the whole change.
    #[arg(long, conflicts_with = "rebase")]
    pub squash: bool,
    /// Each of the agent's commits copied onto the branch (git only).
    #[arg(long)]
    pub rebase: bool,
    /// With --squash: the commit's message (default: made from the agent's).
    #[arg(short, long, requires = "squash")]
    pub message: Option<String>,
    /// Land uncommitted files (jj: the working-copy change) too without asking.
    #[arg(short, long)]
    pub yes: bool,
    /// Say what would land, and change nothing.
    #[arg(long)]
    pub dry_run: bool,
}

#[derive(Debug, Args)]
pub struct UpdateArgs {
    /// The sandbox whose work to update.
    #[arg(add = super::complete::sandboxes())]
    pub name: SandboxName,
    /// The branch (jj: bookmark) to bring in (default: the one `merge` lands on).
    #[arg(long, value_name = "BRANCH")]
    pub from: Option<String>,
}

pub async fn diff(ctx: &Ctx, args: DiffArgs) -> Result<i32> {
    let engine = ctx.engine().await?;
    let part = match (args.committed, args.uncommitted) {
        (true, _) => DiffPart::Committed,
        (_, true) => DiffPart::Uncommitted,
        _ => DiffPart::All,
    };
    let report = engine.diff(&args.name, args.other.as_ref(), part).await?;
    for e in &report.sync_errors {
        ctx.out.warn(format!("the sync failed, so this shows what the host had: {e}"));
    }
    for s in &report.skipped {
        ctx.out.warn(format!("not read, taken as committed: {s}"));
    }
    if let Some(head) = &report.agent_head {
        say_detached(ctx, &args.name, head, "diff");
    }
    if ctx.out.json_wanted() {
        return ctx.out.json(&report).map(|()| 0);
    }
    let text = if args.name_only {
        report.files.iter().map(|f| format!("{}\n", shown(&f.path))).collect()
    } else if args.stat {
        stat(&report)
    } else {
        patches(&report.files, ctx.out.data_color())
    };
    if text.is_empty() {
        ctx.out.status(format!("no changes in sandbox {}", args.name));
        return Ok(0);
    }
    pager::show(ctx, &text, !args.no_pager)?;
    Ok(0)
}

/// `git diff --stat`'s shape: `path | N ++--`, then the totals.
fn stat(report: &DiffReport) -> String {
    let width = report.files.iter().map(|f| shown(&label(f)).chars().count()).max().unwrap_or(0);
    let mut out = String::new();
    let (mut adds, mut dels) = (0, 0);
    for f in &report.files {
        let counts = if f.binary {
            "Bin".to_owned()
        } else {
            let bar = "+".repeat(f.additions.min(40)) + &"-".repeat(f.deletions.min(40));
            format!("{} {bar}", f.additions + f.deletions)
        };
        out.push_str(&format!(" {:<width$} | {counts}\n", shown(&label(f))));
        adds += f.additions;
        dels += f.deletions;
    }
    if !report.files.is_empty() {
        let n = report.files.len();
        out.push_str(&format!(
            " {n} file{} changed, {adds} insertion{}(+), {dels} deletion{}(-)\n",
            if n == 1 { "" } else { "s" },
            if adds == 1 { "" } else { "s" },
            if dels == 1 { "" } else { "s" }
        ));
    }
    out
}

fn label(f: &FileChange) -> String {
    match &f.old_path {
        Some(old) => format!("{old} => {}", f.path),
        None => f.path.clone(),
    }
}

/// The patches as git prints them, escaped (the agent chose every byte), and
/// coloured when `color`: headers bold, hunk lines cyan, additions green,
/// deletions red.
fn patches(files: &[FileChange], color: bool) -> String {
    let paint =
        |code: &str, line: &str| if color { format!("\x1b[{code}m{line}\x1b[0m\n") } else { format!("{line}\n") };
    let mut out = String::new();
    for f in files {
        if f.patch.is_empty() {
            out.push_str(&paint("1", &format!("{} {}: too large a diff to show", f.status.letter(), shown(&f.path))));
            continue;
        }
        let mut in_hunks = false;
        for raw in f.patch.lines() {
            let line = shown_text(raw);
            let code = if raw.starts_with("@@") {
                in_hunks = true;
                "36"
            } else if !in_hunks {
                "1"
            } else if raw.starts_with('+') {
                "32"
            } else if raw.starts_with('-') {
                "31"
            } else {
                ""
            };
            if code.is_empty() {
                out.push_str(&line);
                out.push('\n');
            } else {
                out.push_str(&paint(code, &line));
            }
        }
    }
    out
}

pub async fn log(ctx: &Ctx, args: LogArgs) -> Result<i32> {
    let engine = ctx.engine().await?;
    let report = engine.log(&args.name).await?;
    if let Some(e) = &report.sync_error {
        ctx.out.warn(format!("the sync failed, so this shows what the host had: {e}"));
    }
    if let Some(head) = &report.agent_head {
        say_detached(ctx, &args.name, head, "log");
    }
    if ctx.out.json_wanted() {
        return ctx.out.json(&report).map(|()| 0);
    }
    if report.commits.is_empty() {
        ctx.out.status(format!("sandbox {} has committed nothing since {}", args.name, &report.start[..12]));
        return Ok(0);
    }
    let color = ctx.out.data_color();
    let mut text = String::new();
    for c in &report.commits {
        let id = &c.id[..12];
        let id = if color { format!("\x1b[33m{id}\x1b[0m") } else { id.to_owned() };
        let change = c.change_id.as_deref().map(|ch| format!("{} ", &ch[..ch.len().min(12)])).unwrap_or_default();
        let summary = if c.summary.is_empty() { "(no description)" } else { &c.summary };
        text.push_str(&format!("{change}{id} {}\n", shown(summary)));
    }
    pager::show(ctx, &text, !args.no_pager)?;
    Ok(0)
}

/// The agent's HEAD is detached: its commit, and those there the branch
/// (which alone `diff`, `log` and `merge` show) does not hold.
fn say_detached(ctx: &Ctx, name: &SandboxName, head: &DetachedHead, command: &str) {
    let summary = if head.summary.is_empty() { "(no message)" } else { &head.summary };
    let shows = match command {
        "log" => "log lists the branch's commits only",
        _ => "diff compares the files with the branch, so what the detached commits changed shows as uncommitted",
    };
    ctx.out.warn(format!(
        "the agent's HEAD is detached at {} {}, not on branch {}: {shows}",
        &head.commit[..head.commit.len().min(12)],
        summary,
        head.branch
    ));
    if !head.unsynced.is_empty() {
        let n = head.unsynced.len();
        let shown_commits: Vec<&str> = head.unsynced.iter().take(10).map(String::as_str).collect();
        ctx.out.warn(format!(
            "{n} commit{} there on no branch of yours ({}{}): `down` archives {}",
            if n == 1 { "" } else { "s" },
            shown_commits.join("; "),
            if n > 10 { format!("; and {} more", n - 10) } else { String::new() },
            if n == 1 { "it" } else { "them" }
        ));
    }
    ctx.out.hint_run(
        "{command} puts its HEAD back on the branch (then `git merge` or `git cherry-pick` the detached commits there)",
        ["exec", name.as_str(), "--", "git", "-C", "/workspace", "switch", head.branch.as_str()],
    );
}

pub async fn merge(ctx: &Ctx, args: MergeArgs) -> Result<i32> {
    let engine = ctx.engine().await?;
    if args.abort {
        return abort(ctx, &args.name).await;
    }
    let how = match (args.squash, args.rebase) {
        (true, _) => LandHow::Squash,
        (_, true) => LandHow::Rebase,
        _ => LandHow::Merge,
    };
    let request =
        MergeRequest { into: args.into.clone(), how, message: args.message.clone(), keep_conflicts: args.conflicts };
    let plan = engine.plan_merge(&args.name, request).await?;
    if args.dry_run {
        return report_plan(ctx, &plan, false);
    }
    if !plan.uncommitted.is_empty() && !args.yes {
        confirm_uncommitted(ctx, &plan)?;
    }
    let landed = engine.merge(&args.name, plan).await?;
    report_plan(ctx, &landed, true)
}

/// Uncommitted files land only when the user says so: asked on a terminal,
/// `--yes` otherwise.
fn confirm_uncommitted(ctx: &Ctx, plan: &LandPlan) -> Result<()> {
    let files: Vec<String> = plan.uncommitted.iter().map(|f| shown(f)).collect();
    let what = uncommitted_words(plan, &files.join(", "));
    if !std::io::stdin().is_terminal() || ctx.out.json_wanted() {
        return Err(Error::usage(format!("sandbox {} has {what}, which would land too; pass --yes", plan.sandbox)));
    }
    let them = if plan.jj { "it" } else { "them" };
    let question = format!("sandbox {} has {what}; land {them} on {} too? [y/N] ", plan.sandbox, plan.target);
    if ctx.out.ask(&question) {
        Ok(())
    } else {
        Err(Error::other("nothing was changed"))
    }
}

/// The files a plan lands that the agent has not committed, in its VCS's
/// words: git's uncommitted files, jj's working-copy change.
fn uncommitted_words(plan: &LandPlan, files: &str) -> String {
    let n = plan.uncommitted.len();
    let s = if n == 1 { "" } else { "s" };
    match plan.jj {
        true => format!("a working-copy change ({n} file{s}: {files})"),
        false => format!("{n} uncommitted file{s} ({files})"),
    }
}

fn report_plan(ctx: &Ctx, plan: &LandPlan, done: bool) -> Result<i32> {
    for s in &plan.not_read {
        ctx.out.warn(format!("not read, landed as committed: {s}"));
    }
    super::sync::warn_divergent(ctx, &plan.sandbox, &plan.divergent, true);
    if ctx.out.json_wanted() {
        let mut json = serde_json::to_value(plan).map_err(Error::other)?;
        json["landed"] = (done && !plan.is_empty() && !plan.leaves_conflicts()).into();
        json["conflicts_left"] = (done && plan.leaves_conflicts()).into();
        return ctx.out.json(&json).map(|()| 0);
    }
    let target = shown(&plan.target);
    if plan.is_empty() {
        ctx.out.data(format!("the work of sandbox {} is already on {target}, nothing to land", plan.sandbox));
        return Ok(0);
    }
    if plan.leaves_conflicts() {
        return report_conflicts_left(ctx, plan, done);
    }
    let how = match (plan.how, plan.fast_forward) {
        (_, true) => "fast-forward".to_owned(),
        (LandHow::Merge, false) => "merge commit".to_owned(),
        (LandHow::Squash, false) => "one squashed commit".to_owned(),
        (LandHow::Rebase, false) => format!("{} commits copied", plan.commits.len()),
    };
    let unit = if plan.jj { "change" } else { "commit" };
    let commits = match plan.commits.len() {
        1 => format!("1 {unit}"),
        n => format!("{n} {unit}s"),
    };
    let files = match (plan.uncommitted.len(), plan.jj) {
        (0, _) => String::new(),
        (1, true) => " and the working-copy change (1 file)".to_owned(),
        (n, true) => format!(" and the working-copy change ({n} files)"),
        (1, false) => " and 1 uncommitted file".to_owned(),
        (n, false) => format!(" and {n} uncommitted files"),
    };
    let verb = if done { "landed" } else { "would land" };
    // Only the working-copy change (or only uncommitted files): no "0 commits and".
    let (commits, files) = match (plan.commits.is_empty(), files.strip_prefix(" and ")) {
        (true, Some(only)) => (only.to_owned(), String::new()),
        _ => (commits, files),
    };
    ctx.out.data(format!(
        "{verb} {commits}{files} of sandbox {} on {target} ({how}): {} -> {}",
        plan.sandbox,
        &plan.before[..12],
        &plan.commit[..12]
    ));
    if done {
        ctx.out.hint_run("{command} now finds nothing of it to archive", ["down", plan.sandbox.as_str()]);
        if plan.jj {
            // The landed working-copy change is the agent's `@`: edited
            // again, it would be a second version of a landed change.
            if !plan.uncommitted.is_empty() {
                ctx.out.hint_run(
                    "{command} starts the agent's next change on top, so the landed one stays as it is",
                    ["exec", plan.sandbox.as_str(), "--", "jj", "-R", "/workspace", "new"],
                );
            }
            ctx.out.hint_text(&format!("`jj new {}` starts your next change on the landed work", plan.target));
        }
    }
    Ok(0)
}

/// `merge --conflicts`: which files now hold conflict markers, where, and
/// how to go on.
fn report_conflicts_left(ctx: &Ctx, plan: &LandPlan, done: bool) -> Result<i32> {
    let files: Vec<String> = plan.conflicts.iter().map(|f| shown(f)).collect();
    let n = files.len();
    let checkout = plan.checkout.as_ref().map(|c| c.display().to_string()).unwrap_or_default();
    let checkout = checkout.trim_end_matches('/');
    let verb = if done { "left" } else { "would leave" };
    ctx.out.data(format!(
        "{verb} {n} conflicting file{} of sandbox {} in {} ({}), marked: {}",
        if n == 1 { "" } else { "s" },
        plan.sandbox,
        shown(checkout),
        shown(&plan.target),
        files.join(", ")
    ));
    if done {
        ctx.out.hint_text(&format!("resolve them, `git add` them and `git commit` in {checkout} to land the merge"));
        ctx.out.hint_run("or {command} puts your checkout back as it was", ["merge", plan.sandbox.as_str(), "--abort"]);
    }
    Ok(0)
}

async fn abort(ctx: &Ctx, name: &SandboxName) -> Result<i32> {
    let engine = ctx.engine().await?;
    let aborted = engine.abort_merge(name).await?;
    if ctx.out.json_wanted() {
        return ctx.out.json(&aborted).map(|()| 0);
    }
    ctx.out.data(format!(
        "aborted the merge of sandbox {name} in {}: {} is as it was before, {} file{} put back",
        shown(&aborted.checkout),
        shown(&aborted.target),
        aborted.files.len(),
        if aborted.files.len() == 1 { "" } else { "s" }
    ));
    Ok(0)
}

pub async fn update(ctx: &Ctx, args: UpdateArgs) -> Result<i32> {
    let engine = ctx.engine().await?;
    let updated = engine.update(&args.name, args.from.clone()).await?;
    if ctx.out.json_wanted() && updated.exit_code == 0 {
        return ctx.out.json(&updated).map(|()| 0);
    }
    for line in updated.output.lines().filter(|l| !l.trim().is_empty()) {
        ctx.out.status(format!("  {line}"));
    }
    let (name, from) = (updated.sandbox.as_str(), shown(&updated.from));
    match updated.exit_code {
        0 => {
            ctx.out.data(format!("brought {from} into sandbox {name}"));
            ctx.out.hint_run("{command} now lands its work", ["merge", name]);
            Ok(0)
        }
        3 => Err(Error::conflict(format!(
            "bringing {from} into sandbox {name} left conflicts there, marked in its files (listed above)"
        ))
        .hint_run(
            "have its agent resolve and commit them (or do it yourself in {command}), then merge again",
            ["shell", name],
        )),
        code => Err(Error::conflict(format!(
            "bringing {from} into sandbox {name} failed inside (exit {code}); nothing of yours was changed"
        ))
        .hint_run("{command} lets you look", ["shell", name])),
    }
}

pub async fn apply(ctx: &Ctx, args: super::NameArg) -> Result<i32> {
    let engine = ctx.engine().await?;
    let applied = engine.apply(&args.name).await?;
    for s in &applied.not_read {
        ctx.out.warn(format!("not read, applied as committed: {s}"));
    }
    if ctx.out.json_wanted() {
        return ctx.out.json(&applied).map(|()| 0);
    }
    if applied.files.is_empty() {
        ctx.out.status(format!("sandbox {} changed nothing", args.name));
        return Ok(0);
    }
    ctx.out.data(format!(
        "applied the work of sandbox {} to {}: {} file{} changed, not committed",
        args.name,
        applied.checkout,
        applied.files.len(),
        if applied.files.len() == 1 { "" } else { "s" }
    ));
    for f in &applied.files {
        ctx.out.data(format!("  {f}"));
    }
    Ok(0)
}
