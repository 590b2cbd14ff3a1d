//! `wait`: until an agent exits or goes idle; the exit code says which.
//! `--all` waits for every one; `--next` for the next one not yet reported,
//! so that `while n=$(forage-ctl wait --next); do …; done` sees each agent once.

use std::time::Duration;

use clap::{Args, ValueEnum};

use super::Ctx;
use crate::error::{Error, Result};
use crate::names::SandboxName;
use crate::runtime::docker::Docker;
use crate::sandbox::{Engine, Until, Waited, WaitedNext};

/// `wait`'s exit codes (docs/exit-codes.md): the agent exited; it is idle;
/// neither in time; (`--next`) every agent was reported already.
pub const EXITED: i32 = 0;
pub const IDLE: i32 = 8;
pub const TIMED_OUT: i32 = 9;
pub const NONE_LEFT: i32 = 10;

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
    /// With --all or --next, every sandbox when none is named.
    #[arg(required_unless_present_any = ["all", "next"], add = super::complete::sandboxes())]
    pub names: Vec<SandboxName>,
    /// Wait until every one of them has exited or gone idle (exit 0: all
    /// exited; 8: all done, some idle; 9: timed out).
    #[arg(long, conflicts_with = "next")]
    pub all: bool,
    /// Wait for the next one that no earlier `wait --next` reported, and print
    /// its name (exit 0, whether it exited or is idle; 10: every one was
    /// reported already; 9: timed out).
    #[arg(long)]
    pub next: bool,
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
    if args.all {
        return all(ctx, &engine, &args, until).await;
    }
    if args.next {
        return next(ctx, &engine, &args, until).await;
    }
    let waited = engine.wait(&args.names, until, args.idle_for, args.timeout).await?;
    // Agents that went idle while `wait` waited only for an exit: the timeout
    // says they are idle, not busy.
    let idle = match (&waited, until) {
        (None, Until::Exited) => engine.idle_among(&args.names, args.idle_for).await?,
        _ => Vec::new(),
    };
    if ctx.out.json_wanted() {
        let json = match &waited {
            Some((name, w)) => as_json(name, w)?,
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
        Some((name, w)) => {
            if !ctx.out.json_wanted() {
                ctx.out.data(line(&name, &w));
            }
            code(&w)
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

/// `--all`: a line for each sandbox as it qualifies; with `--json`, one
/// object at the end (`done`, and `busy`: those still busy at the timeout).
async fn all(ctx: &Ctx, engine: &Engine<Docker>, args: &WaitArgs, until: Until) -> Result<i32> {
    let json = ctx.out.json_wanted();
    let waited = engine
        .wait_all(&args.names, until, args.idle_for, args.timeout, |name, w| {
            if !json {
                ctx.out.data(line(name, w));
            }
        })
        .await?;
    if json {
        let done = waited.done.iter().map(|(n, w)| as_json(n, w)).collect::<Result<Vec<_>>>()?;
        let busy: Vec<String> = waited.busy.iter().map(ToString::to_string).collect();
        ctx.out.json(&serde_json::json!({ "done": done, "busy": busy }))?;
    } else if !waited.busy.is_empty() {
        let busy: Vec<String> = waited.busy.iter().map(ToString::to_string).collect();
        ctx.out.data(format!("timed out: still busy: {}", busy.join(", ")));
    } else if waited.done.is_empty() {
        ctx.out.status("no sandbox to wait for");
    }
    Ok(if !waited.busy.is_empty() {
        TIMED_OUT
    } else if waited.done.iter().any(|(_, w)| matches!(w, Waited::Idle { .. })) {
        IDLE
    } else {
        EXITED
    })
}

/// `--next`: the sandbox's name alone on stdout (what it did on stderr), so
/// that `n=$(forage-ctl wait --next)` is the name.
async fn next(ctx: &Ctx, engine: &Engine<Docker>, args: &WaitArgs, until: Until) -> Result<i32> {
    let waited = engine.wait_next(&args.names, until, args.idle_for, args.timeout).await?;
    let json = ctx.out.json_wanted();
    match waited {
        WaitedNext::Reported(name, w) => {
            if json {
                ctx.out.json(&as_json(&name, &w)?)?;
            } else {
                ctx.out.data(name.as_str());
                ctx.out.status(line(&name, &w));
            }
            Ok(EXITED)
        }
        WaitedNext::NoneLeft => {
            if json {
                ctx.out.json(&serde_json::json!({ "agent": "none-left" }))?;
            } else {
                ctx.out.status("every agent was reported already by an earlier `wait --next`");
            }
            Ok(NONE_LEFT)
        }
        WaitedNext::TimedOut => {
            if json {
                ctx.out.json(&serde_json::json!({ "agent": "timed-out" }))?;
            } else {
                ctx.out.status("timed out: every agent not yet reported is still busy");
            }
            Ok(TIMED_OUT)
        }
    }
}

fn as_json(name: &SandboxName, w: &Waited) -> Result<serde_json::Value> {
    let mut v = serde_json::to_value(w).map_err(Error::other)?;
    v["sandbox"] = name.to_string().into();
    Ok(v)
}

fn line(name: &SandboxName, w: &Waited) -> String {
    match w {
        Waited::Exited { exit_code } => {
            let code = exit_code.map_or("unknown".to_owned(), |c| c.to_string());
            format!("{name}: the agent exited with code {code}")
        }
        Waited::Idle { quiet_secs } => format!("{name}: the agent is idle (nothing printed for {quiet_secs}s)"),
    }
}

fn code(w: &Waited) -> i32 {
    match w {
        Waited::Exited { .. } => EXITED,
        Waited::Idle { .. } => IDLE,
    }
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
