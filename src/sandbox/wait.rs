//! `wait`: until a sandbox's agent exits, or goes idle (has printed nothing
//! for a while: waiting for input), for scripts and for the user who started
//! five agents and wants to know which one needs them.

use std::time::{Duration, Instant, SystemTime};

use serde::{Deserialize, Serialize};

use super::Engine;
use crate::error::{Error, Result};
use crate::names::SandboxName;
use crate::record::{Record, RecordState};
use crate::runtime::{ContainerDetails, Runtime};

/// FORAGE_HOME/state/wait-reported.json: the agents `wait --next` reported.
const REPORTED: &str = "wait-reported";

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

/// What `wait --all` saw: each sandbox that qualified, in the order it did,
/// and those still busy when the timeout passed.
#[derive(Debug, Clone, Default)]
pub struct WaitedAll {
    pub done: Vec<(SandboxName, Waited)>,
    pub busy: Vec<SandboxName>,
}

/// What `wait --next` found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WaitedNext {
    /// This sandbox qualified, and no earlier `wait --next` had reported it.
    Reported(SandboxName, Waited),
    /// Every sandbox watched was reported already (or there is none).
    NoneLeft,
    TimedOut,
}

/// One sandbox as `wait --next` remembers it: its name, and when it was made,
/// so that a new sandbox of the same name is a new agent to report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct ReportedAgent {
    name: String,
    created_at: u64,
}

impl ReportedAgent {
    fn of(record: &Record) -> Self {
        ReportedAgent { name: record.name.to_string(), created_at: record.created_at }
    }
}

impl<R: Runtime> Engine<R> {
    /// The sandboxes `wait --all` and `wait --next` watch: those named, else
    /// every sandbox that is made (not being made or removed).
    fn watched(&self, names: &[SandboxName]) -> Result<Vec<Record>> {
        if !names.is_empty() {
            return names.iter().map(|n| self.record(n)).collect();
        }
        let (records, _) = self.home.load_all()?;
        let mut ready: Vec<Record> = records.into_iter().filter(|r| r.state == RecordState::Ready).collect();
        ready.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(ready)
    }

    /// Waits until the agent of every one of `names` (none: every sandbox)
    /// exits or (per `until`) goes idle, or `timeout` passes; `each` hears of
    /// every sandbox as it qualifies.
    pub async fn wait_all(
        &self,
        names: &[SandboxName],
        until: Until,
        idle_after: Duration,
        timeout: Option<Duration>,
        mut each: impl FnMut(&SandboxName, &Waited),
    ) -> Result<WaitedAll> {
        let mut pending = self.watched(names)?;
        let began = Instant::now();
        let mut out = WaitedAll::default();
        loop {
            self.cancel.check()?;
            let mut still = Vec::new();
            for record in pending {
                match self.look(&record, until, idle_after).await? {
                    Some(waited) => {
                        each(&record.name, &waited);
                        out.done.push((record.name.clone(), waited));
                    }
                    None => still.push(record),
                }
            }
            pending = still;
            if pending.is_empty() {
                return Ok(out);
            }
            if timeout.is_some_and(|t| began.elapsed() >= t) {
                out.busy = pending.into_iter().map(|r| r.name).collect();
                return Ok(out);
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Waits for the next of `names` (none: every sandbox) whose agent exits
    /// or (per `until`) goes idle and that no earlier `wait_next` reported;
    /// remembers it as reported (under FORAGE_HOME, so that a loop of
    /// `wait --next` handles each agent once, even two loops at a time).
    pub async fn wait_next(
        &self,
        names: &[SandboxName],
        until: Until,
        idle_after: Duration,
        timeout: Option<Duration>,
    ) -> Result<WaitedNext> {
        let watched = self.watched(names)?;
        let began = Instant::now();
        loop {
            self.cancel.check()?;
            let reported: Vec<ReportedAgent> = self.home.read_state(REPORTED)?;
            let left: Vec<&Record> = watched.iter().filter(|r| !reported.contains(&ReportedAgent::of(r))).collect();
            if left.is_empty() {
                return Ok(WaitedNext::NoneLeft);
            }
            for record in left {
                if let Some(waited) = self.look(record, until, idle_after).await? {
                    if self.mark_reported(record)? {
                        return Ok(WaitedNext::Reported(record.name.clone(), waited));
                    }
                }
            }
            if timeout.is_some_and(|t| began.elapsed() >= t) {
                return Ok(WaitedNext::TimedOut);
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Notes `record`'s agent as reported; false when another `wait --next`
    /// did first. Forgets the agents whose sandbox is gone, so the file stays
    /// as small as the list of sandboxes.
    fn mark_reported(&self, record: &Record) -> Result<bool> {
        let _lock = self.home.lock_state(REPORTED)?;
        let mut reported: Vec<ReportedAgent> = self.home.read_state(REPORTED)?;
        let this = ReportedAgent::of(record);
        if reported.contains(&this) {
            return Ok(false);
        }
        let (records, _) = self.home.load_all()?;
        let live: Vec<ReportedAgent> = records.iter().map(ReportedAgent::of).collect();
        reported.retain(|r| live.contains(r));
        reported.push(this);
        self.home.write_state(REPORTED, &reported)?;
        Ok(true)
    }

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
    async fn look(&self, record: &Record, until: Until, idle_after: Duration) -> Result<Option<Waited>> {
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
