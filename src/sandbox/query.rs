//! What forage tells about sandboxes: `list` (records plus one Engine API call)
//! and `status`.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::Engine;
use crate::error::{Error, Result};
use crate::names::SandboxName;
use crate::record::{Record, RecordState};
use crate::runtime::{ContainerDetails, ContainerState, ContainerSummary, Runtime};
use crate::store::Problem;
use crate::workspace::dirty_memo::Memo;
use crate::workspace::{AtStake, Count, Mode, Synced, WorkCounts, WorkspaceStatus};

/// Where a sandbox stands, as `list` and `status` show it: its container's
/// state, or what forage knows better.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SandboxState {
    /// Ready, with a container in this state.
    Container(ContainerState),
    /// Ready, its container stopped by `forage-ctl stop` (not exited by itself).
    Stopped,
    /// Ready, but its container was removed outside forage.
    Missing,
    /// An `up` or `down` stopped half way (no process holds its lock).
    Broken,
    /// An `up` is making it right now.
    Creating,
    /// A `down` is removing it right now.
    Removing,
    /// A container labelled with this FORAGE_HOME that no record owns.
    Orphan,
    /// A record forage cannot read.
    Unreadable(Problem),
}

impl SandboxState {
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxState::Container(state) => state.as_str(),
            SandboxState::Stopped => "stopped",
            SandboxState::Missing => "missing",
            SandboxState::Broken => "broken",
            SandboxState::Creating => "creating",
            SandboxState::Removing => "removing",
            SandboxState::Orphan => "orphan",
            SandboxState::Unreadable(problem) => problem.word(),
        }
    }

    pub fn is_unreadable(self) -> bool {
        matches!(self, SandboxState::Unreadable(_))
    }
}

impl fmt::Display for SandboxState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for SandboxState {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// What the agent is doing, as `list` tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Activity {
    /// Running, and it printed something in the last `IDLE_AFTER`.
    Working,
    /// Running, but it printed nothing for `IDLE_AFTER` (waiting for input).
    Idle,
    /// Its container ended (see `exit_code`).
    Exited,
    /// `forage-ctl stop` stopped it (no `exit_code`: the stop signal's is no news).
    Stopped,
}

/// How long an agent must have printed nothing for `list` to call it idle
/// (`wait --idle-for`'s default too).
pub const IDLE_AFTER: std::time::Duration = std::time::Duration::from_secs(30);

/// One row of `list`.
#[derive(Debug, Clone, Serialize)]
pub struct SandboxRow {
    pub name: String,
    /// `null` for an orphan container or a record forage cannot read.
    pub mode: Option<Mode>,
    pub template: Option<String>,
    pub status: SandboxState,
    pub branch: Option<String>,
    pub workspace: Option<String>,
    /// Seconds since the Unix epoch.
    pub created_at: Option<u64>,
    /// A record forage cannot read: its file, and why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub record_problem: Option<String>,
    /// What the agent is doing (`list` only; `null` without a container).
    pub agent: Option<Activity>,
    /// The agent's exit code, once it exited.
    pub exit_code: Option<i64>,
    /// Its published ports (`up --publish`, `port`): host port on 127.0.0.1 for each.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<crate::ports::Published>,
    /// Commits of the agent's since the base, synced or not (jj: changes, as
    /// of the last sync) (`list` only; `null` for a direct workspace, and
    /// when it cannot be known without a sync: see `ahead_unknown`).
    pub ahead: Option<usize>,
    /// Set when `ahead` is a lower bound: the agent has more commits since
    /// the last sync than `list` reads.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub ahead_at_least: bool,
    /// Why `ahead` cannot be known without a sync (shown as `?`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ahead_unknown: Option<String>,
    /// Uncommitted files: those that differ from the agent's HEAD (jj: as of
    /// the last sync) (`list` only).
    pub dirty: Option<usize>,
    /// Why `dirty` cannot be known without a sync (shown as `?`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dirty_unknown: Option<String>,
}

impl SandboxRow {
    fn new(r: &Record, status: SandboxState) -> Self {
        let ws = r.workspace.get();
        SandboxRow {
            name: r.name.to_string(),
            mode: Some(ws.mode()),
            template: Some(r.template.clone()),
            status,
            branch: ws.branch().map(str::to_owned),
            workspace: Some(ws.host_path().display().to_string()),
            created_at: Some(r.created_at),
            record_problem: None,
            agent: None,
            exit_code: None,
            ports: r.ports.clone(),
            ahead: None,
            ahead_at_least: false,
            ahead_unknown: None,
            dirty: None,
            dirty_unknown: None,
        }
    }

    /// `list`'s AHEAD and DIRTY.
    fn set_counts(&mut self, counts: WorkCounts) {
        match counts.ahead {
            Count::Exact(n) => self.ahead = Some(n),
            Count::AtLeast(n) => (self.ahead, self.ahead_at_least) = (Some(n), true),
            Count::Unknown(why) => self.ahead_unknown = Some(why),
        }
        match counts.dirty {
            Count::Exact(n) | Count::AtLeast(n) => self.dirty = Some(n),
            Count::Unknown(why) => self.dirty_unknown = Some(why),
        }
    }

    fn bare(name: String, status: SandboxState) -> Self {
        SandboxRow {
            name,
            mode: None,
            template: None,
            status,
            branch: None,
            workspace: None,
            created_at: None,
            record_problem: None,
            agent: None,
            exit_code: None,
            ports: Vec::new(),
            ahead: None,
            ahead_at_least: false,
            ahead_unknown: None,
            dirty: None,
            dirty_unknown: None,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct SandboxStatus {
    /// The branch or bookmark, against its base (git and jj sandboxes).
    pub git: Option<WorkspaceStatus>,
    /// What the `sync` that `status` ran first did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sync: Option<Synced>,
    /// Why that sync failed (the branch then shows what the host had before).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sync_error: Option<String>,
    #[serde(flatten)]
    pub row: SandboxRow,
    pub record: Record,
    pub container: Option<ContainerDetails>,
    /// `network: restricted`: the policy and the proxy that enforces it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkStatus>,
}

/// What `status` shows of a restricted sandbox's network.
#[derive(Debug, Clone, Serialize)]
pub struct NetworkStatus {
    pub mode: crate::runtime::Network,
    /// What it may reach (the template's, the allow file's and `--allow`'s).
    pub allow: Vec<String>,
    /// The keys the proxy sets, per host (names only).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub inject: Vec<crate::egress::inject::InjectRule>,
    /// The egress proxy's container and the network it reaches out through.
    pub proxy: String,
    pub outside_network: String,
    /// The sandbox's own network, and its subnet.
    pub sandbox_network: String,
    pub subnet: String,
}

impl<R: Runtime> Engine<R> {
    /// Every sandbox of this home, from the records plus one Engine API call.
    pub async fn list(&self) -> Result<Vec<SandboxRow>> {
        self.rows(false).await
    }

    /// `list` with what each agent is doing and each workspace's counts (read
    /// on the blocking pool while the engine answers; for a running agent,
    /// one more request for when it last printed).
    pub async fn overview(&self) -> Result<Vec<SandboxRow>> {
        self.rows(true).await
    }

    async fn rows(&self, detailed: bool) -> Result<Vec<SandboxRow>> {
        let (records, bad) = self.home.load_all()?;
        let workspaces: Vec<_> =
            if detailed { records.iter().map(|r| (r.name.clone(), r.workspace.clone())).collect() } else { Vec::new() };
        let label = self.home.label();
        // The engine's list, then (detailed) one request per running agent for
        // when it last printed: engine work, done while this process counts
        // commits and files on its blocking pool.
        let listing = async {
            let containers = self.runtime.list(&label).await?;
            let idle = if detailed { self.idle_agents(&records, &containers).await } else { HashSet::new() };
            Ok::<_, Error>((containers, idle))
        };
        let (listed, (mut counts, memos)) = tokio::join!(listing, counts_of(workspaces));
        let (containers, idle) = listed?;
        // Only once the engine answered: a `list` that fails changes nothing.
        save_memos(&self.home, memos).await;
        counts.resize(records.len(), None);
        let mut by_sandbox: HashMap<String, ContainerSummary> =
            containers.into_iter().map(|c| (c.sandbox.clone(), c)).collect();
        let mut rows = Vec::with_capacity(records.len() + bad.len());
        for (r, counts) in records.iter().zip(counts) {
            let container = by_sandbox.remove(r.name.as_str());
            let status = self.state_of(r, container.as_ref().map(|c| c.state))?;
            let mut row = SandboxRow::new(r, status);
            if let Some(counts) = counts {
                row.set_counts(counts);
            }
            if let Some(c) = &container {
                row.exit_code = c.exit_code.filter(|_| status != SandboxState::Stopped);
                row.agent = match c.state {
                    ContainerState::Running if idle.contains(&r.container) => Some(Activity::Idle),
                    ContainerState::Running => Some(Activity::Working),
                    _ if status == SandboxState::Stopped => Some(Activity::Stopped),
                    s if s.has_ended() => Some(Activity::Exited),
                    _ => None,
                };
            }
            rows.push(row);
        }
        // A record forage cannot read is shown, not skipped, and its container is
        // not an orphan.
        for b in bad {
            by_sandbox.remove(b.name.as_str());
            let mut row = SandboxRow::bare(b.name.to_string(), SandboxState::Unreadable(b.problem));
            row.record_problem = Some(format!("{}: {}", b.path.display(), b.detail));
            rows.push(row);
        }
        for (sandbox, _state) in by_sandbox {
            rows.push(SandboxRow::bare(sandbox, SandboxState::Orphan));
        }
        rows.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(rows)
    }

    /// The containers of `records` that run an agent that printed nothing for
    /// `IDLE_AFTER` (one engine request per running agent, all at once).
    async fn idle_agents(&self, records: &[Record], containers: &[ContainerSummary]) -> HashSet<String> {
        let running: HashSet<&str> =
            containers.iter().filter(|c| c.state == ContainerState::Running).map(|c| c.name.as_str()).collect();
        let looks = records
            .iter()
            .filter(|r| running.contains(r.container.as_str()))
            .map(|r| async move { (self.activity_of(r).await == Activity::Idle).then(|| r.container.clone()) });
        futures_util::future::join_all(looks).await.into_iter().flatten().collect()
    }

    /// Whether a running agent is working or idle: idle once it has printed
    /// nothing for `IDLE_AFTER` (counted from its creation if it never printed).
    async fn activity_of(&self, record: &Record) -> Activity {
        let created = std::time::UNIX_EPOCH + std::time::Duration::from_secs(record.created_at);
        let last = self.runtime.last_output(&record.container).await.ok().flatten().unwrap_or(created);
        let quiet = std::time::SystemTime::now().duration_since(last).unwrap_or_default();
        if quiet >= IDLE_AFTER {
            Activity::Idle
        } else {
            Activity::Working
        }
    }

    /// The sandboxes `down --all` takes: every row `list` shows.
    pub async fn all_names(&self) -> Result<Vec<SandboxName>> {
        Ok(self.list().await?.into_iter().filter_map(|r| SandboxName::parse(&r.name).ok()).collect())
    }

    /// Docker's container state, or what forage knows better.
    fn state_of(&self, r: &Record, container: Option<ContainerState>) -> Result<SandboxState> {
        Ok(match r.state {
            // Stopped by `stop`, and not started by forage since (which clears
            // `stopped_at`). A container started outside forage, that then
            // ended, reads as stopped too: the list of containers has no start times.
            RecordState::Ready => match container {
                Some(state) if state.has_ended() && r.stopped_at.is_some() => SandboxState::Stopped,
                Some(state) => SandboxState::Container(state),
                None => SandboxState::Missing,
            },
            RecordState::Creating | RecordState::Removing => {
                if self.home.try_lock_sandbox(&r.name)?.is_some() {
                    SandboxState::Broken
                } else if r.state == RecordState::Creating {
                    SandboxState::Creating
                } else {
                    SandboxState::Removing
                }
            }
        })
    }

    pub async fn status(&self, name: &SandboxName) -> Result<SandboxStatus> {
        let record = self.record(name)?;
        // Synced first, so the branch shows the agent's latest commits; skipped
        // while another command (an `up` or `down`) holds the sandbox. jj: only
        // while the agent's container runs (no helper container for a status);
        // otherwise what the last sync brought.
        let mut sync = None;
        if let Some(_lock) = self.home.try_lock_sandbox(name)? {
            let ws = record.workspace.get();
            let inside = self.run_inside_if_running(&record, false).await;
            let wants_inside = ws.inside_command(false).is_some();
            if ws.mode() != Mode::Direct && !ws.is_legacy() && (inside.is_some() || !wants_inside) {
                sync = Some(self.sync_record(&record, inside).await.map_err(|e| e.to_string()));
            }
        }
        let workspace = record.workspace.clone();
        let git = super::blocking(move || workspace.get().status()).await?;
        let container = self.runtime.inspect(&record.container).await?;
        let status = self.state_of(&record, container.as_ref().map(|c| c.state))?;
        let (sync, sync_error) = match sync {
            Some(Ok(report)) => (Some(report), None),
            Some(Err(e)) => (None, Some(e)),
            None => (None, None),
        };
        let mut row = SandboxRow::new(&record, status);
        // The same columns `list` shows, from what status read anyway.
        row.ahead = git.as_ref().map(|g| g.ahead);
        row.dirty = git.as_ref().map(|g| g.dirty.len());
        if let Some(c) = &container {
            row.exit_code = c.exit_code.filter(|_| c.state.has_ended() && status != SandboxState::Stopped);
            row.agent = match c.state {
                ContainerState::Running => Some(self.activity_of(&record).await),
                _ if status == SandboxState::Stopped => Some(Activity::Stopped),
                s if s.has_ended() => Some(Activity::Exited),
                _ => None,
            };
        }
        let label = self.home.label();
        let network = record.egress.as_ref().map(|e| NetworkStatus {
            mode: crate::runtime::Network::Restricted,
            allow: e.allow.0.iter().map(ToString::to_string).collect(),
            inject: e.inject.clone(),
            proxy: super::egress::proxy_container(&label),
            outside_network: super::egress::outside_network(&label),
            sandbox_network: e.network.clone(),
            subnet: e.subnet.clone(),
        });
        Ok(SandboxStatus { git, sync, sync_error, row, record, container, network })
    }

    /// What only sandbox `name` holds, which `down` would archive and `down
    /// --discard` would throw away (`None` for a direct workspace, which `down`
    /// never touches). Changes nothing.
    pub async fn at_stake(&self, name: &SandboxName) -> Result<Option<AtStake>> {
        let record = self.record(name)?;
        if !self.holds_work(&record) {
            return Ok(None);
        }
        // A stopped sandbox's jj runs in a helper container, as `down`'s would
        // (before the repository's lock: it may take a while).
        let inside = match self.run_inside_if_running(&record, false).await {
            Some(inside) => Some(inside),
            None => self.run_inside_in_helper(&record, false).await,
        };
        let _repo = match record.workspace.get().repository_lock() {
            Some(repo) => Some(self.lock_repo(repo).await?),
            None => None,
        };
        let workspace = record.workspace.clone();
        super::blocking(move || workspace.get().at_stake(inside)).await
    }

    /// Where the user can look at the agent's files on the host: the
    /// worktree; for a copy-on-write sandbox, the merged view the engine
    /// mounts for its container, which exists only while it runs (ADR 0003),
    /// under the engine's own directory (readable by root).
    pub async fn host_view(&self, name: &SandboxName) -> Result<PathBuf> {
        let record = self.record(name)?;
        let ws = record.workspace.get();
        let crate::workspace::WorkspaceRecord::GitWorktree(git) = &record.workspace else {
            return Ok(ws.host_path().to_path_buf());
        };
        if git.cow.is_none() {
            return Ok(ws.host_path().to_path_buf());
        }
        let merged = match self.runtime.inspect(&record.container).await? {
            Some(c) if c.state == crate::runtime::ContainerState::Running => {
                c.mounts.into_iter().find(|m| m.target == crate::runtime::WORKSPACE_TARGET).map(|m| m.source)
            }
            _ => None,
        };
        merged.ok_or_else(|| {
            Error::conflict(format!(
                "sandbox {name} is a copy-on-write sandbox and is not running: its files are an overlay the engine mounts only while it runs"
            ))
            .hint_run("{command} mounts it again", ["start", name.as_str()])
            .hint_run("or {command} shows the agent's changes", ["diff", name.as_str(), "--uncommitted"])
        })
    }

    /// The record of an existing sandbox, or a not-found error naming it.
    pub fn record(&self, name: &SandboxName) -> Result<Record> {
        self.home.load(name)?.ok_or_else(|| not_found(name))
    }
}

/// Every workspace's counts, in order, on the blocking pool: one lane per
/// core, each taking its share of the sandboxes.
/// Also returns the memos of the counts that were not remembered (`dirty_memo`).
async fn counts_of(
    workspaces: Vec<(SandboxName, crate::workspace::WorkspaceRecord)>,
) -> (Vec<Option<WorkCounts>>, Vec<(SandboxName, PathBuf, Memo)>) {
    let total = workspaces.len();
    // Sandboxes of one repository next to each other, so that a lane opens
    // each repository once (`Counting`); the counts are put back in order after.
    let mut order: Vec<(usize, (SandboxName, crate::workspace::WorkspaceRecord))> =
        workspaces.into_iter().enumerate().collect();
    order.sort_by_cached_key(|(_, (_, w))| w.get().repository().map(Path::to_path_buf));
    let lanes = std::thread::available_parallelism().map_or(2, |n| n.get()).min(total.max(1));
    let per_lane = total.div_ceil(lanes).max(1);
    let mut chunks = Vec::new();
    while !order.is_empty() {
        let tail = order.split_off(per_lane.min(order.len()));
        chunks.push(std::mem::replace(&mut order, tail));
    }
    let tasks = chunks.into_iter().map(|chunk| {
        tokio::task::spawn_blocking(move || {
            let mut shared = crate::workspace::Counting::default();
            let mut counted = Vec::with_capacity(chunk.len());
            let mut memos = Vec::new();
            for (i, (name, w)) in chunk {
                counted.push((i, w.get().counts(&mut shared)));
                memos.extend(shared.take_memos().into_iter().map(|(private, memo)| (name.clone(), private, memo)));
            }
            (counted, memos)
        })
    });
    let mut counts = vec![None; total];
    let mut memos = Vec::new();
    // A lane that panicked leaves its sandboxes uncounted (`-`), no others.
    for (counted, made) in futures_util::future::join_all(tasks).await.into_iter().flatten() {
        for (i, c) in counted {
            counts[i] = c;
        }
        memos.extend(made);
    }
    (counts, memos)
}

/// Saves the memos on the blocking pool, a lane per core (most of what a
/// `list` that remembered nothing spent beyond its walks was saving them one
/// after another on this thread, each under a lock file made and deleted:
/// docs/benchmarks.md, the cold row).
async fn save_memos(home: &crate::store::Home, mut memos: Vec<(SandboxName, PathBuf, Memo)>) {
    if memos.is_empty() {
        return;
    }
    let lanes = std::thread::available_parallelism().map_or(2, |n| n.get()).min(memos.len());
    let per_lane = memos.len().div_ceil(lanes);
    let mut tasks = Vec::new();
    while !memos.is_empty() {
        let lane = memos.split_off(memos.len().saturating_sub(per_lane));
        let home = home.clone();
        tasks.push(tokio::task::spawn_blocking(move || {
            for (name, private, memo) in lane {
                save_memo(&home, &name, &private, &memo);
            }
        }));
    }
    futures_util::future::join_all(tasks).await;
}

/// Saves a memo of sandbox `name`'s DIRTY count for the next `list`, holding
/// the lock of its private directory (`Dir::lock`), which the directory's
/// removal waits for (`untrusted::remove_locked_dir`): so it never lands in a
/// private directory being removed. Only while the record is there, and only
/// where forage keeps this sandbox's private files, whatever a record says. A
/// memo not saved only costs the next `list` a walk.
fn save_memo(home: &crate::store::Home, name: &SandboxName, private: &Path, memo: &Memo) {
    if private != home.private_dir_of(name) {
        return;
    }
    let Ok(dir) = crate::workspace::untrusted::Dir::open(private) else { return };
    let Ok(Some(_held)) = dir.lock(false) else { return };
    if home.record_path(name).exists() {
        if let Err(e) = memo.save(&dir) {
            tracing::debug!("not remembering the counts of {name}: {e}");
        }
    }
}

pub fn not_found(name: &SandboxName) -> Error {
    Error::not_found(format!("no sandbox named {:?}", name.as_str()))
        .hint_run("{command} shows the existing ones", ["list"])
}
