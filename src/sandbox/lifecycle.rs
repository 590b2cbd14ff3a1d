//! Lifecycle of an existing sandbox: start, stop, restart; attaching to it
//! (exec, attach, logs, as streams the caller connects); and bringing archived
//! work back. The workspace is never touched here.

use serde::Serialize;

use super::Engine;
use crate::error::{Error, Result};
use crate::names::SandboxName;
use crate::record::{ArchiveEntry, Record, RecordState};
use crate::runtime::{ContainerState, ExecOptions, OutputStream, Runtime, Session, SessionId};
use crate::workspace::{git, Mode};

/// What `restore` brought back.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "restored", rename_all = "kebab-case")]
pub enum Restored {
    /// The archive as a branch (git) or bookmark (jj) of its repository.
    Branch {
        archive: ArchiveEntry,
        branch: String,
        /// The other archives of the same `down`, not restored.
        also_archived: Vec<ArchiveEntry>,
    },
    /// And a sandbox on it, with what the user should know of the project's
    /// toolchain (as `up` warns).
    Sandbox {
        archive: ArchiveEntry,
        record: Box<Record>,
        also_archived: Vec<ArchiveEntry>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        warnings: Vec<String>,
    },
}

impl<R: Runtime> Engine<R> {
    /// The archive to restore: the one named (by ref or timestamp), else the newest.
    pub fn find_archive(&self, name: &SandboxName, wanted: Option<&str>) -> Result<ArchiveEntry> {
        let all = self.home.archives(name)?;
        let found = match wanted {
            Some(w) => all.into_iter().rev().find(|a| a.refname == w || a.refname.ends_with(&format!("/{w}"))),
            None => all.into_iter().next_back(),
        };
        found.ok_or_else(|| {
            Error::not_found(match wanted {
                Some(w) => {
                    format!("sandbox {name} has no archive {w:?}; FORAGE_HOME/archives/{name}.json lists its archives")
                }
                None => format!(
                    "sandbox {name} has no archived work (down archives only work that would otherwise be lost)"
                ),
            })
        })
    }

    /// Brings archived work back: as a branch (default `forage-<name>`; jj: a
    /// bookmark, default `forage/<name>`) at the archive commit, or with `up`
    /// as a sandbox on it, given the `secrets` (`NAME=FILE`) its template needs.
    pub async fn restore(
        &self,
        name: &SandboxName,
        archive: Option<&str>,
        branch: Option<&str>,
        up: bool,
        secrets: &[String],
    ) -> Result<Restored> {
        let entry = self.find_archive(name, archive)?;
        if entry.mode == Mode::Jj && up && branch.is_some() {
            return Err(Error::usage("--branch with --up is for git; a jj sandbox's bookmark is always forage/NAME"));
        }
        let branch = branch
            .map(str::to_owned)
            .unwrap_or_else(|| super::archives::restore_name(name, entry.mode, &entry.refname));
        let also_archived = self.archived_with(&entry)?;
        if !up {
            self.restore_branch(&entry, &branch).await?;
            return Ok(Restored::Branch { archive: entry, branch, also_archived });
        }
        let request = self.prepare_restore_up(name.clone(), &entry, &branch, secrets)?;
        let warnings = request.warnings.clone();
        let record = self.up(request).await?;
        Ok(Restored::Sandbox { archive: entry, record: Box::new(record), also_archived, warnings })
    }

    /// Brings archived work back as a branch at the archive commit (the one
    /// `down` recorded, whatever the archive ref points to now); uncommitted files
    /// come back as that commit's changes.
    async fn restore_branch(&self, entry: &ArchiveEntry, branch: &str) -> Result<()> {
        let _repo = self.lock_repo(&entry.common_dir).await?;
        let (entry, branch) = (entry.clone(), branch.to_owned());
        super::blocking(move || match entry.mode {
            Mode::Jj => crate::workspace::jj::restore_bookmark(&entry.repo, &entry.commit, &branch),
            _ => git::restore_branch(&entry.common_dir, &entry.commit, &branch),
        })
        .await
    }

    pub async fn start(&self, name: &SandboxName) -> Result<()> {
        let _lock = self.lock_sandbox(name).await?;
        let (mut record, mounts) = self.ready_record(name).await?;
        self.step(&format!("starting {name}"));
        if let Err(e) = self.start_agent(&record, &mounts).await {
            // The agent's launcher would wait for init forever: stop it instead.
            self.runtime.stop(&record.container, record.stop_timeout).await?;
            return Err(e);
        }
        self.refresh_ports(&mut record).await
    }

    pub async fn stop(&self, name: &SandboxName) -> Result<()> {
        let _lock = self.lock_sandbox(name).await?;
        let (record, _) = self.ready_record(name).await?;
        self.step(&format!("stopping {name}"));
        self.runtime.stop(&record.container, record.stop_timeout).await?;
        // The engine cannot tell a stop from an agent that exited by itself.
        let mut record = Record { stopped_at: Some(super::now()), ..record };
        self.hold_ports(&mut record).await?;
        self.home.save(&record)
    }

    pub async fn restart(&self, name: &SandboxName) -> Result<()> {
        self.stop(name).await?;
        self.start(name).await
    }

    /// Starts `command` in the sandbox's running container, as the user; with
    /// `tty`, on a terminal of `size` (rows, columns) when it is known.
    pub async fn exec(
        &self,
        name: &SandboxName,
        command: Vec<String>,
        stdin: bool,
        tty: bool,
        size: Option<(u16, u16)>,
    ) -> Result<Session> {
        let record = self.record(name)?;
        let options = ExecOptions { stdin, tty, size, identity: self.identity };
        self.runtime.exec(&record.container, command, options).await
    }

    /// Attaches to the agent. One that exited says so, with its exit code,
    /// rather than attach to nothing.
    pub async fn attach(&self, name: &SandboxName) -> Result<Session> {
        let record = self.record(name)?;
        match self.runtime.inspect(&record.container).await? {
            Some(c) if c.state == ContainerState::Running => self.runtime.attach(&record.container).await,
            Some(c) => Err(Error::conflict(format!(
                "the agent of sandbox {name} is not running ({})",
                match c.exit_code.filter(|_| c.state.has_ended()) {
                    _ if c.state.has_ended() && record.stopped_at.is_some() => "stopped by `forage-ctl stop`".into(),
                    Some(code) => format!("{}, exit code {code}", c.state),
                    None => c.state.to_string(),
                }
            ))
            .hint_run("{command} shows its output", ["logs", name.as_str()])
            .hint_run("{command} starts it again", ["start", name.as_str()])),
            None => Err(container_gone(&record)),
        }
    }

    /// The agent's output; with `follow`, until it exits.
    pub fn logs(&self, record: &Record, follow: bool, tail: Option<u64>) -> OutputStream {
        self.runtime.logs(&record.container, follow, tail)
    }

    /// Resizes a session's terminal (the user's window changed).
    pub async fn resize(&self, session: &SessionId, rows: u16, cols: u16) -> Result<()> {
        self.runtime.resize(session, rows, cols).await
    }

    /// A session's exit code, once its process has ended.
    pub async fn exit_code(&self, session: &SessionId) -> Result<Option<i64>> {
        self.runtime.exit_code(session).await
    }

    /// The record of a whole sandbox, and the host paths its container mounts.
    async fn ready_record(&self, name: &SandboxName) -> Result<(Record, Vec<crate::runtime::Mount>)> {
        let record = self.record(name)?;
        if record.state != RecordState::Ready {
            return Err(half_made(name));
        }
        match self.runtime.inspect(&record.container).await? {
            Some(container) => Ok((record, container.mounts)),
            None => Err(container_gone(&record)),
        }
    }
}

/// A sandbox whose `up` or `down` stopped half way.
pub(crate) fn half_made(name: &SandboxName) -> Error {
    Error::conflict(format!("sandbox {name} is half made or half removed"))
        .hint_run("finish with {command}", ["down", name.as_str()])
}

/// A sandbox whose container was removed behind forage's back.
pub(crate) fn container_gone(record: &Record) -> Error {
    let name = record.name.as_str();
    Error::not_found(format!("the container of sandbox {name} ({}) is gone", record.container))
        .hint_run("make a new one with {command}", ["reset", name])
        .hint_run("or remove the sandbox with {command}", ["down", name])
}
