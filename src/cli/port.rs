//! `port NAME [add|rm [HOSTPORT:]PORT]`: what a sandbox publishes on the
//! host's 127.0.0.1, and changes to it on a running sandbox (its forwarder
//! is replaced; its container is not).

use clap::{Args, Subcommand};

use super::{complete, Ctx};
use crate::error::Result;
use crate::names::SandboxName;
use crate::ports::{PortSpec, Published};
use crate::sandbox::PortChange;

#[derive(Debug, Args)]
pub struct PortArgs {
    /// The sandbox.
    #[arg(add = complete::sandboxes())]
    pub name: SandboxName,
    #[command(subcommand)]
    pub change: Option<Change>,
}

#[derive(Debug, Subcommand)]
pub enum Change {
    /// Publish the sandbox's PORT at 127.0.0.1:HOSTPORT (else a free port).
    #[command(after_help = "Example: forage-ctl port agent-a add 3000")]
    Add {
        #[arg(value_name = "[HOSTPORT:]PORT")]
        port: PortSpec,
    },
    /// Stop publishing the sandbox's PORT.
    #[command(after_help = "Example: forage-ctl port agent-a rm 3000")]
    Rm {
        #[arg(value_name = "[HOSTPORT:]PORT")]
        port: PortSpec,
    },
}

pub async fn run(ctx: &Ctx, args: PortArgs) -> Result<i32> {
    let engine = ctx.engine().await?;
    let record = match args.change {
        None => engine.record(&args.name)?,
        Some(change) => {
            ctx.cancel_on_signals();
            let change = match change {
                Change::Add { port } => PortChange::Add(port),
                Change::Rm { port } => PortChange::Remove(port),
            };
            let record = engine.change_ports(&args.name, change).await?;
            engine.progress.finish();
            record
        }
    };
    let (ports, unpublished) = (&record.ports, &record.unpublished);
    if ctx.out.json_wanted() {
        let json = serde_json::json!({ "sandbox": args.name.as_str(), "ports": ports, "unpublished": unpublished });
        ctx.out.json(&json)?;
        return Ok(0);
    }
    if ports.is_empty() && unpublished.is_empty() {
        ctx.out.data(format!("sandbox {} publishes no port", args.name));
    }
    for p in ports {
        ctx.out.data(line(p));
    }
    for p in unpublished {
        ctx.out.data(waiting(p));
    }
    Ok(0)
}

/// `3000 -> a free port of 127.0.0.1 when the sandbox starts`: a port of a
/// `full` sandbox asked for while it was not running.
pub fn waiting(p: &PortSpec) -> String {
    match p.host {
        Some(h) => format!("{} -> 127.0.0.1:{h} when the sandbox starts", p.port),
        None => format!("{} -> a free port of 127.0.0.1 when the sandbox starts", p.port),
    }
}

/// `3000 -> 127.0.0.1:49153`: the sandbox's port, and where the host reaches it.
fn line(p: &Published) -> String {
    format!("{} -> 127.0.0.1:{}", p.port, p.host_port)
}
