//! The review commands: `diff`, `log`, `merge` and `apply`. Each syncs the
//! sandbox first, then reads the work as the host holds it
//! (`workspace::review`): the agent's verified commits in the user's repository
//! and its worktree's files, never its own repository.

use std::path::PathBuf;

use serde::Serialize;

use super::Engine;
use crate::error::{Error, Result};
use crate::host_paths::pin::Pin;
use crate::names::SandboxName;
use crate::record::Record;
use crate::runtime::Runtime;
use crate::store::Lock;
use crate::workspace::conflicts::Aborted;
use crate::workspace::jj::Divergent;
use crate::workspace::reach::{self, AgentReach};
use crate::workspace::review::{self, DetachedHead, FileChange, LandHow, LandPlan, Landed, Landing, LogEntry, Review};
use crate::workspace::{Mode, Synced, WorkspaceRecord};

/// Which part of the work `diff` shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DiffPart {
    /// Committed and uncommitted together, from where the work started.
    #[default]
    All,
    /// The commits only.
    Committed,
    /// What is not committed only (jj: the working-copy change).
    Uncommitted,
}

/// What `diff` found.
#[derive(Debug, Clone, Serialize)]
pub struct DiffReport {
    pub sandbox: String,
    /// `diff A B`: the other sandbox, whose files are the new side.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub other: Option<String>,
    /// The commit the work started from (the old side, without `other`).
    pub start: String,
    pub files: Vec<FileChange>,
    /// Worktree paths forage could not read, each with why (taken as committed).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<String>,
    /// Why the sync before it failed: the diff then shows what the host had.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sync_errors: Vec<String>,
    /// git: the agent's HEAD, when it is detached (its commits there are
    /// not on the sandbox's branch, so not in this diff).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_head: Option<DetachedHead>,
}

/// What `log` found.
#[derive(Debug, Clone, Serialize)]
pub struct LogReport {
    pub sandbox: String,
    pub start: String,
    pub commits: Vec<LogEntry>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sync_error: Option<String>,
    /// git: the agent's HEAD, when it is detached (see `DiffReport`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_head: Option<DetachedHead>,
}

/// Where and how `merge` lands the work.
#[derive(Debug, Clone)]
pub struct MergeRequest {
    /// The branch (git) or bookmark (jj); default: the one the sandbox was made from.
    pub into: Option<String>,
    pub how: LandHow,
    /// `--squash`'s commit message.
    pub message: Option<String>,
    /// `--conflicts`: where the work conflicts, leave the conflicts marked in
    /// the checkout that has the target (git).
    pub keep_conflicts: bool,
}

/// What `apply` changed in the user's checkout.
#[derive(Debug, Clone, Serialize)]
pub struct Applied {
    pub sandbox: String,
    pub checkout: String,
    pub files: Vec<String>,
    /// Paths of the sandbox's worktree forage did not read (each with why):
    /// applied as the sandbox's committed version, or not at all.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub not_read: Vec<String>,
}

impl<R: Runtime> Engine<R> {
    /// The change the agent made (see `DiffPart`), or between two sandboxes'
    /// files (`other`, on the same repository).
    pub async fn diff(&self, name: &SandboxName, other: Option<&SandboxName>, part: DiffPart) -> Result<DiffReport> {
        let _locks = self.lock_in_order(name, other).await?;
        let record = self.reviewable(name)?;
        let other_record = other.map(|o| self.reviewable(o)).transpose()?;
        if let Some(o) = &other_record {
            if !o.workspace.same_repository(&record.workspace) {
                return Err(Error::usage(format!(
                    "sandboxes {name} and {} work on different repositories; diff compares two sandboxes of one",
                    o.name
                )));
            }
        }
        let mut sync_errors = Vec::new();
        for r in std::iter::once(&record).chain(other_record.as_ref()) {
            if let Err(e) = self.sync_for_review(r).await {
                sync_errors.push(format!("sandbox {}: {e}", r.name));
            }
        }
        // Two sandboxes' files: the patches' headers name them, not git's a/ and b/.
        let prefixes = other.map(|o| (format!("{name}/"), format!("{o}/")));
        let (ws, other_ws) = (record.workspace.clone(), other_record.map(|r| r.workspace));
        let (start, files, skipped, agent_head) = super::blocking(move || {
            let review = reviewer(&ws)?;
            let repo = review.repository()?;
            review::in_memory(&repo)?;
            let work = review.work(&repo)?;
            let agent_head = review.detached_head(&repo).ok().flatten();
            let mut skipped = work.skipped.clone();
            let (old, new) = match &other_ws {
                Some(o) => {
                    let theirs = reviewer(o)?.work(&repo)?;
                    skipped.extend(theirs.skipped.iter().cloned());
                    (work.current, theirs.current)
                }
                None => match part {
                    DiffPart::All => (review::tree_of(&repo, work.start)?, work.current),
                    DiffPart::Committed => (review::tree_of(&repo, work.start)?, review::tree_of(&repo, work.tip)?),
                    DiffPart::Uncommitted => (review::tree_of(&repo, work.tip)?, work.current),
                },
            };
            let files = match &prefixes {
                Some((a, b)) => review::diff_between(&repo, Some(old), Some(new), (a, b))?,
                None => review::diff(&repo, Some(old), Some(new))?,
            };
            Ok((work.start.to_string(), files, skipped, agent_head))
        })
        .await?;
        Ok(DiffReport {
            sandbox: name.to_string(),
            other: other.map(|o| o.to_string()),
            start,
            files,
            skipped,
            sync_errors,
            agent_head,
        })
    }

    /// The agent's commits since the work started, newest first.
    pub async fn log(&self, name: &SandboxName) -> Result<LogReport> {
        let _lock = self.lock_sandbox(name).await?;
        let record = self.reviewable(name)?;
        let sync_error = self.sync_for_review(&record).await.err().map(|e| e.to_string());
        let ws = record.workspace.clone();
        let (start, commits, agent_head) = super::blocking(move || {
            let review = reviewer(&ws)?;
            let repo = review.repository()?;
            review::in_memory(&repo)?;
            let work = review.work(&repo)?;
            let agent_head = review.detached_head(&repo).ok().flatten();
            Ok((work.start.to_string(), review.commits(&repo, &work)?, agent_head))
        })
        .await?;
        Ok(LogReport { sandbox: name.to_string(), start, commits, sync_error, agent_head })
    }

    /// Syncs, then works out how `merge` would land the work (writing the
    /// commits that takes, moving nothing): for the user to see first.
    pub async fn plan_merge(&self, name: &SandboxName, request: MergeRequest) -> Result<LandPlan> {
        let _lock = self.lock_sandbox(name).await?;
        let record = self.reviewable(name)?;
        let synced = self.sync_for_review(&record).await.map_err(|e| {
            Error::new(e.kind(), format!("merge lands only work a sync verified, and the sync failed: {e}"))
        })?;
        let divergent = match synced {
            Synced::Jj(sync) => sync.divergent,
            Synced::Git(_) => Vec::new(),
        };
        let _repo = self.lock_repo_of(&record).await?;
        let ws = record.workspace.clone();
        let name = name.clone();
        let mut plan = super::blocking(move || {
            let review = reviewer(&ws)?;
            let repo = review.repository()?;
            let work = review.work(&repo)?;
            let target = request.into.clone().or_else(|| work.target.clone()).ok_or_else(|| {
                Error::usage(format!(
                    "sandbox {name} was not made from a {} forage knows, so it cannot tell where to land the work; pass --into",
                    if ws.mode() == Mode::Jj { "bookmark" } else { "branch" }
                ))
            })?;
            refuse_forage_target(&target, ws.mode())?;
            let tip = review.target_tip(&repo, &target)?;
            let commits = review.commits(&repo, &work)?;
            let kind = if ws.mode() == Mode::Jj { "bookmark" } else { "branch" };
            let landing = Landing {
                target: &target,
                tip,
                how: request.how,
                message: request.message.as_deref(),
                kind,
                keep_conflicts: request.keep_conflicts,
            };
            if ws.mode() == Mode::Jj && request.keep_conflicts {
                return Err(Error::usage(
                    "--conflicts is for git: jj keeps a conflict in the change itself; bring the bookmark into the sandbox instead",
                )
                .hint_run("{command} rebases the agent's changes onto it, inside", ["update", name.as_str()]));
            }
            if ws.mode() == Mode::Jj && request.how == LandHow::Rebase {
                return Err(Error::usage(
                    "--rebase would copy the agent's jj changes under new change ids; merge without it (jj keeps them as they are), or pass --squash",
                ));
            }
            review::plan(&repo, &name, &work, commits, &landing)
        })
        .await
        .map_err(|e| explain_divergence(e, &record.name, &divergent))?;
        self.check_landing(&record, &mut plan).await?;
        plan.divergent = divergent;
        Ok(plan)
    }

    /// Lands a plan `plan_merge` made: moves the target where the plan says
    /// (refusing if it moved since, its checkout is dirty, or an agent holds
    /// it or writes its checkout, checked again here under the locks), and
    /// remembers what landed, so that `down` finds nothing of it to archive.
    pub async fn merge(&self, name: &SandboxName, mut plan: LandPlan) -> Result<LandPlan> {
        let _lock = self.lock_sandbox(name).await?;
        let record = self.reviewable(name)?;
        let _repo = self.lock_repo_of(&record).await?;
        self.check_landing(&record, &mut plan).await?;
        let ws = record.workspace.clone();
        super::blocking(move || {
            let review = reviewer(&ws)?;
            let repo = review.repository()?;
            if !plan.is_empty() {
                review.land(&repo, &plan)?;
            }
            if plan.leaves_conflicts() {
                // Nothing landed yet: the user's `git commit` lands it.
                return Ok(plan);
            }
            if let Some(file) = review.landed_file() {
                let landed =
                    Landed { target: plan.target.clone(), commit: plan.commit.clone(), tree: plan.tree.clone() };
                landed.write(&file)?;
            }
            Ok(plan)
        })
        .await
    }

    /// `merge --abort`: puts the checkout where `merge --conflicts` left the
    /// sandbox's conflicts back as it was (refusing one an agent writes).
    pub async fn abort_merge(&self, name: &SandboxName) -> Result<Aborted> {
        let _lock = self.lock_sandbox(name).await?;
        let record = self.reviewable(name)?;
        let _repo = self.lock_repo_of(&record).await?;
        let reach = self.agent_reach().await?;
        let ws = record.workspace.clone();
        super::blocking(move || {
            let review = reviewer(&ws)?;
            let checkout = review.conflicts_checkout()?;
            reach.refuse_checkout(&checkout, &format!("your checkout {}", checkout.display()))?;
            review.abort_conflicts(&review.repository()?)
        })
        .await
    }

    /// The agent's whole change as uncommitted edits in the user's checkout.
    pub async fn apply(&self, name: &SandboxName) -> Result<Applied> {
        let _lock = self.lock_sandbox(name).await?;
        let record = self.reviewable(name)?;
        self.sync_for_review(&record).await.map_err(|e| {
            Error::new(e.kind(), format!("apply takes only work a sync verified, and the sync failed: {e}"))
        })?;
        let _repo = self.lock_repo_of(&record).await?;
        let reach = self.agent_reach().await?;
        let ws = record.workspace.clone();
        let (files, not_read) = super::blocking(move || {
            if let Some(checkout) = ws.get().repository() {
                reach.refuse_checkout(checkout, &format!("your checkout {}", checkout.display()))?;
            }
            let review = reviewer(&ws)?;
            let repo = review.repository()?;
            review::in_memory(&repo)?;
            let work = review.work(&repo)?;
            Ok((review.apply(&repo, &work)?, work.skipped))
        })
        .await?;
        let checkout = record.workspace.get().repository().map(|p| p.display().to_string()).unwrap_or_default();
        Ok(Applied { sandbox: name.to_string(), checkout, files, not_read })
    }

    /// Refuses to land `plan` where an agent holds the target or writes its
    /// checkout (`AgentReach`), and notes in the plan the checkout that was
    /// found safe: `land` writes there and nowhere else.
    async fn check_landing(&self, record: &Record, plan: &mut LandPlan) -> Result<()> {
        let reach = self.agent_reach().await?;
        let (ws, target) = (record.workspace.clone(), plan.target.clone());
        plan.checkout = super::blocking(move || {
            if let Some(git_dir) = reach::git_dir_of(&ws) {
                reach.refuse_branch(&git_dir, &target)?;
            }
            let review = reviewer(&ws)?;
            let checkout = review.landing_checkout(&review.repository()?, &target)?;
            if let Some(dir) = &checkout {
                let shown = dir.display().to_string();
                reach.refuse_checkout(dir, &format!("{target} is checked out in {}", shown.trim_end_matches('/')))?;
            }
            Ok(checkout)
        })
        .await?;
        Ok(())
    }

    /// What every sandbox of this FORAGE_HOME holds and can write: from each
    /// record (or, for a record forage cannot read, the workspace `up` noted
    /// beside it), the workspace's own mounts, and the container's writable
    /// mounts: as the record's pins have them, or (a record of an older forage,
    /// or one forage cannot read) as the engine has them.
    pub(super) async fn agent_reach(&self) -> Result<AgentReach> {
        let (records, bad) = self.home.load_all()?;
        let mut sandboxes: Vec<(SandboxName, String, WorkspaceRecord, Vec<Pin>)> =
            records.into_iter().map(|r| (r.name, r.container, r.workspace, r.pins)).collect();
        for b in bad {
            if let Some(ws) = self.home.workspace_sidecar(&b.name) {
                sandboxes.push((b.name.clone(), b.name.container(), ws, Vec::new()));
            }
        }
        let guard = super::plan::guard(&self.home, &self.settings);
        let mut reach = AgentReach::default();
        for (name, container, ws, pins) in sandboxes {
            let mut writable: Vec<PathBuf> =
                ws.mounts(false, &guard).into_iter().filter(|m| !m.read_only).map(|m| m.source).collect();
            if !pins.is_empty() {
                writable.extend(pins.into_iter().filter(|p| p.writable).map(|p| p.path));
            } else if let Some(details) = self.runtime.inspect(&container).await? {
                writable.extend(details.mounts.into_iter().filter(|m| !m.read_only).map(|m| m.source));
            }
            reach.add(name.as_str(), &ws, writable);
        }
        Ok(reach)
    }

    /// The record of a sandbox whose work can be reviewed.
    pub(super) fn reviewable(&self, name: &SandboxName) -> Result<Record> {
        let record = self.record(name)?;
        if record.workspace.get().review().is_none() {
            return Err(match record.workspace.mode() {
                Mode::Direct => Error::usage(format!(
                    "sandbox {name} works directly in {}: it has no history of its own, and its changes are already your files",
                    record.workspace.host_path().display()
                )),
                _ => Error::usage(format!(
                    "sandbox {name} was made by an older forage that shared the repository with the agent, so forage does not read its work"
                ))
                .hint_run("{command} tears it down, keeping its work as that forage did", ["down", name.as_str()]),
            });
        }
        Ok(record)
    }

    /// `sync` of a sandbox whose lock the caller holds, with jj's snapshot
    /// taken inside (in a helper container when it is stopped).
    pub(super) async fn sync_for_review(&self, record: &Record) -> Result<Synced> {
        let inside = match self.run_inside_if_running(record, true).await {
            Some(inside) => Some(inside),
            None => self.run_inside_in_helper(record, true).await,
        };
        self.sync_record(record, inside).await
    }

    /// The locks of one or two sandboxes, always taken in name order (so that
    /// `diff a b` and `diff b a` never wait on each other).
    async fn lock_in_order(&self, name: &SandboxName, other: Option<&SandboxName>) -> Result<Vec<Lock>> {
        let mut names: Vec<&SandboxName> = std::iter::once(name).chain(other).collect();
        names.sort();
        names.dedup();
        let mut locks = Vec::new();
        for n in names {
            locks.push(self.lock_sandbox(n).await?);
        }
        Ok(locks)
    }

    pub(super) async fn lock_repo_of(&self, record: &Record) -> Result<Option<Lock>> {
        match record.workspace.get().repository_lock() {
            Some(repo) => Ok(Some(self.lock_repo(repo).await?)),
            None => Ok(None),
        }
    }
}

pub(super) fn reviewer(ws: &WorkspaceRecord) -> Result<&dyn Review> {
    ws.get().review().ok_or_else(|| Error::usage("this sandbox's work cannot be reviewed"))
}

/// A sandbox's own branches and archives are no place to land work.
fn refuse_forage_target(target: &str, mode: Mode) -> Result<()> {
    if !target.starts_with("forage") {
        return Ok(());
    }
    let kind = if mode == Mode::Jj { "bookmark" } else { "branch" };
    Err(Error::usage(format!(
        "{target:?} is a {kind} of forage's (a sandbox's work or an archive); land the work on one of yours"
    )))
}

/// A merge that cannot be planned while a landed change was edited again
/// (whose two versions conflict, as a rule): the error says that this is why,
/// and how to resolve it.
fn explain_divergence(mut e: Error, name: &SandboxName, divergent: &[Divergent]) -> Error {
    for d in divergent {
        e = e
            .hint(d.describe())
            .hint_run(
                "keep the edit as a change of its own with {command}, then merge again",
                d.keep_inside(name.as_str()),
            )
            .hint_run("or drop it with {command}", d.drop_inside(name.as_str()));
    }
    e
}
