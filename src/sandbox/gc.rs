//! `gc`: finds what a crash, a kill -9 or a hand-deleted file left behind, and with
//! `--force` finishes the job the way `down` would, archiving work first. It only
//! ever touches containers labelled with this FORAGE_HOME, worktrees whose admin
//! entry is named `forage-*`, and paths under FORAGE_HOME.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::journal::Step;
use super::{Engine, Teardown};
use crate::error::{Error, Result};
use crate::names::SandboxName;
use crate::runtime::Runtime;
use crate::store::{BadRecord, Problem, Record, RecordState, RECORD_VERSION};
use crate::template::DEFAULT_TEMPLATE;
use crate::workspace::untrusted::remove_created_dir;
use crate::workspace::WorkspaceRecord;

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// An `up` or `down` that stopped half way.
    BrokenSandbox,
    /// A ready sandbox whose container was removed outside forage.
    MissingContainer,
    /// A container labelled with this FORAGE_HOME that no record owns.
    OrphanContainer,
    /// A directory under FORAGE_HOME/workspaces that no record owns.
    OrphanWorkspace,
    /// Copies of secret files (FORAGE_HOME/secrets/<name>) that no record owns.
    OrphanSecrets,
    /// What a sandbox no record owns was given of its agent's state
    /// (FORAGE_HOME/agent-state/sandboxes/<name>.json).
    OrphanAgentState,
    /// A record forage cannot read: corrupt, or written by a newer forage.
    UnreadableRecord,
    /// A lock file no process holds (its holder was killed).
    StaleLock,
    /// A half-written record (its writer was killed).
    StaleTempFile,
    /// A restricted sandbox's network that no record owns.
    OrphanNetwork,
    /// A sandbox's port forwarder (and its network) whose sandbox has no record.
    OrphanForwarder,
    /// The egress proxy (and its network), with no restricted sandbox left.
    UnusedProxy,
    /// A finished job's context beyond the newest `jobs::KEEP_FINISHED`.
    OldJob,
    /// A copy-on-write base checkout (FORAGE_HOME/bases/<tree>) no sandbox
    /// uses, or one a killed `up` left half made.
    UnusedBase,
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Kind::BrokenSandbox => "broken-sandbox",
            Kind::MissingContainer => "missing-container",
            Kind::OrphanContainer => "orphan-container",
            Kind::OrphanWorkspace => "orphan-workspace",
            Kind::OrphanSecrets => "orphan-secrets",
            Kind::OrphanAgentState => "orphan-agent-state",
            Kind::UnreadableRecord => "unreadable-record",
            Kind::StaleLock => "stale-lock",
            Kind::StaleTempFile => "stale-temp-file",
            Kind::OrphanNetwork => "orphan-network",
            Kind::OrphanForwarder => "orphan-forwarder",
            Kind::UnusedProxy => "unused-proxy",
            Kind::OldJob => "old-job",
            Kind::UnusedBase => "unused-base",
        })
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    pub kind: Kind,
    /// The sandbox, container or path concerned.
    pub subject: String,
    /// Why it is a finding.
    pub why: String,
    /// What `--force` does (or did) about it.
    pub action: String,
    /// With `--force`: `None` when the action succeeded, else the error.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Finding {
    pub(crate) fn new(
        kind: Kind,
        subject: impl Into<String>,
        why: impl Into<String>,
        action: impl Into<String>,
    ) -> Finding {
        Finding { kind, subject: subject.into(), why: why.into(), action: action.into(), error: None }
    }

    /// With `force`, does `action` and records how it went.
    pub(crate) async fn act(mut self, force: bool, action: impl std::future::Future<Output = Result<()>>) -> Finding {
        if force {
            self.error = action.await.err().map(|e| e.to_string());
        }
        self
    }
}

/// The records and containers as they were when `gc` started. What counts as
/// an orphan is judged against them, so that `--force` acts on exactly the
/// findings a dry run lists (removing a broken sandbox must not make its
/// container look like an orphan a moment later).
struct Seen {
    records: Vec<Record>,
    bad: Vec<BadRecord>,
    containers: Vec<crate::runtime::ContainerSummary>,
}

impl Seen {
    fn had_record(&self, name: &SandboxName) -> bool {
        self.records.iter().any(|r| &r.name == name) || self.bad.iter().any(|b| &b.name == name)
    }
}

impl<R: Runtime> Engine<R> {
    /// The lock of sandbox `name` when no record owns it: `had_record` (what
    /// gc saw when it started), then the record looked for again under the
    /// lock, which `up` takes before its record exists, so a sandbox being
    /// made right now is never taken for an orphan. `None`: owned, or busy.
    pub(crate) fn lock_if_unowned(&self, name: &SandboxName, had_record: bool) -> Result<Option<crate::store::Lock>> {
        if had_record {
            return Ok(None);
        }
        match self.home.try_lock_sandbox(name)? {
            Some(_) if self.home.record_exists(name) => Ok(None),
            lock => Ok(lock),
        }
    }

    pub async fn gc(&self, force: bool) -> Result<Vec<Finding>> {
        let (records, bad) = self.home.load_all()?;
        let seen = Seen { records, bad, containers: self.runtime.list(&self.home.label()).await? };
        let mut findings: Vec<Finding> = seen.bad.iter().map(unreadable_record).collect();
        findings.extend(self.broken_sandboxes(&seen, force).await?);
        findings.extend(self.orphan_containers(&seen, force).await?);
        findings.extend(self.orphan_workspaces(&seen, force).await?);
        findings.extend(self.orphan_secrets(&seen, force).await?);
        findings.extend(self.orphan_agent_state(&seen, force).await?);
        findings.extend(self.gc_egress(|n| seen.had_record(n), force).await?);
        findings.extend(self.gc_forwarders(|n| seen.had_record(n), force).await?);
        findings.extend(self.stale_files(force).await?);
        findings.extend(self.old_jobs(force).await?);
        findings.extend(self.unused_bases(force).await);
        Ok(findings)
    }

    /// Sandboxes whose `up` or `down` stopped half way, or whose container went.
    async fn broken_sandboxes(&self, seen: &Seen, force: bool) -> Result<Vec<Finding>> {
        let mut findings = Vec::new();
        for record in &seen.records {
            // A sandbox whose lock is held is being worked on right now.
            let Some(_lock) = self.home.try_lock_sandbox(&record.name)? else { continue };
            let has_container = seen.containers.iter().any(|c| c.sandbox == record.name.as_str());
            let (kind, why) = match record.state {
                RecordState::Creating => (Kind::BrokenSandbox, "its `up` stopped half way".to_owned()),
                RecordState::Removing => (Kind::BrokenSandbox, "its `down` stopped half way".to_owned()),
                RecordState::Ready if !has_container => {
                    (Kind::MissingContainer, format!("its container {} was removed outside forage", record.container))
                }
                RecordState::Ready => continue,
            };
            let how = Teardown { graceful: false, keep_branch: false, discard: false };
            let finding = Finding::new(
                kind,
                record.name.to_string(),
                why,
                "remove what is left of it, archiving any work, as `down` does",
            );
            findings.push(finding.act(force, async { self.teardown(record, how).await.map(|_| ()) }).await);
        }
        Ok(findings)
    }

    /// Containers labelled with this FORAGE_HOME that no record owns, judged
    /// under the sandbox's lock (which `up` takes before its record exists, so a
    /// sandbox being made right now is never taken for one).
    async fn orphan_containers(&self, seen: &Seen, force: bool) -> Result<Vec<Finding>> {
        let mut findings = Vec::new();
        for c in &seen.containers {
            let Ok(name) = SandboxName::parse(&c.sandbox) else { continue };
            let Some(_lock) = self.lock_if_unowned(&name, seen.had_record(&name))? else { continue };
            let why = format!("labelled as sandbox {} of this FORAGE_HOME, which has no record", c.sandbox);
            let finding = Finding::new(Kind::OrphanContainer, c.name.clone(), why, "remove the container");
            findings.push(finding.act(force, self.runtime.remove(&c.name)).await);
        }
        Ok(findings)
    }

    /// Workspaces (workspaces/<name>) and private repositories (private/<name>)
    /// no record owns.
    async fn orphan_workspaces(&self, seen: &Seen, force: bool) -> Result<Vec<Finding>> {
        let mut names: Vec<SandboxName> = list_dir(&self.home.workspaces_dir())
            .into_iter()
            .chain(list_dir(&self.home.private_dir()))
            .filter_map(|d| d.file_name().and_then(|n| n.to_str()).and_then(|n| SandboxName::parse(n).ok()))
            .collect();
        names.sort();
        names.dedup();
        let mut findings = Vec::new();
        for name in names {
            let Some(_lock) = self.lock_if_unowned(&name, seen.had_record(&name))? else { continue };
            findings.push(self.orphan_workspace(&name, force).await);
        }
        Ok(findings)
    }

    /// Copies of secret files whose sandbox has no record: nothing of the
    /// user's work, so removed.
    async fn orphan_secrets(&self, seen: &Seen, force: bool) -> Result<Vec<Finding>> {
        let mut findings = Vec::new();
        let secrets = self.home.secrets_dir();
        for dir in list_dir(&secrets) {
            let Some(name) = dir.file_name().and_then(|n| n.to_str()).and_then(|n| SandboxName::parse(n).ok()) else {
                continue;
            };
            let Some(_lock) = self.lock_if_unowned(&name, seen.had_record(&name))? else { continue };
            let finding = Finding::new(
                Kind::OrphanSecrets,
                dir.display().to_string(),
                "no sandbox record owns these copies of secret files",
                "remove them",
            );
            let owner = secrets.clone();
            let remove = super::blocking(move || remove_created_dir(&dir, &owner).map_err(Error::other));
            findings.push(finding.act(force, remove).await);
        }
        Ok(findings)
    }

    /// Base checkouts of copy-on-write sandboxes that no sandbox uses: after
    /// the broken sandboxes are torn down, so that theirs count as unused.
    /// Each user file names a sandbox (`forage-<name>`); one with a record,
    /// even an unreadable one, keeps the base. Looked at again under the lock
    /// of the bases before anything is removed (`cow::remove_base`).
    async fn unused_bases(&self, force: bool) -> Vec<Finding> {
        let bases = self.home.bases_dir();
        let home = self.home.clone();
        let live = move |user: &str| {
            let name = user.strip_prefix("forage-").and_then(|n| SandboxName::parse(n).ok());
            name.is_none_or(|n| home.record_exists(&n))
        };
        let mut findings = Vec::new();
        for base in crate::workspace::cow::unused_bases(&bases, &live) {
            let finding = Finding::new(
                Kind::UnusedBase,
                base.display().to_string(),
                "no copy-on-write sandbox uses this base checkout",
                "remove it",
            );
            let (bases, live) = (bases.clone(), live.clone());
            let remove = super::blocking(move || crate::workspace::cow::remove_base(&bases, &base, live));
            findings.push(finding.act(force, remove).await);
        }
        findings
    }

    /// What sandboxes no record owns were given of their agent's state: the
    /// state itself is in the store, so only this note of it goes.
    async fn orphan_agent_state(&self, seen: &Seen, force: bool) -> Result<Vec<Finding>> {
        let mut findings = Vec::new();
        for file in list_dir(&self.home.root().join("agent-state/sandboxes")) {
            let name = file.file_name().and_then(|n| n.to_str()).and_then(|n| n.strip_suffix(".json"));
            let Some(name) = name.and_then(|n| SandboxName::parse(n).ok()) else { continue };
            let Some(_lock) = self.lock_if_unowned(&name, seen.had_record(&name))? else { continue };
            let finding = Finding::new(
                Kind::OrphanAgentState,
                file.display().to_string(),
                "no sandbox record owns this note of the agent state it was given",
                "remove it",
            );
            let store = crate::agent_state::store::StateStore::new(&self.home);
            findings.push(finding.act(force, async move { store.remove_given(&name) }).await);
        }
        Ok(findings)
    }

    /// Lock files no process holds, and records half written, by killed commands.
    async fn stale_files(&self, force: bool) -> Result<Vec<Finding>> {
        let mut findings = Vec::new();
        for path in self.home.stale_locks()? {
            let finding =
                Finding::new(Kind::StaleLock, path.display().to_string(), "no process holds it", "remove the file");
            findings.push(finding.act(force, async { self.home.remove_stale_lock(&path) }).await);
        }
        for path in self.home.stale_temp_files() {
            let finding = Finding::new(
                Kind::StaleTempFile,
                path.display().to_string(),
                "a record write that never finished",
                "remove the file",
            );
            let remove = async {
                std::fs::remove_file(&path).map_err(|e| Error::other(format!("removing {}: {e}", path.display())))
            };
            findings.push(finding.act(force, remove).await);
        }
        Ok(findings)
    }

    /// Finished jobs' contexts past the newest `jobs::KEEP_FINISHED`.
    async fn old_jobs(&self, force: bool) -> Result<Vec<Finding>> {
        let mut findings = Vec::new();
        for dir in crate::jobs::beyond(&self.home, crate::jobs::KEEP_FINISHED)? {
            let why = format!("forage keeps the contexts of the newest {} finished jobs", crate::jobs::KEEP_FINISHED);
            let finding = Finding::new(Kind::OldJob, dir.display().to_string(), why, "remove the job's context");
            let remove = async {
                std::fs::remove_dir_all(&dir).map_err(|e| Error::other(format!("removing {}: {e}", dir.display())))
            };
            findings.push(finding.act(force, remove).await);
        }
        Ok(findings)
    }

    /// A workspace (or private repository) no record owns. Its sidecar
    /// (written by `up` next to the private repository) says what forage made,
    /// and a teardown as `down`'s removes exactly that, archiving the work
    /// first. Without one, only directories that hold no repository are removed:
    /// forage cannot tell where the work in one belongs.
    async fn orphan_workspace(&self, name: &SandboxName, force: bool) -> Finding {
        let dir = self.home.workspaces_dir().join(name.as_str());
        let private = self.home.private_dir_of(name);
        let sidecar = self.home.workspace_sidecar(name);
        let holds_repo = dir.join(".git").exists()
            || dir.join(".jj").exists()
            || private.join("git/HEAD").exists()
            || private.join("jj/repo").exists();
        let subject: Vec<String> =
            [&dir, &private].iter().filter(|p| p.exists()).map(|p| p.display().to_string()).collect();
        let action = match &sidecar {
            Some(WorkspaceRecord::GitWorktree(w)) => {
                format!("archive its work, then remove worktree {} and branch {} of {}", w.worktree_id, w.branch, w.repo.display())
            }
            Some(ws) => format!("archive its work, then remove its {} workspace", ws.mode()),
            None if holds_repo => {
                "leave it alone (it holds a repository forage cannot trace back, made by an older or another forage?); inspect it and remove it by hand".into()
            }
            None => "remove it (it holds no repository, so no history)".into(),
        };
        let finding = Finding::new(Kind::OrphanWorkspace, subject.join(" and "), "no sandbox record owns it", action);
        match sidecar {
            Some(workspace) => {
                let record = orphan_record(name, workspace);
                let how = Teardown { graceful: false, keep_branch: false, discard: false };
                finding.act(force, async { self.teardown(&record, how).await.map(|_| ()) }).await
            }
            None if holds_repo => finding,
            None => {
                let (workspaces, privates) = (self.home.workspaces_dir(), self.home.private_dir());
                // A directory the agent filled may take a while to delete: off the runtime's thread.
                let remove = super::blocking(move || {
                    remove_created_dir(&dir, &workspaces)
                        .and_then(|()| crate::workspace::untrusted::remove_locked_dir(&private, &privates))
                        .map_err(Error::other)
                });
                finding.act(force, remove).await
            }
        }
    }
}

/// A record forage cannot read. `gc` leaves it alone, as `--force` does too:
/// what it describes is unknown, so nothing of it can be removed safely. The
/// action is worded to follow "would" in a dry run, like every other one.
fn unreadable_record(bad: &BadRecord) -> Finding {
    let why_alone = match bad.problem {
        Problem::UnsupportedVersion => "a newer forage wrote it",
        _ => "forage cannot tell what it describes",
    };
    Finding::new(
        Kind::UnreadableRecord,
        bad.path.display().to_string(),
        format!("{}: {}", bad.problem.word(), bad.detail),
        format!("leave it alone ({why_alone}); {}", bad.fix()),
    )
}

/// A record for a workspace whose own is gone, from what its sidecar says `up`
/// made: a teardown of it removes exactly that.
fn orphan_record(name: &SandboxName, workspace: WorkspaceRecord) -> Record {
    let journal = workspace.get().parts().iter().map(|p| Step::of(*p)).collect();
    Record {
        version: RECORD_VERSION,
        name: name.clone(),
        state: RecordState::Removing,
        created_at: super::now(),
        template: DEFAULT_TEMPLATE.into(),
        image: String::new(),
        container: name.container(),
        workspace,
        stop_timeout: 0,
        init: Vec::new(),
        options: Default::default(),
        journal,
        pins: Vec::new(),
        egress: None,
        network: None,
        ports: Vec::new(),
        unpublished: Vec::new(),
        stopped_at: None,
        toolchain: None,
    }
}

fn list_dir(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> =
        std::fs::read_dir(dir).map(|e| e.flatten().map(|e| e.path()).collect()).unwrap_or_default();
    out.sort();
    out
}
