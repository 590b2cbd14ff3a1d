//! Lifecycle of an existing sandbox: start, stop, restart, and bringing archived
//! work back. The workspace is never touched here.

use super::Engine;
use crate::error::{Error, Result};
use crate::names::SandboxName;
use crate::runtime::Runtime;
use crate::store::{ArchiveEntry, Record, RecordState};
use crate::workspace::{git, Mode};

impl<R: Runtime> Engine<'_, R> {
    /// The archive to restore: the one named (by ref or timestamp), else the newest.
    pub fn find_archive(&self, name: &SandboxName, wanted: Option<&str>) -> Result<ArchiveEntry> {
        let all = self.home.archives(name)?;
        let found = match wanted {
            Some(w) => all.into_iter().rev().find(|a| a.refname == w || a.refname.ends_with(&format!("/{w}"))),
            None => all.into_iter().next_back(),
        };
        found.ok_or_else(|| {
            Error::NotFound(match wanted {
                Some(w) => {
                    format!("sandbox {name} has no archive {w:?}; FORAGE_HOME/archives/{name}.json lists its archives")
                }
                None => format!(
                    "sandbox {name} has no archived work (down archives only work that would otherwise be lost)"
                ),
            })
        })
    }

    /// Brings archived work back as a branch (default `forage-<name>`) at the
    /// archive commit; uncommitted files come back as that commit's changes.
    pub async fn restore_branch(&self, entry: &ArchiveEntry, branch: &str) -> Result<()> {
        let _repo = self.lock_repo(&entry.common_dir).await?;
        match entry.mode {
            Mode::Jj => crate::workspace::jj::restore_bookmark(&entry.repo, &entry.commit, branch),
            _ => git::restore_branch(&entry.common_dir, &entry.commit, branch),
        }
    }

    pub async fn start(&self, name: &SandboxName) -> Result<()> {
        let _lock = self.lock_sandbox(name).await?;
        let record = self.ready_record(name).await?;
        if let Err(e) = self.start_agent(&record).await {
            // The agent's launcher would wait for init forever: stop it instead.
            self.runtime.stop(&record.container, record.stop_timeout).await?;
            return Err(e);
        }
        Ok(())
    }

    pub async fn stop(&self, name: &SandboxName) -> Result<()> {
        let _lock = self.lock_sandbox(name).await?;
        let record = self.ready_record(name).await?;
        self.runtime.stop(&record.container, record.stop_timeout).await
    }

    pub async fn restart(&self, name: &SandboxName) -> Result<()> {
        self.stop(name).await?;
        self.start(name).await
    }

    /// The record of a sandbox whose agent is running, for `attach`: one that
    /// exited says so, with its exit code, rather than attach to nothing.
    pub async fn attachable(&self, name: &SandboxName) -> Result<Record> {
        let record = self.record(name)?;
        match self.runtime.inspect(&record.container).await? {
            Some(c) if c.state == "running" => Ok(record),
            Some(c) => Err(Error::Conflict(format!(
                "the agent of sandbox {name} is not running ({}{}); `forage-ctl logs {name}` shows its output, `forage-ctl start {name}` starts it again",
                c.state,
                c.exit_code.filter(|_| matches!(c.state.as_str(), "exited" | "dead")).map(|code| format!(", exit code {code}")).unwrap_or_default()
            ))),
            None => Err(Error::NotFound(format!(
                "the container of sandbox {name} ({}) is gone; `forage-ctl reset {name}` makes a new one",
                record.container
            ))),
        }
    }

    async fn ready_record(&self, name: &SandboxName) -> Result<Record> {
        let record = self.record(name)?;
        if record.state != RecordState::Ready {
            return Err(Error::Conflict(format!(
                "sandbox {name} is half made or half removed; finish with `forage-ctl down {name}`"
            )));
        }
        if self.runtime.inspect(&record.container).await?.is_none() {
            return Err(Error::NotFound(format!(
                "the container of sandbox {name} ({}) is gone; make a new one with `forage-ctl reset {name}`, or remove the sandbox with `forage-ctl down {name}`",
                record.container
            )));
        }
        Ok(record)
    }
}
