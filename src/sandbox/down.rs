//! `down`, and the teardown it shares with `gc --force` and the rollback of a
//! failed `up`: the container first (so nothing writes to the workspace any
//! more), then the agent's work archived, then the workspace's parts undone in
//! reverse, then the record. Every part tolerates being half done, and each part
//! undone leaves the journal, so a teardown cut short and run again does only
//! what is left.

use serde::Serialize;

use super::{now, timestamp, Engine};
use crate::error::{Error, Result};
use crate::names::SandboxName;
use crate::record::{ArchiveEntry, Record, RecordState, Step};
use crate::runtime::Runtime;
use crate::workspace::git::{ArchiveOutcome, Archived, NotArchived};
use crate::workspace::jj::Divergent;
use crate::workspace::{AtStake, Inside, Mode, Scope};

#[derive(Debug, Clone, Copy, Default)]
pub struct DownOptions {
    /// Keep the sandbox's branch instead of deleting it.
    pub keep_branch: bool,
    /// Throw uncommitted and unmerged work away instead of archiving it.
    pub discard: bool,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Teardown {
    /// Stop the agent with its stop signal first (down), or just kill it (rollback).
    pub(crate) graceful: bool,
    pub(crate) keep_branch: bool,
    pub(crate) discard: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct DownReport {
    pub name: SandboxName,
    pub container: String,
    pub mode: Option<Mode>,
    pub workspace: Option<String>,
    pub branch: Option<String>,
    pub kept_branch: bool,
    /// The archive of the sandbox's branch (or jj work).
    pub archived: Option<Archived>,
    /// git: work the agent committed outside its branch (a detached HEAD, other
    /// branches, stashes), each archived under its own ref.
    pub archived_elsewhere: Vec<Archived>,
    /// Work that could not be kept (commits the import refused, FIFOs), and why.
    pub not_archived: Vec<NotArchived>,
    /// With `--discard`: what was thrown away (said before it was).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub discarded: Option<AtStake>,
    /// jj: changes `merge` landed that the agent edited again since, which
    /// the user's jj now shows as divergent.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub divergent: Vec<Divergent>,
}

/// What `down` would do to one sandbox (`down --dry-run`).
#[derive(Debug, Clone, Serialize)]
pub struct PlannedDown {
    pub name: String,
    pub container: String,
    /// As `list` shows it.
    pub status: super::SandboxState,
    pub mode: Option<Mode>,
    pub workspace: Option<String>,
    pub branch: Option<String>,
    /// What `down` would archive (with `--discard`, throw away); `null` for a
    /// direct workspace or an orphan container.
    pub at_stake: Option<AtStake>,
    /// Why `down` would refuse it (a record forage cannot read).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
}

impl<R: Runtime> Engine<R> {
    /// Tears a sandbox down: the container first, then (once it is gone) the
    /// workspace, then the record. Works on half-made and half-removed sandboxes.
    pub async fn down(&self, name: &SandboxName, opts: DownOptions) -> Result<DownReport> {
        // Nothing is marked for removal that could not be removed.
        self.runtime.ping().await?;
        // A job's context keeps what its agent did (jobs::record_job_result).
        if let Err(e) = self.record_job_result(name).await {
            self.progress.warn(&format!("the result of job {name} was not recorded: {e}"));
        }
        let _lock = self.lock_sandbox(name).await?;
        let Some(mut record) = self.home.load(name)? else {
            return self.remove_orphan(name).await;
        };
        record.state = RecordState::Removing;
        self.home.save(&record)?;

        // A git or jj sandbox whose work is being thrown away has nothing to save,
        // so its agent is killed at once rather than given its stop timeout. A
        // direct sandbox's files are the user's own: its agent always gets to
        // finish its writes.
        let discards_everything = opts.discard && record.workspace.mode() != Mode::Direct;
        let how = Teardown { graceful: !discards_everything, keep_branch: opts.keep_branch, discard: opts.discard };
        let verb = if discards_everything { "removing" } else { "stopping" };
        self.step(&format!("{verb} container {}", record.container));
        let ArchiveOutcome { archived: mut archived_elsewhere, not_archived, discarded, divergent } =
            self.teardown(&record, how).await?;
        // The branch's own archive comes last; the others hold work found elsewhere.
        let archived = match archived_elsewhere.last() {
            Some(a) if a.source.is_none() => archived_elsewhere.pop(),
            _ => None,
        };
        self.progress.finish();
        let ws = record.workspace.get();
        Ok(DownReport {
            name: record.name.clone(),
            container: record.container.clone(),
            mode: Some(ws.mode()),
            workspace: Some(ws.host_path().display().to_string()),
            branch: ws.branch().map(str::to_owned),
            kept_branch: opts.keep_branch && ws.mode() == Mode::GitWorktree,
            archived,
            archived_elsewhere,
            not_archived,
            discarded,
            divergent,
        })
    }

    /// No record: only a container this home labelled (e.g. a record deleted by
    /// hand) is ours to remove.
    async fn remove_orphan(&self, name: &SandboxName) -> Result<DownReport> {
        let orphan = self.runtime.list(&self.home.label()).await?.into_iter().find(|c| c.sandbox == name.as_str());
        let Some(c) = orphan else { return Err(super::not_found(name)) };
        self.runtime.remove(&c.name).await?;
        Ok(DownReport {
            name: name.clone(),
            container: c.name,
            mode: None,
            workspace: None,
            branch: None,
            kept_branch: false,
            archived: None,
            archived_elsewhere: Vec::new(),
            not_archived: Vec::new(),
            discarded: None,
            divergent: Vec::new(),
        })
    }

    /// Removes a sandbox in the one safe order (see the module's comment).
    pub(crate) async fn teardown(&self, record: &Record, how: Teardown) -> Result<ArchiveOutcome> {
        let mut left = record.clone();
        let (containers, parts): (Vec<&Step>, Vec<&Step>) =
            record.journal.iter().partition(|s| matches!(s, Step::Container { .. }));
        let holds_work = self.holds_work(record);
        // jj inside snapshots the working copy while the container still runs
        // (what is written after that, forage reads itself); once it is gone, a
        // helper container does.
        let mut inside = match (holds_work, containers.is_empty()) {
            (true, false) => self.run_inside_if_running(record, false).await,
            _ => None,
        };
        if how.graceful && !containers.is_empty() {
            self.runtime.stop(&record.container, record.stop_timeout).await?;
        }
        // The agent's state, read from the stopped container before it goes
        // (also with --discard: a rotated token must survive).
        if !containers.is_empty() && record.journal.contains(&Step::AgentState) {
            self.take_back_and_say(record).await;
        }
        let scope = self.scope(how.keep_branch);
        for step in containers {
            step.undo(record, self.runtime.as_ref(), &scope).await?;
            self.forget_step(&mut left, step)?;
        }
        self.kill_point("removed-container");
        // The sandbox's network goes with its container: nothing is on it any
        // more but the proxy, which the map no longer sends anything to.
        // So does its port forwarder (and the forwarder's network).
        let (mut networks, parts): (Vec<&Step>, Vec<&Step>) =
            parts.into_iter().partition(|s| matches!(s, Step::Network { .. } | Step::Forwarder { .. }));
        // The forwarder first: removing the sandbox's network under it would
        // disconnect it while it runs, which leaves Podman 4.3 answering every
        // network listing with 500 "network inspection mismatch" after.
        networks.sort_by_key(|s| !matches!(s, Step::Forwarder { .. }));
        for step in networks {
            match step {
                Step::Network { name } => self.remove_egress(record, name).await?,
                _ => step.undo(record, self.runtime.as_ref(), &scope).await?,
            }
            self.forget_step(&mut left, step)?;
        }
        // Also with --discard: what is thrown away is said first, and a stopped
        // sandbox's changes are known only to its jj.
        if holds_work && inside.is_none() {
            inside = self.run_inside_in_helper(record, false).await;
        }

        // The repository is locked only if something of it is to be archived or
        // undone (an `up` interrupted before its first workspace part has nothing).
        let _repo_lock = match (record.workspace.get().repository_lock(), parts.is_empty()) {
            (Some(repo), false) => Some(self.lock_repo(repo).await?),
            // Nothing to do there; but a lock file a killed command left goes,
            // if no one holds it (a held lock is not waited for).
            (Some(repo), true) => self.home.try_lock_repo(repo).ok().flatten(),
            (None, _) => None,
        };
        let outcome = match (holds_work, how.discard) {
            (false, _) => ArchiveOutcome::default(),
            (true, true) => self.say_what_is_discarded(record, inside).await,
            (true, false) => self.archive(record, inside).await?,
        };
        self.kill_point("archived");
        for step in parts.into_iter().rev() {
            step.undo(record, self.runtime.as_ref(), &scope).await?;
            self.forget_step(&mut left, step)?;
        }
        self.kill_point("removed-workspace");
        self.home.remove(&record.name)?;
        Ok(outcome)
    }

    /// Where undoing may delete.
    fn scope(&self, keep_branch: bool) -> Scope {
        Scope {
            workspaces_dir: self.home.workspaces_dir(),
            private_dir: self.home.private_dir(),
            secrets_dir: self.home.secrets_dir(),
            agent_state_dir: self.home.root().join("agent-state"),
            keep_branch,
        }
    }

    /// Work exists only in a workspace this sandbox's journal says it made
    /// (its branch, or its jj repository), and not in an older forage's.
    pub(crate) fn holds_work(&self, record: &Record) -> bool {
        let ws = record.workspace.get();
        let made = |part| record.journal.contains(&Step::of(part));
        match ws.mode() {
            Mode::Direct => false,
            Mode::GitWorktree => made(crate::workspace::Part::GitBranch),
            Mode::Jj => made(crate::workspace::Part::JjRepository),
        }
    }

    /// `--discard`: says (before it is done) what only this sandbox held.
    async fn say_what_is_discarded(&self, record: &Record, inside: Option<Inside>) -> ArchiveOutcome {
        let workspace = record.workspace.clone();
        let stake = super::blocking(move || workspace.get().at_stake(inside)).await;
        let mut outcome = ArchiveOutcome::default();
        match stake {
            Ok(Some(s)) if !s.is_empty() => {
                self.progress.warn(&format!(
                    "sandbox {}: throwing away {}",
                    record.name,
                    s.describe(record.workspace.mode())
                ));
                outcome.discarded = Some(s);
            }
            Ok(_) => {}
            Err(e) => self
                .progress
                .warn(&format!("sandbox {}: throwing away its work (what it is cannot be listed: {e})", record.name)),
        }
        outcome
    }

    /// Keeps the agent's work reachable, and remembers each archive for `restore`.
    async fn archive(&self, record: &Record, inside: Option<Inside>) -> Result<ArchiveOutcome> {
        self.step("archiving the agent's work");
        let (workspace, name, stamp) = (record.workspace.clone(), record.name.clone(), timestamp());
        let outcome = super::blocking(move || workspace.get().archive(&name, &stamp, inside)).await.map_err(|e| {
            Error::would_lose_data(format!(
                "could not archive the work of sandbox {} ({e}); nothing was deleted",
                record.name
            ))
            .hint("fix the cause and retry")
            .hint_run("or throw the work away with {command}", ["down", "--discard", record.name.as_str()])
        })?;
        let ws = record.workspace.get();
        for a in &outcome.archived {
            self.home.add_archive(&ArchiveEntry {
                name: record.name.clone(),
                mode: ws.mode(),
                refname: a.refname.clone(),
                commit: a.commit.clone(),
                repo: ws.repository().map(|r| r.to_path_buf()).unwrap_or_default(),
                common_dir: ws.repository_lock().map(|r| r.to_path_buf()).unwrap_or_default(),
                branch: ws.branch().unwrap_or_default().to_owned(),
                template: record.template.clone(),
                archived_at: now(),
                uncommitted_files: Some(a.dirty_files.len()),
                commits: Some(a.commits),
                base: ws.base(),
                source: a.source.clone(),
            })?;
        }
        Ok(outcome)
    }

    /// Drops an undone step from the journal on disk.
    fn forget_step(&self, left: &mut Record, step: &Step) -> Result<()> {
        left.journal.retain(|s| s != step);
        self.home.save(left)
    }

    /// What `down` (with `discard`, `down --discard`) would do to each of
    /// `names`, planned from what `list` sees so that an orphan container is in
    /// the plan as a real `down` removes it. Changes nothing.
    pub async fn plan_down(&self, names: &[SandboxName]) -> Result<Vec<PlannedDown>> {
        let rows = self.list().await?;
        let mut plan = Vec::new();
        for name in names {
            let Some(row) = rows.iter().find(|r| r.name == name.as_str()) else {
                return Err(super::not_found(name));
            };
            let refused = row
                .status
                .is_unreadable()
                .then(|| format!("its record cannot be read ({}); `down` refuses it", row.status));
            let at_stake = match row.status {
                _ if refused.is_some() => None,
                super::SandboxState::Orphan => None,
                _ => self.at_stake(name).await.unwrap_or_else(|e| {
                    self.progress.warn(&format!("what sandbox {name} holds cannot be listed: {e}"));
                    None
                }),
            };
            plan.push(PlannedDown {
                name: row.name.clone(),
                container: name.container(),
                status: row.status,
                mode: row.mode,
                workspace: row.workspace.clone(),
                branch: row.branch.clone(),
                at_stake,
                refused,
            });
        }
        Ok(plan)
    }
}
