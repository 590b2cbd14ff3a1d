//! `wait`: until an agent exits or goes idle; the exit code says which.

use std::time::Duration;

use clap::{Args, ValueEnum};

use super::Ctx;
use crate::error::Result;
use crate::names::SandboxName;
use crate::sandbox::{Until, Waited};

/// `wait`'s exit codes (docs/exit-codes.md): the agent exited; it is idle; neither in time.
pub const EXITED: i32 = 0;
pub const IDLE: i32 = 8;
pub const TIMED_OUT: i32 = 9;

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum UntilArg {
    /// The agent exits.
    Exited,
    /// The agent has printed nothing for --idle-for (it waits for input).
    Idle,
    /// Whichever comes first.
    Any,
}

#[derive(Debug, Args)]
pub struct WaitArgs {
    /// The sandboxes to watch; `wait` returns as soon as one of them qualifies.
    #[arg(required = true, add = super::complete::sandboxes())]
    pub names: Vec<SandboxName>,
    /// What to wait for.
    #[arg(long, value_enum, default_value = "any")]
    pub until: UntilArg,
    /// How long an agent must have printed nothing to count as idle.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration, default_value = "30s")]
    pub idle_for: Duration,
    /// Give up after this long (exit 9).
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub timeout: Option<Duration>,
}

pub async fn run(ctx: &Ctx, args: WaitArgs) -> Result<i32> {
    let engine = ctx.engine().await?;
    ctx.cancel_on_signals();
    let until = match args.until {
        UntilArg::Exited => Until::Exited,
        UntilArg::Idle => Until::Idle,
        UntilArg::Any => Until::Either,
    };
    let waited = engine.wait(&args.names, until, args.idle_for, args.timeout).await?;
    // Agents that went idle while `wait` waited only for an exit: the timeout
    // says they are idle, not busy.
    let idle = match (&waited, until) {
        (None, Until::Exited) => engine.idle_among(&args.names, args.idle_for).await?,
        _ => Vec::new(),
    };
    if ctx.out.json_wanted() {
        let json = match &waited {
            Some((name, w)) => {
                let mut v = serde_json::to_value(w).map_err(crate::error::Error::other)?;
                v["sandbox"] = name.to_string().into();
                v
            }
            None => {
                let idle: Vec<_> = idle
                    .iter()
                    .map(|(name, quiet_secs)| serde_json::json!({ "sandbox": name.to_string(), "quiet_secs": quiet_secs }))
                    .collect();
                serde_json::json!({ "agent": "timed-out", "idle": idle })
            }
        };
        ctx.out.json(&json)?;
    }
    Ok(match waited {
        Some((name, Waited::Exited { exit_code })) => {
            let code = exit_code.map_or("unknown".to_owned(), |c| c.to_string());
            if !ctx.out.json_wanted() {
                ctx.out.data(format!("{name}: the agent exited with code {code}"));
            }
            EXITED
        }
        Some((name, Waited::Idle { quiet_secs })) => {
            if !ctx.out.json_wanted() {
                ctx.out.data(format!("{name}: the agent is idle (nothing printed for {quiet_secs}s)"));
            }
            IDLE
        }
        None => {
            if !ctx.out.json_wanted() {
                ctx.out.data(timed_out(until, &args.names, &idle));
            }
            TIMED_OUT
        }
    })
}

/// What `wait` says when `--timeout` passed: each agent as it is, idle or
/// busy (an idle agent is only news when `wait` waited for exits alone).
fn timed_out(until: Until, names: &[SandboxName], idle: &[(SandboxName, u64)]) -> String {
    if until != Until::Exited {
        return "timed out: every agent is still busy".into();
    }
    let each: Vec<String> = names
        .iter()
        .map(|n| match idle.iter().find(|(i, _)| i == n) {
            Some((_, secs)) => format!("{n} is idle (nothing printed for {secs}s)"),
            None => format!("{n} is busy"),
        })
        .collect();
    format!("timed out: no agent exited; {}", each.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(n: &str) -> SandboxName {
        SandboxName::parse(n).unwrap()
    }

    #[test]
    fn a_timeout_calls_idle_agents_idle() {
        let (a, b) = (name("a"), name("b"));
        assert_eq!(
            timed_out(Until::Exited, &[a.clone(), b], &[(a, 42)]),
            "timed out: no agent exited; a is idle (nothing printed for 42s), b is busy"
        );
        assert_eq!(timed_out(Until::Either, &[name("a")], &[]), "timed out: every agent is still busy");
    }
}
