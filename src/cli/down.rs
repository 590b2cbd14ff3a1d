use clap::Args;

use serde::Serialize;

use super::render::{print_json, shown};
use super::Ctx;
use crate::error::{Error, Result};
use crate::names::SandboxName;
use crate::runtime::docker::Docker;
use crate::sandbox::{DownOptions, DownReport, Engine};
use crate::workspace::AtStake;
use crate::workspace::Mode;

#[derive(Debug, Args)]
pub struct DownArgs {
    /// The sandboxes to tear down.
    #[arg(required_unless_present = "all", conflicts_with = "all")]
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
    /// Machine-readable output: what was (or would be) removed.
    #[arg(long)]
    pub json: bool,
}

pub async fn run(ctx: &Ctx, args: DownArgs) -> Result<i32> {
    let docker = ctx.docker().await?;
    let progress = ctx.progress();
    let engine = ctx.engine(&docker, progress.as_ref());
    let names: Vec<SandboxName> = if args.all {
        engine.list().await?.into_iter().filter_map(|r| SandboxName::parse(&r.name).ok()).collect()
    } else {
        args.names.clone()
    };

    if args.dry_run {
        return dry_run(&engine, &names, &args).await;
    }

    let opts = DownOptions { keep_branch: args.keep_branch, discard: args.discard };
    let mut reports = Vec::new();
    let mut first_error: Option<Error> = None;
    for name in &names {
        match engine.down(name, opts).await {
            Ok(report) => {
                progress.finish();
                // Said even with -q and --json: work that was not kept.
                for n in &report.not_archived {
                    let warning = format!("sandbox {}: not archived: {}: {}", report.name, n.source, n.why);
                    eprintln!("forage-ctl: warning: {}", super::render::shown(&warning));
                }
                if !ctx.quiet && !args.json {
                    print_report(&report);
                }
                reports.push(report);
            }
            Err(e) => {
                progress.finish();
                eprintln!("forage-ctl: error: {}", super::render::shown_text(&e.to_string()));
                first_error.get_or_insert(e);
            }
        }
    }
    if args.json {
        print_json(&reports)?;
    }
    match first_error {
        // The message was already printed; keep the error's exit code.
        Some(e) => Ok(e.exit_code()),
        None => Ok(0),
    }
}

fn print_report(r: &DownReport) {
    let name = &r.name;
    let plural = |n: usize, word: &str| format!("{n} {word}{}", if n == 1 { "" } else { "s" });
    match (&r.workspace, &r.branch, r.mode) {
        (None, ..) => say!("removed container {} of sandbox {name}", r.container),
        (Some(ws), None, _) => say!("removed sandbox {name} (container {}); {ws} left as it was", r.container),
        (Some(ws), Some(bookmark), Some(Mode::Jj)) => {
            say!("removed sandbox {name} (container {}, {ws}); bookmark {bookmark} removed", r.container)
        }
        (Some(ws), Some(branch), _) => {
            let fate = if r.kept_branch { "kept" } else { "deleted" };
            say!("removed sandbox {name} (container {}, worktree {ws}); branch {branch} {fate}", r.container);
        }
    }
    let kind = if r.mode == Some(Mode::Jj) { "bookmark" } else { "ref" };
    for a in &r.archived_elsewhere {
        let short = &a.commit[..a.commit.len().min(12)];
        let source = a.source.as_deref().unwrap_or("elsewhere");
        match r.mode {
            Some(Mode::Jj) => say!("archived the agent's {source} as bookmark {} ({short})", a.refname),
            _ => say!("archived the agent's {source} ({}) as ref {} ({short})", plural(a.commits, "commit"), a.refname),
        }
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
        say!("archived {} as {kind} {} ({})", what.join(" and "), a.refname, &a.commit[..a.commit.len().min(12)]);
    }
    if r.archived.is_some() || !r.archived_elsewhere.is_empty() {
        say!("  restore with: forage-ctl restore {name}");
    }
}

/// One sandbox in `down --dry-run`'s plan.
#[derive(Serialize)]
struct Planned {
    name: String,
    container: String,
    /// As `list` shows it.
    status: String,
    mode: Option<String>,
    workspace: Option<String>,
    branch: Option<String>,
    /// What `down` would archive (with `--discard`, throw away); `null` for a
    /// direct workspace or an orphan container.
    at_stake: Option<AtStake>,
}

/// Planned from what `list` sees, so an orphan container (no record) is in the
/// plan as it would be in a real `down`. Changes nothing.
async fn dry_run(engine: &Engine<'_, Docker>, names: &[SandboxName], args: &DownArgs) -> Result<i32> {
    let rows = engine.list().await?;
    let mut plan = Vec::new();
    for name in names {
        let Some(row) = rows.iter().find(|r| r.name == name.as_str()) else {
            return Err(crate::sandbox::not_found(name));
        };
        let known = |v: &str| (v != "-").then(|| v.to_owned());
        let at_stake = match row.status.as_str() {
            "orphan" => None,
            _ => engine.at_stake(name).await.unwrap_or_else(|e| {
                eprintln!(
                    "forage-ctl: warning: {}",
                    shown(&format!("what sandbox {name} holds cannot be listed: {e}"))
                );
                None
            }),
        };
        plan.push(Planned {
            name: row.name.clone(),
            container: name.container(),
            status: row.status.clone(),
            mode: known(&row.mode),
            workspace: known(&row.workspace),
            branch: row.branch.clone(),
            at_stake,
        });
    }
    if args.json {
        print_json(&plan)?;
        return Ok(0);
    }
    for p in &plan {
        if p.status == "orphan" {
            say!("would remove container {} of sandbox {} (it has no record)", p.container, p.name);
            continue;
        }
        let kind = if p.mode.as_deref() == Some("jj") { "bookmark" } else { "branch" };
        let branch = p.branch.as_deref().map(|b| format!(", {kind} {b}")).unwrap_or_default();
        say!("would remove sandbox {} (container {}{branch})", p.name, p.container);
        match (&p.at_stake, args.discard) {
            (Some(s), _) if s.is_empty() => say!("  nothing of the agent's to archive"),
            (Some(s), false) => say!("  would archive {}", s.describe()),
            (Some(s), true) => say!("  would throw away {}", s.describe()),
            (None, _) => {}
        }
    }
    Ok(0)
}
