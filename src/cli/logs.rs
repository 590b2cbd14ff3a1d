use clap::Args;

use super::{terminal, Ctx};
use crate::error::Result;
use crate::names::SandboxName;

#[derive(Debug, Args)]
pub struct LogsArgs {
    #[arg(add = super::complete::sandboxes())]
    pub name: SandboxName,
    /// Keep printing new output until the agent exits.
    #[arg(short, long)]
    pub follow: bool,
    /// Only the last N lines.
    #[arg(short = 'n', long = "tail", value_name = "N")]
    pub tail: Option<u64>,
    /// Instead of the agent's output: the destinations a `network: restricted`
    /// sandbox tried, allowed and denied, with counts and first/last times.
    #[arg(long, conflicts_with_all = ["follow", "tail"])]
    pub network: bool,
}

pub async fn run(ctx: &Ctx, args: LogsArgs) -> Result<i32> {
    if args.network {
        return network(ctx, &args.name).await;
    }
    ctx.no_json("logs", "prints the agent's output as it is")?;
    let engine = ctx.engine().await?;
    let record = engine.record(&args.name)?;
    // The agent's output, as it is, is all that reaches the terminal now.
    engine.progress.hand_over();
    terminal::pump_output(engine.logs(&record, args.follow, args.tail)).await?;
    Ok(0)
}

/// `logs --network`: the proxy's decisions for the sandbox, per destination.
async fn network(ctx: &Ctx, name: &SandboxName) -> Result<i32> {
    let engine = ctx.engine().await?;
    let destinations = engine.network_log(name)?;
    if ctx.out.json_wanted() {
        ctx.out.json(&destinations)?;
        return Ok(0);
    }
    if destinations.is_empty() {
        ctx.out.status(format!("sandbox {name} has tried to reach nothing through its egress proxy yet"));
        return Ok(0);
    }
    let time = |t: u64| {
        humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + std::time::Duration::from_secs(t)).to_string()
    };
    ctx.out
        .data(format!("{:<8} {:<40} {:>6}  {:<20}  {:<20}  WHY", "DECISION", "DESTINATION", "COUNT", "FIRST", "LAST"));
    for d in &destinations {
        let decision = if d.allowed { "allowed" } else { "denied" };
        // The host and the reason hold what the agent sent (a TLS server
        // name is any UTF-8): escaped, so it cannot drive the user's terminal.
        let destination = format!("{}:{}", super::render::shown(&d.host), d.port);
        ctx.out.data(format!(
            "{decision:<8} {destination:<40} {:>6}  {:<20}  {:<20}  {}",
            d.count,
            time(d.first),
            time(d.last),
            super::render::shown(d.reason.as_deref().unwrap_or(""))
        ));
    }
    Ok(0)
}
