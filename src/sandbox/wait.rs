//! `wait`: until a sandbox's agent exits, or goes idle (has printed nothing
//! for a while: waiting for input), for scripts and for the user who started
//! five agents and wants to know which one needs them.

use std::time::{Duration, Instant, SystemTime};

use serde::Serialize;

use super::Engine;
use crate::error::{Error, Result};
use crate::names::SandboxName;
use crate::runtime::{ContainerDetails, Runtime};

/// How often `wait` looks at the agent.
const POLL: Duration = Duration::from_millis(500);

/// What `wait` waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Until {
    Exited,
    Idle,
    /// Whichever comes first.
    Either,
}

/// What a `wait` saw of an agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "agent", rename_all = "kebab-case")]
pub enum Waited {
    /// The agent exited (or never started), with this code.
    Exited { exit_code: Option<i64> },
    /// It has printed nothing for `quiet_secs` seconds.
    Idle { quiet_secs: u64 },
}

impl<R: Runtime> Engine<R> {
    /// Waits until the agent of one of `names` exits or (per `until`) has
    /// printed nothing for `idle_after`, or `timeout` passes; says which
    /// sandbox it was. An agent that exited is reported at once, whatever was
    /// asked (it cannot go idle any more).
    pub async fn wait(
        &self,
        names: &[SandboxName],
        until: Until,
        idle_after: Duration,
        timeout: Option<Duration>,
    ) -> Result<Option<(SandboxName, Waited)>> {
        let records = names.iter().map(|n| self.record(n)).collect::<Result<Vec<_>>>()?;
        let began = Instant::now();
        loop {
            self.cancel.check()?;
            for record in &records {
                if let Some(waited) = self.look(record, until, idle_after).await? {
                    return Ok(Some((record.name.clone(), waited)));
                }
            }
            if timeout.is_some_and(|t| began.elapsed() >= t) {
                return Ok(None);
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Of `names`, the running agents that have printed nothing for
    /// `idle_after`, with how many seconds they have been quiet: what a `wait
    /// --until exited` that timed out says of them (idle, not busy).
    pub async fn idle_among(&self, names: &[SandboxName], idle_after: Duration) -> Result<Vec<(SandboxName, u64)>> {
        let mut idle = Vec::new();
        for name in names {
            let record = self.record(name)?;
            if let Some(Waited::Idle { quiet_secs }) = self.look(&record, Until::Idle, idle_after).await? {
                idle.push((name.clone(), quiet_secs));
            }
        }
        Ok(idle)
    }

    /// Whether the agent of `record` exited, or is idle (when asked).
    async fn look(&self, record: &crate::record::Record, until: Until, idle_after: Duration) -> Result<Option<Waited>> {
        let name = &record.name;
        let container = self.runtime.inspect(&record.container).await?.ok_or_else(|| {
            Error::not_found(format!("sandbox {name}'s container {} is gone", record.container))
                .hint_run("{command} makes a new one", ["reset", name.as_str()])
        })?;
        if container.state.has_ended() || container.state == crate::runtime::ContainerState::Created {
            return Ok(Some(Waited::Exited { exit_code: container.exit_code }));
        }
        if until != Until::Exited {
            let quiet = self.quiet_for(&record.container, &container).await?;
            if quiet >= idle_after {
                return Ok(Some(Waited::Idle { quiet_secs: quiet.as_secs() }));
            }
        }
        Ok(None)
    }

    /// How long the agent has printed nothing: since its last output, or
    /// since it started when it printed nothing yet.
    pub(crate) async fn quiet_for(&self, container: &str, details: &ContainerDetails) -> Result<Duration> {
        let started =
            details.started_at.as_deref().and_then(|t| humantime::parse_rfc3339_weak(t.trim_end_matches('Z')).ok());
        let last = self.runtime.last_output(container).await?;
        let since = match (last, started) {
            (Some(l), Some(s)) => l.max(s),
            (Some(t), None) | (None, Some(t)) => t,
            (None, None) => return Ok(Duration::ZERO),
        };
        Ok(SystemTime::now().duration_since(since).unwrap_or(Duration::ZERO))
    }
}
