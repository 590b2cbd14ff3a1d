use clap::Args;

use super::render::print_json;
use super::Ctx;
use crate::error::{Error, Result};
use crate::names::SandboxName;

#[derive(Debug, Args)]
pub struct DownArgs {
    /// The sandboxes to tear down.
    #[arg(required_unless_present = "all", conflicts_with = "all")]
    pub names: Vec<SandboxName>,
    /// Tear down every sandbox of this FORAGE_HOME.
    #[arg(long)]
    pub all: bool,
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
        engine
            .list()
            .await?
            .into_iter()
            .filter_map(|r| SandboxName::parse(&r.name).ok())
            .collect()
    } else {
        args.names
    };

    if args.dry_run {
        let mut plan = Vec::new();
        for name in &names {
            let r = engine.record(name)?;
            plan.push(serde_json::json!({
                "name": r.name, "container": r.container,
                "mode": r.workspace.mode(), "workspace": r.workspace.host_path(),
            }));
        }
        if args.json {
            print_json(&plan)?;
        } else {
            for p in &plan {
                println!(
                    "would remove sandbox {} (container {})",
                    p["name"].as_str().unwrap_or(""),
                    p["container"].as_str().unwrap_or("")
                );
            }
        }
        return Ok(0);
    }

    let mut reports = Vec::new();
    let mut first_error: Option<Error> = None;
    for name in &names {
        match engine.down(name).await {
            Ok(report) => {
                if !ctx.quiet && !args.json {
                    progress.finish();
                    match &report.workspace {
                        Some(ws) => println!(
                            "removed sandbox {name} (container {}); {ws} left as it was",
                            report.container
                        ),
                        None => {
                            println!("removed container {} of sandbox {name}", report.container)
                        }
                    }
                }
                reports.push(report);
            }
            Err(e) => {
                progress.finish();
                eprintln!("forage-ctl: error: {e}");
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
