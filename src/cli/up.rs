use std::path::PathBuf;

use clap::Args;

use super::Ctx;
use crate::error::Result;
use crate::names::SandboxName;
use crate::sandbox::{Cancel, Engine, UpRequest};
use crate::template::{self, Network, DEFAULT_TEMPLATE};
use crate::workspace::{direct::DirectPath, WorkspaceRequest};

#[derive(Debug, Args)]
pub struct UpArgs {
    /// The sandbox's name: lowercase letters, digits, '_', '.', '-'.
    pub name: SandboxName,
    /// The template to run (see `forage-ctl templates`).
    #[arg(short, long, default_value = DEFAULT_TEMPLATE)]
    pub template: String,
    /// Mount this directory as /workspace, read-write, as it is (no isolation).
    #[arg(long, value_name = "PATH", required = true)]
    pub workspace: PathBuf,
    /// Use this image instead of the template's.
    #[arg(long)]
    pub image: Option<String>,
    /// An extra environment variable for the agent (repeatable).
    #[arg(long = "env", value_name = "KEY=VALUE", value_parser = parse_env)]
    pub env: Vec<(String, String)>,
    /// Network access: full, or none.
    #[arg(long, value_enum)]
    pub network: Option<Network>,
    /// Memory limit, e.g. 2g.
    #[arg(long)]
    pub memory: Option<String>,
    /// CPU limit in cores, e.g. 1.5.
    #[arg(long)]
    pub cpus: Option<f64>,
    /// Mount the workspace read-only.
    #[arg(long)]
    pub read_only: bool,
    /// Create everything but do not start the container.
    #[arg(long)]
    pub no_start: bool,
    /// Arguments appended to the template's agent command.
    #[arg(last = true)]
    pub agent_args: Vec<String>,
}

fn parse_env(raw: &str) -> Result<(String, String), String> {
    match raw.split_once('=') {
        Some((k, v)) if !k.is_empty() && !k.contains(char::is_whitespace) => {
            Ok((k.into(), v.into()))
        }
        _ => Err(format!("invalid --env {raw:?}: use KEY=VALUE")),
    }
}

pub async fn run(ctx: &Ctx, args: UpArgs) -> Result<i32> {
    // Everything that can be checked without Docker is checked first.
    let workspace = WorkspaceRequest::Direct(DirectPath::validate(&args.workspace)?);
    let template = template::resolve(&args.template)?;
    if let Some(memory) = &args.memory {
        template::parse_memory(memory).map_err(crate::error::Error::Usage)?;
    }
    let docker = ctx.docker().await?;
    let progress = ctx.progress();
    let cancel = Cancel::default();
    spawn_signal_handlers(cancel.clone());
    let engine = Engine {
        home: ctx.home.clone(),
        runtime: &docker,
        progress: progress.as_ref(),
        cancel,
    };
    let request = UpRequest {
        name: args.name,
        template,
        workspace,
        image: args.image,
        env: args.env,
        network: args.network,
        memory: args.memory,
        cpus: args.cpus,
        read_only: args.read_only,
        start: !args.no_start,
        agent_args: args.agent_args,
    };
    let record = engine.up(request).await?;
    progress.finish();
    if !ctx.quiet {
        let n = &record.name;
        println!(
            "sandbox {n} is {}: container {}, workspace {} ({})",
            if args.no_start { "created" } else { "up" },
            record.container,
            record.workspace.host_path().display(),
            record.workspace.mode()
        );
        println!("  attach: forage-ctl attach {n}   shell: forage-ctl shell {n}   remove: forage-ctl down {n}");
    }
    Ok(0)
}

/// Ctrl-C and SIGTERM ask `up` to stop after its current step and roll back.
fn spawn_signal_handlers(cancel: Cancel) {
    use tokio::signal::unix::{signal, SignalKind};
    for kind in [
        SignalKind::interrupt(),
        SignalKind::terminate(),
        SignalKind::hangup(),
    ] {
        let cancel = cancel.clone();
        if let Ok(mut sig) = signal(kind) {
            tokio::spawn(async move {
                if sig.recv().await.is_some() {
                    cancel.trigger();
                }
            });
        }
    }
}
