//! The sandbox lifecycle: the only place that knows in which order things happen.
//! Requests are checked first (`request`), then carried out as journaled steps
//! rolled back on failure (`up`); `down` stops the container before it touches
//! the workspace (`down`); `sync`, `query`, `lifecycle`, `reset` and `gc` act on
//! sandboxes that exist. What each workspace mode does is the `Workspace`
//! trait's: nothing here matches on modes.

mod agent_state;
mod archives;
mod checkout;
mod cow_choice;
mod down;
mod egress;
pub mod gc;
pub mod journal;
pub mod launcher;
mod lifecycle;
mod pins;
mod plan;
mod ports;
mod query;
mod request;
mod reset;
mod review;
mod secrets;
mod sync;
#[cfg(test)]
mod tests;
mod up;
mod update;
mod wait;

pub use archives::{restore_args, PruneOutcome, Pruned};
pub use checkout::CheckedOut;
pub(crate) use down::Teardown;
pub use down::{DownOptions, DownReport, PlannedDown};
pub use lifecycle::Restored;
pub use plan::{ContainerPlan, SecretFile, UpOptions};
pub use ports::PortChange;
pub use query::{not_found, Activity, SandboxRow, SandboxState, SandboxStatus, IDLE_AFTER};
pub use request::{HostUncommitted, TaskSpec, UpRequest, UpSpec, WorkspaceSpec};
pub use review::{Applied, DiffPart, DiffReport, LogReport, MergeRequest};
pub use update::Updated;
pub use wait::{Until, Waited, WaitedAll, WaitedNext};

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::env::Settings;
use crate::error::{Error, Result};
use crate::names::SandboxName;
use crate::progress::Progress;
use crate::record::{Record, Step};
use crate::runtime::{Identity, Runtime};
use crate::store::Home;
use crate::template::Templates;

/// Set by the CLI's signal handlers; `up` checks it between steps and rolls back.
/// Steps are never cut off half way, so an undo never races its own effect.
#[derive(Debug, Clone, Default)]
pub struct Cancel(Arc<AtomicBool>);

impl Cancel {
    pub fn trigger(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    /// Returns once the user interrupted.
    pub async fn triggered(&self) {
        while !self.is_triggered() {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }

    pub fn is_triggered(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }

    pub(crate) fn check(&self) -> Result<()> {
        if self.0.load(Ordering::SeqCst) {
            Err(Error::other("interrupted"))
        } else {
            Ok(())
        }
    }
}

/// Everything a request needs, owned: a server holds one per process (or per
/// FORAGE_HOME) and clones it per request; the CLI makes one per command.
pub struct Engine<R: Runtime> {
    pub home: Home,
    pub runtime: Arc<R>,
    pub progress: Arc<dyn Progress>,
    pub cancel: Cancel,
    /// The environment of the request (templates, tools, debug hooks).
    pub settings: Arc<Settings>,
    /// Who the agent runs as: the user the request comes from.
    pub identity: Identity,
}

impl<R: Runtime> Clone for Engine<R> {
    fn clone(&self) -> Self {
        Engine {
            home: self.home.clone(),
            runtime: self.runtime.clone(),
            progress: self.progress.clone(),
            cancel: self.cancel.clone(),
            settings: self.settings.clone(),
            identity: self.identity,
        }
    }
}

impl<R: Runtime> Engine<R> {
    /// The templates this request sees (warning of the directories it ignores).
    pub fn templates(&self) -> Templates {
        let templates = Templates::new(&self.settings);
        for warning in templates.warnings() {
            self.progress.warn(&warning);
        }
        templates
    }
}

/// Runs blocking work (git2, jj, the file system) on the runtime's blocking
/// pool, so that signals, progress and other requests keep flowing meanwhile.
pub(crate) async fn blocking<T: Send + 'static>(work: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(work).await.map_err(|e| Error::other(format!("a background task failed: {e}")))?
}

pub(crate) fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// Now, as (seconds, nanoseconds) since the epoch, less two seconds: file times
/// come from the kernel's coarse clock (and from whole seconds on some file
/// systems), so a file written just after this moment may carry an older time.
/// Comparing with this errs on the side of reading the file again.
pub(crate) fn now_precise() -> (i64, i64) {
    let d = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    (d.as_secs() as i64 - 2, d.subsec_nanos() as i64)
}

impl<R: Runtime> Engine<R> {
    /// Called after each step of `up`: stops for a pending Ctrl-C/SIGTERM, and hosts
    /// the fault-injection hooks the crash tests use (docs/guarantees.md):
    /// `FORAGE_DEBUG_KILL_AFTER=<step>` kills this process with SIGKILL right after
    /// that step; `FORAGE_DEBUG_PAUSE_AFTER=<step>` waits there (up to 60 s, or until
    /// a signal arrives) so a test can interrupt `up` at a known point.
    async fn checkpoint(&self, step: &str) -> Result<()> {
        self.kill_point(step);
        if self.settings.debug_pause_after.as_deref() == Some(step) {
            self.progress.warn(&format!("forage-debug: paused after {step}"));
            for _ in 0..600 {
                if self.cancel.is_triggered() {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        }
        self.cancel.check()
    }

    /// The error of an `up` whose rollback succeeded. An interruption says that
    /// nothing was left, since the user chose to stop and will wonder; other errors
    /// speak for themselves.
    fn rolled_back(&self, err: Error) -> Error {
        if self.cancel.is_triggered() {
            err.with_note("everything this command had created was removed")
        } else {
            err
        }
    }

    /// Takes sandbox `name`'s lock, waiting (and saying so) while another
    /// forage-ctl holds it, and giving up at Ctrl-C: a blocking wait would keep
    /// this single-threaded runtime from ever seeing the signal.
    pub(crate) async fn lock_sandbox(&self, name: &SandboxName) -> Result<crate::store::Lock> {
        let what = format!("sandbox {name}");
        self.wait_for_lock(&what, || self.home.try_lock_sandbox(name)).await
    }

    /// The same for a repository's lock.
    pub(crate) async fn lock_repo(&self, repo: &std::path::Path) -> Result<crate::store::Lock> {
        let what = format!("the repository {}", repo.display());
        self.wait_for_lock(&what, || self.home.try_lock_repo(repo)).await
    }

    async fn wait_for_lock(
        &self,
        what: &str,
        try_take: impl Fn() -> Result<Option<crate::store::Lock>>,
    ) -> Result<crate::store::Lock> {
        let mut said = false;
        loop {
            if let Some(lock) = try_take()? {
                return Ok(lock);
            }
            if !said {
                self.progress.note(&format!("waiting for {what}: another forage-ctl is changing it (Ctrl-C gives up)"));
                said = true;
            }
            if self.cancel.is_triggered() {
                return Err(Error::other(format!("interrupted while waiting for {what}")));
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }

    /// `FORAGE_DEBUG_KILL_AFTER=<step>` kills this process with SIGKILL right after
    /// that step of `up` (see `checkpoint`) or of a teardown (`down`, `gc --force`,
    /// a rollback): `removed-container`, `archived`, `removed-workspace`.
    fn kill_point(&self, step: &str) {
        if self.settings.debug_kill_after.as_deref() == Some(step) {
            tracing::warn!("FORAGE_DEBUG_KILL_AFTER={step}: killing forage-ctl");
            let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
        }
    }

    /// Reports a step to the user (progress) and to the log (-v).
    fn step(&self, message: &str) {
        tracing::info!("{message}");
        self.progress.step(message);
    }

    fn begin(&self, record: &mut Record, step: Step) -> Result<()> {
        record.journal.push(step);
        self.home.save(record)
    }
}

/// Fails with `Conflict` if a sandbox of this name exists. `up` checks this first,
/// before validating its workspace, so that the message is about the name; and
/// again under the sandbox lock, where it counts.
pub fn ensure_name_free(home: &Home, name: &SandboxName) -> Result<()> {
    if home.record_exists(name) {
        return Err(crate::store::already_exists(name));
    }
    Ok(())
}

/// `20261121T080203Z`: sortable, and valid in a git ref name.
pub(crate) fn timestamp() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now()).to_string().replace(['-', ':'], "")
}
