//! The agent's work as the host holds it, for the review commands (`diff`,
//! `log`, `merge`, `apply`). Everything here reads the user's repository (git
//! mode) or the git store of the user's jj repository (jj mode), after a sync
//! brought the agent's commits there verified, and the worktree's files as
//! `worktree_files` reads them: never the agent's own repository, and never a
//! git or jj program run in a repository the agent can write.
//!
//! A mode provides a `Work` (where the work started, its committed tip, and the
//! tree of its files as they are now); this module diffs, lists and lands it
//! with git2, the same way for both modes.

use std::collections::{BTreeSet, HashSet};
use std::path::{Path, PathBuf};

use git2::{DiffFindOptions, DiffOptions, Oid, Repository, Signature};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::names::SandboxName;

fn err(e: impl std::fmt::Display) -> Error {
    Error::workspace(format!("reading the agent's work: {e}"))
}

/// Blobs larger than this are diffed as binary (no lines shown or counted).
const MAX_DIFF_BLOB: i64 = 16 << 20;
/// A diff whose patches add up to more than this shows the rest as stats only.
const MAX_PATCH_BYTES: usize = 64 << 20;

/// The agent's work, as the host holds it after a sync.
#[derive(Debug, Clone)]
pub struct Work {
    /// The commit the work started from: where it forked from the branch it
    /// lands on (or, without one, the sandbox's base).
    pub start: Oid,
    /// Its committed tip (`start` when it committed nothing).
    pub tip: Oid,
    /// The tree of its files as they are now: the tip plus uncommitted work.
    pub current: Oid,
    /// jj: the working-copy commit whose tree `current` is (git: none; its
    /// uncommitted files are no commit yet).
    pub current_commit: Option<Oid>,
    /// The branch (git) or bookmark (jj) the sandbox was made from, if any.
    pub target: Option<String>,
    /// Paths of the worktree left out of `current`, each with why.
    pub skipped: Vec<String>,
}

/// What a review command needs from a workspace mode.
pub trait Review {
    /// The git repository on the host that holds the work: the user's
    /// repository (git), or its jj repository's git store (jj).
    fn repository(&self) -> Result<Repository>;
    /// The work, with whatever it has not committed stored into `repo` (one
    /// `repository()` opened, possibly for another sandbox of the same
    /// repository; a caller that only looks backs it with memory first).
    fn work(&self, repo: &Repository) -> Result<Work>;
    /// The commits of the work, newest first.
    fn commits(&self, repo: &Repository, work: &Work) -> Result<Vec<LogEntry>> {
        log(repo, work.tip, &[work.start])
    }
    /// Where the sandbox remembers what `merge` landed (out of the agent's reach).
    fn landed_file(&self) -> Option<PathBuf>;
    /// Where the user's branch (jj: bookmark) `target` is now.
    fn target_tip(&self, repo: &Repository, target: &str) -> Result<Oid>;
    /// The directory whose files landing on `target` rewrites (git: the
    /// checkout that has the branch checked out; jj: none, moving a bookmark
    /// writes no files), for the caller to check that no agent writes there.
    /// Refuses a target that is checked out in a sandbox's worktree.
    fn landing_checkout(&self, _repo: &Repository, _target: &str) -> Result<Option<PathBuf>> {
        Ok(None)
    }
    /// Moves `plan.target` to `plan.commit` where the user keeps it (git: in
    /// the checkout that has it checked out, `plan.checkout`, refusing a dirty
    /// one and landing all of its files or none; jj: the bookmark, which the
    /// repository's jj then imports).
    fn land(&self, repo: &Repository, plan: &LandPlan) -> Result<()>;
    /// The checkout where `merge --conflicts` left this sandbox's conflicts,
    /// for the caller to check that no agent writes there (git only).
    fn conflicts_checkout(&self) -> Result<PathBuf> {
        Err(no_conflicts_left())
    }
    /// `merge --abort`: puts that checkout back as it was before.
    fn abort_conflicts(&self, _repo: &Repository) -> Result<super::conflicts::Aborted> {
        Err(no_conflicts_left())
    }
    /// The change from `work.start` to `work.current` as uncommitted edits in
    /// the user's own checkout; refused, changing nothing, where it does not
    /// apply cleanly. Returns the paths it changed.
    fn apply(&self, repo: &Repository, work: &Work) -> Result<Vec<String>>;
    /// git: the agent's HEAD, when it is not on the sandbox's branch (whose
    /// work alone the review commands show).
    fn detached_head(&self, _repo: &Repository) -> Result<Option<DetachedHead>> {
        Ok(None)
    }
}

/// The agent's HEAD when it is detached (git): the commit it is at, and the
/// commits it reaches that the host has not got (read as the import reads
/// them, writing nothing), which `sync` does not bring and `down` archives.
#[derive(Debug, Clone, Serialize)]
pub struct DetachedHead {
    /// The sandbox's branch, which the HEAD is not on.
    pub branch: String,
    pub commit: String,
    pub summary: String,
    /// Commits at the detached HEAD not in the user's repository, newest first.
    pub unsynced: Vec<String>,
}

fn no_conflicts_left() -> Error {
    Error::usage(
        "--abort undoes a `merge --conflicts`, which only git sandboxes have: jj keeps conflicts in the changes",
    )
}

/// Backs `repo`'s object store with memory for what is written through this
/// handle from now on: a review that only looks stores the worktree's files
/// there, never in the user's repository.
pub fn in_memory(repo: &Repository) -> Result<()> {
    let odb = repo.odb().map_err(err)?;
    odb.add_new_mempack_backend(1000).map_err(err)?;
    Ok(())
}

/// One commit of the agent's, as `log` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct LogEntry {
    pub id: String,
    /// jj: the change id the commit carries.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub change_id: Option<String>,
    pub summary: String,
    pub author: String,
    /// Seconds since the Unix epoch.
    pub time: i64,
}

/// The commits `tip` reaches that none of `hide` does, newest first; jj's
/// empty, undescribed commits (a fresh working copy) left out.
pub fn log(repo: &Repository, tip: Oid, hide: &[Oid]) -> Result<Vec<LogEntry>> {
    let mut walk = repo.revwalk().map_err(err)?;
    walk.set_sorting(git2::Sort::TOPOLOGICAL | git2::Sort::TIME).map_err(err)?;
    walk.push(tip).map_err(err)?;
    for h in hide {
        walk.hide(*h).map_err(err)?;
    }
    let mut out = Vec::new();
    for id in walk {
        let commit = repo.find_commit(id.map_err(err)?).map_err(err)?;
        let message = String::from_utf8_lossy(commit.message_bytes()).trim().to_owned();
        let unchanged = commit.parent(0).is_ok_and(|p| p.tree_id() == commit.tree_id());
        if message.is_empty() && unchanged {
            continue;
        }
        let change_id =
            commit.header_field_bytes("change-id").ok().map(|b| String::from_utf8_lossy(&b).trim().to_owned());
        let author = commit.author();
        out.push(LogEntry {
            id: commit.id().to_string(),
            change_id,
            summary: message.lines().next().unwrap_or("").to_owned(),
            author: String::from_utf8_lossy(author.name_bytes()).into_owned(),
            time: commit.time().seconds(),
        });
    }
    Ok(out)
}

/// How a file changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ChangeKind {
    Added,
    Modified,
    Deleted,
    Renamed,
    TypeChanged,
}

impl ChangeKind {
    /// git's one-letter status.
    pub fn letter(self) -> char {
        match self {
            ChangeKind::Added => 'A',
            ChangeKind::Modified => 'M',
            ChangeKind::Deleted => 'D',
            ChangeKind::Renamed => 'R',
            ChangeKind::TypeChanged => 'T',
        }
    }
}

/// One changed file: what `diff --json` lists, and its patch for the text form.
#[derive(Debug, Clone, Serialize)]
pub struct FileChange {
    pub path: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub old_path: Option<String>,
    pub status: ChangeKind,
    pub additions: usize,
    pub deletions: usize,
    pub binary: bool,
    /// The unified patch (`diff --git` header first), as git prints it; empty
    /// when the diff was too large to show whole.
    #[serde(skip)]
    pub patch: String,
}

/// The files that differ from `old` to `new` (trees; `None` is empty), with
/// renames found and each file's patch.
pub fn diff(repo: &Repository, old: Option<Oid>, new: Option<Oid>) -> Result<Vec<FileChange>> {
    diff_between(repo, old, new, ("a/", "b/"))
}

/// `diff`, with the patches' headers naming the old and new side by
/// `prefixes` (`agent-a/src/x` and `agent-b/src/x` for two sandboxes) instead
/// of git's `a/` and `b/`.
pub fn diff_between(
    repo: &Repository,
    old: Option<Oid>,
    new: Option<Oid>,
    prefixes: (&str, &str),
) -> Result<Vec<FileChange>> {
    let tree = |id: Option<Oid>| id.map(|id| repo.find_tree(id)).transpose().map_err(err);
    let (old, new) = (tree(old)?, tree(new)?);
    let mut opts = DiffOptions::new();
    opts.max_size(MAX_DIFF_BLOB).show_binary(true).old_prefix(prefixes.0).new_prefix(prefixes.1);
    let mut diff = repo.diff_tree_to_tree(old.as_ref(), new.as_ref(), Some(&mut opts)).map_err(err)?;
    diff.find_similar(Some(DiffFindOptions::new().renames(true))).map_err(err)?;
    let mut out = Vec::new();
    let mut shown = 0usize;
    for (i, delta) in diff.deltas().enumerate() {
        let status = match delta.status() {
            git2::Delta::Added | git2::Delta::Copied => ChangeKind::Added,
            git2::Delta::Deleted => ChangeKind::Deleted,
            git2::Delta::Renamed => ChangeKind::Renamed,
            git2::Delta::Typechange => ChangeKind::TypeChanged,
            _ => ChangeKind::Modified,
        };
        let path_of = |f: git2::DiffFile<'_>| f.path_bytes().map(|p| String::from_utf8_lossy(p).into_owned());
        let new_path = path_of(delta.new_file());
        let old_path = path_of(delta.old_file());
        let path = new_path.clone().or_else(|| old_path.clone()).unwrap_or_default();
        let mut patch = git2::Patch::from_diff(&diff, i).map_err(err)?;
        let (binary, additions, deletions, text) = match patch.as_mut() {
            Some(p) => {
                let (_, adds, dels) = p.line_stats().map_err(err)?;
                let binary = delta.flags().is_binary();
                let text = if shown < MAX_PATCH_BYTES {
                    String::from_utf8_lossy(&p.to_buf().map_err(err)?).into_owned()
                } else {
                    String::new()
                };
                (binary, adds, dels, text)
            }
            None => (true, 0, 0, String::new()),
        };
        shown += text.len();
        out.push(FileChange {
            old_path: (status == ChangeKind::Renamed).then_some(old_path).flatten(),
            path,
            status,
            additions,
            deletions,
            binary,
            patch: text,
        });
    }
    Ok(out)
}

/// The tree of commit `id`.
pub fn tree_of(repo: &Repository, id: Oid) -> Result<Oid> {
    repo.find_commit(id).map(|c| c.tree_id()).map_err(err)
}

/// How `merge` lands the work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LandHow {
    /// A fast-forward when the target has not moved, else a merge commit.
    Merge,
    /// One new commit on the target with the whole change.
    Squash,
    /// Each of the agent's commits copied onto the target, in order.
    Rebase,
}

/// What `merge` will do, computed (its commits written, no ref moved) for the
/// user to see before anything of theirs changes.
#[derive(Debug, Clone, Serialize)]
pub struct LandPlan {
    pub sandbox: String,
    /// The branch (git) or bookmark (jj) that moves.
    pub target: String,
    /// Where it is now.
    pub before: String,
    /// Where it will be; equal to `before` when there is nothing to land.
    pub commit: String,
    pub how: LandHow,
    /// True when the target moves to the agent's own commit, making none.
    pub fast_forward: bool,
    /// True when the target already holds the work, by content (a merge
    /// would change none of its files), however it got there: nothing lands.
    pub already_on_target: bool,
    /// The agent's commits being landed, newest first.
    pub commits: Vec<LogEntry>,
    /// Uncommitted files of the sandbox's, landed as a commit of their own
    /// first (`merge`, `rebase`) or with the rest (`squash`).
    pub uncommitted: Vec<String>,
    /// The tree of the sandbox's files that this lands (what `down` then finds
    /// already landed).
    pub tree: String,
    /// Paths of the sandbox's worktree forage did not read (each with why):
    /// landed as the sandbox's committed version, or not at all.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub not_read: Vec<String>,
    /// The checkout whose files landing rewrites, as `landing_checkout` found
    /// it and the caller checked it: `land` writes nowhere else.
    #[serde(skip)]
    pub checkout: Option<PathBuf>,
    /// `merge --conflicts` where the work conflicts: the files left with
    /// conflict markers in the checkout. `commit` is then a commit of the
    /// files as they are left (markers and all) on the target, which no
    /// branch moves to; `merge_head` the agent's commit the user's own
    /// `git commit` concludes the merge with.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub conflicts: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub merge_head: Option<String>,
    /// jj: the uncommitted files are the agent's working-copy change.
    #[serde(skip)]
    pub jj: bool,
    /// jj: changes an earlier `merge` landed that the agent edited again
    /// since (the sync before this plan found them).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub divergent: Vec<crate::workspace::jj::Divergent>,
}

impl LandPlan {
    pub fn is_empty(&self) -> bool {
        self.commit == self.before
    }

    /// True when landing leaves conflicts in the checkout (`--conflicts`).
    pub fn leaves_conflicts(&self) -> bool {
        !self.conflicts.is_empty()
    }

    pub fn before_id(&self) -> Result<Oid> {
        Oid::from_str(&self.before).map_err(err)
    }

    pub fn commit_id(&self) -> Result<Oid> {
        Oid::from_str(&self.commit).map_err(err)
    }
}

/// What a sandbox's `merge` landed, kept in FORAGE_HOME/private/NAME: `down`
/// finds work whose files are exactly these, still on a branch, already landed.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Landed {
    pub target: String,
    pub commit: String,
    pub tree: String,
}

impl Landed {
    pub fn read(file: &std::path::Path) -> Option<Landed> {
        serde_json::from_slice(&std::fs::read(file).ok()?).ok()
    }

    pub fn write(&self, file: &std::path::Path) -> Result<()> {
        let tmp = file.with_extension("tmp");
        let json = serde_json::to_vec(self).map_err(err)?;
        std::fs::write(&tmp, json)
            .and_then(|()| std::fs::rename(&tmp, file))
            .map_err(|e| Error::other(format!("writing {}: {e}", file.display())))
    }

    /// True when `current` (the tree of the sandbox's files now) is what was
    /// landed, and the landed commit is still held by one of `tips` (the
    /// user's branches or bookmarks): nothing of the sandbox's would then be lost.
    pub fn covers(&self, repo: &Repository, current: Oid, tips: &[Oid]) -> bool {
        let (Ok(tree), Ok(commit)) = (Oid::from_str(&self.tree), Oid::from_str(&self.commit)) else { return false };
        tree == current && held_by(repo, commit, tips)
    }
}

/// True when one of `tips` is `commit` or descends from it.
pub fn held_by(repo: &Repository, commit: Oid, tips: &[Oid]) -> bool {
    tips.iter().any(|t| *t == commit || repo.graph_descendant_of(*t, commit).unwrap_or(false))
}

/// Who the commits forage makes for the user are by: the user's git identity,
/// else forage.
fn signature(repo: &Repository) -> Result<Signature<'static>> {
    repo.signature().or_else(|_| Signature::now("forage", "forage@localhost")).map_err(err)
}

/// Where and how `merge` lands the work.
#[derive(Debug, Clone)]
pub struct Landing<'a> {
    /// The branch (git) or bookmark (jj).
    pub target: &'a str,
    /// Where it is now.
    pub tip: Oid,
    pub how: LandHow,
    /// The squashed commit's message (default: one made from the agent's).
    pub message: Option<&'a str>,
    /// What the target is: "branch" (git) or "bookmark" (jj).
    pub kind: &'a str,
    /// Where the work conflicts, plan to leave the conflicts marked in the
    /// user's checkout (`merge --conflicts`, git) rather than refuse.
    pub keep_conflicts: bool,
}

/// Computes how to land `work` of sandbox `name` as `landing` says: writes the
/// commits that needs into `repo` and moves nothing.
pub fn plan(
    repo: &Repository,
    name: &SandboxName,
    work: &Work,
    commits: Vec<LogEntry>,
    landing: &Landing<'_>,
) -> Result<LandPlan> {
    let (target_tip, how) = (landing.tip, landing.how);
    let tip_tree = tree_of(repo, work.tip)?;
    let uncommitted: Vec<String> = if tip_tree == work.current {
        Vec::new()
    } else {
        diff(repo, Some(tip_tree), Some(work.current))?.into_iter().map(|f| f.path).collect()
    };
    // jj's working-copy commit is landed as the uncommitted files, not as a commit.
    let mut commits = commits;
    if !uncommitted.is_empty() {
        if let Some(wc) = work.current_commit {
            commits.retain(|c| c.id != wc.to_string());
        }
    }
    let sig = signature(repo)?;
    // The uncommitted files as one commit on the tip (a ref of nobody's),
    // unless they are one already (jj's working-copy commit).
    let head = if uncommitted.is_empty() {
        work.tip
    } else if let Some(commit) = work.current_commit {
        commit
    } else {
        let parent = repo.find_commit(work.tip).map_err(err)?;
        let tree = repo.find_tree(work.current).map_err(err)?;
        let text = format!("Uncommitted work of sandbox {name}\n");
        repo.commit(None, &sig, &sig, &text, &tree, &[&parent]).map_err(err)?
    };
    let merged = match how {
        LandHow::Merge => merge(repo, name, head, target_tip, &sig)?,
        LandHow::Squash => squash(repo, name, work, &commits, target_tip, &sig, landing.message)?,
        LandHow::Rebase => rebase(repo, work.start, head, target_tip)?,
    };
    let (commit, conflicts) = match merged {
        Ok(commit) => (commit, Vec::new()),
        Err(Conflicted(paths)) if landing.keep_conflicts => {
            (super::conflicts::marked_commit(repo, name, landing.target, head, target_tip)?, paths)
        }
        Err(Conflicted(paths)) => return Err(conflict_error(repo, name, work, landing, &paths)),
    };
    let fast_forward = commit == head && commit != target_tip;
    Ok(LandPlan {
        sandbox: name.to_string(),
        target: landing.target.to_owned(),
        before: target_tip.to_string(),
        commit: commit.to_string(),
        how,
        fast_forward,
        already_on_target: commit == target_tip,
        commits,
        uncommitted,
        tree: work.current.to_string(),
        not_read: work.skipped.clone(),
        checkout: None,
        merge_head: (!conflicts.is_empty()).then(|| head.to_string()),
        conflicts,
        jj: work.current_commit.is_some(),
        divergent: Vec::new(),
    })
}

/// The files where a merge conflicts, sorted.
#[derive(Debug)]
pub struct Conflicted(pub Vec<String>);

/// A commit to land, or the files where the work conflicts with the target.
type Merged = std::result::Result<Oid, Conflicted>;

/// The target already holds `head`: nothing; `head` descends from the target:
/// `head` (a fast-forward); else a merge commit of the two, unless the
/// target's files already hold every change of `head`'s (it landed another
/// way, `--squash` say): then nothing too, rather than an empty merge.
fn merge(repo: &Repository, name: &SandboxName, head: Oid, target_tip: Oid, sig: &Signature<'_>) -> Result<Merged> {
    if head == target_tip || repo.graph_descendant_of(target_tip, head).map_err(err)? {
        return Ok(Ok(target_tip));
    }
    if repo.graph_descendant_of(head, target_tip).map_err(err)? {
        return Ok(Ok(head));
    }
    let ours = repo.find_commit(target_tip).map_err(err)?;
    let theirs = repo.find_commit(head).map_err(err)?;
    let mut index = repo.merge_commits(&ours, &theirs, None).map_err(err)?;
    if let Some(conflicted) = conflicts_of(&index)? {
        return Ok(Err(conflicted));
    }
    let tree_id = index.write_tree_to(repo).map_err(err)?;
    if tree_id == ours.tree_id() {
        return Ok(Ok(target_tip));
    }
    let tree = repo.find_tree(tree_id).map_err(err)?;
    let text = format!("Merge the work of sandbox {name}\n");
    repo.commit(None, sig, sig, &text, &tree, &[&ours, &theirs]).map(Ok).map_err(err)
}

/// One commit on the target with the change from `work.start` to its files now.
fn squash(
    repo: &Repository,
    name: &SandboxName,
    work: &Work,
    commits: &[LogEntry],
    target_tip: Oid,
    sig: &Signature<'_>,
    message: Option<&str>,
) -> Result<Merged> {
    let ours = repo.find_commit(target_tip).map_err(err)?;
    let base = repo.find_tree(tree_of(repo, work.start)?).map_err(err)?;
    let theirs = repo.find_tree(work.current).map_err(err)?;
    let mut index = repo.merge_trees(&base, &ours.tree().map_err(err)?, &theirs, None).map_err(err)?;
    if let Some(conflicted) = conflicts_of(&index)? {
        return Ok(Err(conflicted));
    }
    let tree_id = index.write_tree_to(repo).map_err(err)?;
    if tree_id == ours.tree_id() {
        return Ok(Ok(target_tip));
    }
    let tree = repo.find_tree(tree_id).map_err(err)?;
    let text = match message {
        Some(m) => format!("{}\n", m.trim_end()),
        None => squash_message(name, commits),
    };
    repo.commit(None, sig, sig, &text, &tree, &[&ours]).map(Ok).map_err(err)
}

/// "The work of sandbox x", then the agent's commit summaries, oldest first.
fn squash_message(name: &SandboxName, commits: &[LogEntry]) -> String {
    let mut text = format!("The work of sandbox {name}\n");
    if !commits.is_empty() {
        text.push('\n');
        for c in commits.iter().rev() {
            text.push_str(&format!("- {}\n", if c.summary.is_empty() { "(no description)" } else { &c.summary }));
        }
    }
    text
}

/// The commits from `start` to `head` copied onto the target, oldest first;
/// their authors and messages kept.
fn rebase(repo: &Repository, start: Oid, head: Oid, target_tip: Oid) -> Result<Merged> {
    let mut walk = repo.revwalk().map_err(err)?;
    walk.set_sorting(git2::Sort::TOPOLOGICAL | git2::Sort::REVERSE).map_err(err)?;
    walk.push(head).map_err(err)?;
    walk.hide(start).map_err(err)?;
    walk.hide(target_tip).map_err(err)?;
    let committer = signature(repo)?;
    let mut onto = repo.find_commit(target_tip).map_err(err)?;
    for id in walk {
        let commit = repo.find_commit(id.map_err(err)?).map_err(err)?;
        if commit.parent_count() > 1 {
            return Err(Error::conflict(format!(
                "the agent's work holds a merge commit ({}), which --rebase cannot copy; use --squash, or merge without either",
                &commit.id().to_string()[..12]
            )));
        }
        let mut index = repo.cherrypick_commit(&commit, &onto, 0, None).map_err(err)?;
        if let Some(conflicted) = conflicts_of(&index)? {
            return Ok(Err(conflicted));
        }
        let tree = repo.find_tree(index.write_tree_to(repo).map_err(err)?).map_err(err)?;
        if tree.id() == onto.tree_id() {
            continue;
        }
        let message = String::from_utf8_lossy(commit.message_bytes()).into_owned();
        let copied = repo.commit(None, &commit.author(), &committer, &message, &tree, &[&onto]).map_err(err)?;
        onto = repo.find_commit(copied).map_err(err)?;
    }
    Ok(Ok(onto.id()))
}

/// The files where `index` (a merge's) conflicts, if any, sorted.
fn conflicts_of(index: &git2::Index) -> Result<Option<Conflicted>> {
    if !index.has_conflicts() {
        return Ok(None);
    }
    let mut paths: Vec<String> = index
        .conflicts()
        .map_err(err)?
        .flatten()
        .filter_map(|c| c.our.or(c.their).or(c.ancestor))
        .map(|e| String::from_utf8_lossy(&e.path).into_owned())
        .collect();
    paths.sort();
    paths.dedup();
    Ok(Some(Conflicted(paths)))
}

/// A merge that conflicts is refused before anything moves, naming the
/// target, each file (escaped: the agent chose its name) and whether the
/// agent's commits or its uncommitted files bring the conflict, and the
/// commands that resolve it: in the sandbox, or (git) in the user's checkout.
fn conflict_error(
    repo: &Repository,
    name: &SandboxName,
    work: &Work,
    landing: &Landing<'_>,
    paths: &[String],
) -> Error {
    let committed = committed_conflicts(repo, work, landing.tip).unwrap_or_else(|_| paths.to_vec());
    let label = |p: &String| {
        let part = if committed.contains(p) { "committed" } else { "uncommitted" };
        format!("{p:?} ({part})")
    };
    let shown: Vec<String> = paths.iter().take(20).map(label).collect();
    let more = paths.len().saturating_sub(shown.len());
    let files = format!(
        "{} file{}: {}{}",
        paths.len(),
        if paths.len() == 1 { "" } else { "s" },
        shown.join(", "),
        if more > 0 { format!(" and {more} more") } else { String::new() }
    );
    let (kind, target) = (landing.kind, landing.target);
    let e = Error::conflict(format!(
        "the work of sandbox {name} conflicts with {kind} {target:?} in {files}; nothing was changed"
    ))
    .hint_run(
        format!("bring {target} into the sandbox, for its agent to resolve what conflicts there, then merge again: {{command}}"),
        ["update", name.as_str()],
    );
    if landing.kind == "branch" {
        e.hint_run(
            "or resolve them in your checkout: {command} leaves them there marked, for your `git commit` (`--abort` puts it back)",
            ["merge", name.as_str(), "--conflicts"],
        )
    } else {
        e
    }
}

/// The files where the agent's commits alone (its uncommitted files left
/// out) conflict with the target's tip `target_tip`.
fn committed_conflicts(repo: &Repository, work: &Work, target_tip: Oid) -> Result<Vec<String>> {
    let tree = |id: Oid| repo.find_tree(id).map_err(err);
    let base = tree(tree_of(repo, work.start)?)?;
    let ours = tree(tree_of(repo, target_tip)?)?;
    let theirs = tree(tree_of(repo, work.tip)?)?;
    let index = repo.merge_trees(&base, &ours, &theirs, None).map_err(err)?;
    Ok(conflicts_of(&index)?.map(|c| c.0).unwrap_or_default())
}

/// Applies the change from tree `old` to tree `new` to the working directory
/// of `checkout` as uncommitted edits, like `git apply`: every hunk is checked
/// first, and where one does not apply nothing is changed (exit 4, with
/// `hint`). Returns the paths touched.
pub fn apply_to_workdir(checkout: &Repository, old: Oid, new: Oid, what: &str, hint: &str) -> Result<Vec<String>> {
    let old = checkout.find_tree(old).map_err(err)?;
    let new = checkout.find_tree(new).map_err(err)?;
    let mut opts = DiffOptions::new();
    opts.show_binary(true);
    let diff = checkout.diff_tree_to_tree(Some(&old), Some(&new), Some(&mut opts)).map_err(err)?;
    let paths: Vec<String> = diff
        .deltas()
        .filter_map(|d| d.new_file().path_bytes().or(d.old_file().path_bytes()))
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .collect();
    let refused = |why: &str| {
        Error::conflict(format!(
            "the agent's change does not apply cleanly to your {what} ({why}); nothing was changed"
        ))
    };
    let workdir = checkout.workdir().ok_or_else(|| err("the repository has no working directory"))?;
    let dirs = directories_where_files_change(workdir, &diff);
    if !dirs.is_empty() {
        let (verb, them) = if dirs.len() == 1 { ("is a directory", "it") } else { ("are directories", "them") };
        return Err(refused(&format!("{} {verb} there, where the change edits a file", dirs.join(", ")))
            .hint(format!("move {them} aside first, then apply again")));
    }
    let mut check = git2::ApplyOptions::new();
    check.check(true);
    checkout
        .apply(&diff, git2::ApplyLocation::WorkDir, Some(&mut check))
        .map_err(|e| refused(&reason(&e)).hint(hint.to_owned()))?;
    let blocking = in_the_way(workdir, &diff);
    if !blocking.is_empty() {
        let (verb, them) = if blocking.len() == 1 { ("is", "it") } else { ("are", "them") };
        return Err(refused(&format!("{} {verb} in the way of what it adds", blocking.join(", ")))
            .hint(format!("move {them} aside first, then apply again")));
    }
    checkout.apply(&diff, git2::ApplyLocation::WorkDir, None).map_err(|e| {
        // libgit2 finds a checkout's conflicts before it writes anything, so
        // one it finds that `in_the_way` missed has still changed nothing.
        if e.code() == git2::ErrorCode::Conflict {
            refused(&reason(&e)).hint("move the files in the way aside first, then apply again")
        } else {
            Error::workspace(format!("applying the work: {e}"))
        }
    })?;
    Ok(paths)
}

/// What libgit2 said went wrong: its message, or, where it failed without
/// one (it then says "no error"), its error code.
pub fn reason(e: &git2::Error) -> String {
    match e.message() {
        "" | "no error" => format!("libgit2 gave no reason, only the code {:?}", e.code()),
        message => message.to_owned(),
    }
}

/// The files `diff` changes or deletes that are directories in `workdir`:
/// libgit2's check fails on them without saying why.
fn directories_where_files_change(workdir: &Path, diff: &git2::Diff<'_>) -> Vec<String> {
    use git2::Delta;
    diff.deltas()
        .filter(|d| !matches!(d.status(), Delta::Added | Delta::Copied))
        .filter_map(|d| d.old_file().path())
        .filter(|path| std::fs::symlink_metadata(workdir.join(path)).is_ok_and(|m| m.is_dir()))
        .map(|path| path.display().to_string())
        .collect()
}

/// What stands in `workdir` where `diff` adds a file: anything at that path,
/// or a non-directory at one of its parents that the diff does not delete.
/// libgit2's check pass reads only the files a diff changes, so without this
/// an untracked file there fails the apply later, in libgit2's words, and an
/// ignored one (a `.env`, say) is overwritten without a word; like
/// `git apply`, anything already there is refused instead.
fn in_the_way(workdir: &Path, diff: &git2::Diff<'_>) -> Vec<String> {
    use git2::Delta;
    let deleted: HashSet<&Path> =
        diff.deltas().filter(|d| d.status() == Delta::Deleted).filter_map(|d| d.old_file().path()).collect();
    let added = diff
        .deltas()
        .filter(|d| matches!(d.status(), Delta::Added | Delta::Renamed | Delta::Copied))
        .filter_map(|d| d.new_file().path());
    let mut blocking = BTreeSet::new();
    for path in added {
        let parents = path.ancestors().skip(1).filter(|a| !a.as_os_str().is_empty() && !deleted.contains(a));
        for parent in parents {
            if std::fs::symlink_metadata(workdir.join(parent)).is_ok_and(|m| !m.is_dir()) {
                blocking.insert(parent.display().to_string());
            }
        }
        if std::fs::symlink_metadata(workdir.join(path)).is_ok() {
            blocking.insert(path.display().to_string());
        }
    }
    blocking.into_iter().collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A commit of `files` (each 100644) on `parent`, for unit tests.
    pub(crate) fn commit(repo: &Repository, parent: Option<Oid>, files: &[(&str, &str)], message: &str) -> Oid {
        let mut index = git2::Index::new().unwrap();
        for (path, content) in files {
            let id = repo.blob(content.as_bytes()).unwrap();
            let entry = git2::IndexEntry {
                ctime: git2::IndexTime::new(0, 0),
                mtime: git2::IndexTime::new(0, 0),
                dev: 0,
                ino: 0,
                mode: 0o100644,
                uid: 0,
                gid: 0,
                file_size: 0,
                id,
                flags: path.len() as u16,
                flags_extended: 0,
                path: path.as_bytes().to_vec(),
            };
            index.add(&entry).unwrap();
        }
        let tree = repo.find_tree(index.write_tree_to(repo).unwrap()).unwrap();
        let sig = Signature::now("t", "t@example.com").unwrap();
        let parents: Vec<git2::Commit<'_>> = parent.map(|p| repo.find_commit(p).unwrap()).into_iter().collect();
        let parents: Vec<&git2::Commit<'_>> = parents.iter().collect();
        repo.commit(None, &sig, &sig, message, &tree, &parents).unwrap()
    }

    fn landing(tip: Oid, how: LandHow) -> Landing<'static> {
        Landing { target: "main", tip, how, message: None, kind: "branch", keep_conflicts: false }
    }

    fn work(repo: &Repository, start: Oid, tip: Oid) -> Work {
        Work {
            start,
            tip,
            current: tree_of(repo, tip).unwrap(),
            current_commit: None,
            target: None,
            skipped: Vec::new(),
        }
    }

    #[test]
    fn lands_by_fast_forward_merge_squash_and_rebase_and_refuses_conflicts() {
        let dir = tempfile::tempdir().unwrap();
        let repo = Repository::init(dir.path()).unwrap();
        let name = SandboxName::parse("s").unwrap();
        let base = commit(&repo, None, &[("a", "1\n2\n3\n")], "base");
        let one = commit(&repo, Some(base), &[("a", "1\n2\n3\n"), ("b", "b\n")], "add b");
        let two = commit(&repo, Some(one), &[("a", "1\n2\nthree\n"), ("b", "b\n")], "change a");
        let w = work(&repo, base, two);
        let commits = log(&repo, two, &[base]).unwrap();
        assert_eq!(commits.iter().map(|c| c.summary.as_str()).collect::<Vec<_>>(), ["change a", "add b"]);

        // The target did not move: a fast-forward, whatever was asked but squash.
        let p = plan(&repo, &name, &w, commits.clone(), &landing(base, LandHow::Merge)).unwrap();
        assert!(p.fast_forward && p.commit == two.to_string());
        // The target moved elsewhere in a: merged, squashed, rebased.
        let moved = commit(&repo, Some(base), &[("a", "one\n2\n3\n")], "user");
        for how in [LandHow::Merge, LandHow::Squash, LandHow::Rebase] {
            let p = plan(&repo, &name, &w, commits.clone(), &landing(moved, how)).unwrap();
            let landed = repo.find_commit(p.commit_id().unwrap()).unwrap();
            let a = landed.tree().unwrap().get_path(std::path::Path::new("a")).unwrap().to_object(&repo).unwrap();
            assert_eq!(a.as_blob().unwrap().content(), b"one\n2\nthree\n", "{how:?}");
            assert!(repo.graph_descendant_of(landed.id(), moved).unwrap(), "{how:?}");
            let parents = landed.parent_count();
            assert_eq!(parents, if how == LandHow::Merge { 2 } else { 1 }, "{how:?}");
        }
        // A conflicting change lands nowhere.
        let clash = commit(&repo, Some(base), &[("a", "1\n2\nTHREE\n")], "clash");
        for how in [LandHow::Merge, LandHow::Squash, LandHow::Rebase] {
            let e = plan(&repo, &name, &w, commits.clone(), &landing(clash, how)).unwrap_err();
            assert_eq!(e.exit_code(), 4, "{how:?}: {e}");
            let text = e.to_string();
            assert!(text.contains("conflicts with branch \"main\" in 1 file: \"a\" (committed)"), "{text}");
        }
    }

    #[test]
    fn work_the_target_already_has_lands_nothing_whichever_way_it_landed() {
        let dir = tempfile::tempdir().unwrap();
        let repo = Repository::init(dir.path()).unwrap();
        let name = SandboxName::parse("s").unwrap();
        let base = commit(&repo, None, &[("a", "1\n")], "base");
        let work_tip = commit(&repo, Some(base), &[("a", "1\n"), ("b", "b\n")], "add b");
        let w = work(&repo, base, work_tip);
        let commits = log(&repo, work_tip, &[base]).unwrap();
        // main moved, then the work was squashed onto it: its files hold the work.
        let moved = commit(&repo, Some(base), &[("a", "one\n")], "user");
        let squashed = commit(&repo, Some(moved), &[("a", "one\n"), ("b", "b\n")], "squashed");
        for how in [LandHow::Merge, LandHow::Squash, LandHow::Rebase] {
            let mut w = w.clone();
            w.start = repo.merge_base(squashed, work_tip).unwrap();
            let p = plan(&repo, &name, &w, commits.clone(), &landing(squashed, how)).unwrap();
            assert!(p.is_empty() && p.already_on_target, "{how:?}: {p:?}");
        }
        // Work the target lacks is no such thing.
        let p = plan(&repo, &name, &w, commits, &landing(moved, LandHow::Merge)).unwrap();
        assert!(!p.is_empty() && !p.already_on_target, "{p:?}");
    }

    #[test]
    fn a_refused_apply_says_why_where_libgit2_does_not() {
        let dir = tempfile::tempdir().unwrap();
        let repo = Repository::init(dir.path()).unwrap();
        let old = tree_of(&repo, commit(&repo, None, &[("a", "1\n2\n3\n")], "old")).unwrap();
        let new = tree_of(&repo, commit(&repo, None, &[("a", "1\n2\nthree\n")], "new")).unwrap();
        // A directory where the change edits a file: libgit2's check fails
        // saying only "no error".
        std::fs::create_dir(dir.path().join("a")).unwrap();
        let e = apply_to_workdir(&repo, old, new, "checkout", "hint").unwrap_err().to_string();
        assert!(!e.contains("no error"), "{e}");
        assert!(e.contains("(a is a directory there, where the change edits a file)"), "{e}");
        assert!(std::fs::read_dir(dir.path().join("a")).unwrap().next().is_none(), "nothing was changed");
    }

    #[test]
    fn what_stands_where_a_change_adds_files_is_in_the_way() {
        let dir = tempfile::tempdir().unwrap();
        let repo = Repository::init(dir.path()).unwrap();
        let old = commit(&repo, None, &[("a", "file\n")], "old");
        let new = commit(&repo, None, &[("a/b", "b\n"), ("c/d", "d\n"), ("e", "e\n")], "new");
        let (old, new) =
            (repo.find_commit(old).unwrap().tree().unwrap(), repo.find_commit(new).unwrap().tree().unwrap());
        let diff = repo.diff_tree_to_tree(Some(&old), Some(&new), None).unwrap();
        let top = dir.path();
        // The file a the change deletes is not in the way of its a/b.
        std::fs::write(top.join("a"), "file\n").unwrap();
        assert_eq!(in_the_way(top, &diff), Vec::<String>::new());
        // A symlink where it adds a directory is, and so is any file it adds.
        std::fs::create_dir(top.join("elsewhere")).unwrap();
        std::os::unix::fs::symlink("elsewhere", top.join("c")).unwrap();
        std::fs::write(top.join("e"), "mine\n").unwrap();
        assert_eq!(in_the_way(top, &diff), ["c", "e"]);
    }

    #[test]
    fn diffs_count_lines_find_renames_and_show_binary_files() {
        let dir = tempfile::tempdir().unwrap();
        let repo = Repository::init(dir.path()).unwrap();
        let old = commit(&repo, None, &[("keep", "x\n"), ("moved", "a\nb\nc\nd\ne\n"), ("gone", "g\n")], "old");
        let new = commit(&repo, None, &[("keep", "x\ny\n"), ("there", "a\nb\nc\nd\ne\n"), ("bin", "\0\x01")], "new");
        let files = diff(&repo, Some(tree_of(&repo, old).unwrap()), Some(tree_of(&repo, new).unwrap())).unwrap();
        let by_path = |p: &str| files.iter().find(|f| f.path == p).unwrap_or_else(|| panic!("{p}: {files:?}"));
        assert_eq!((by_path("keep").status, by_path("keep").additions), (ChangeKind::Modified, 1));
        assert_eq!(by_path("there").status, ChangeKind::Renamed);
        assert_eq!(by_path("there").old_path.as_deref(), Some("moved"));
        assert_eq!(by_path("gone").status, ChangeKind::Deleted);
        assert!(by_path("bin").binary);
        assert!(by_path("keep").patch.starts_with("diff --git a/keep b/keep"), "{}", by_path("keep").patch);
    }

    #[test]
    fn a_line_break_in_a_name_breaks_no_line_of_the_patch() {
        let dir = tempfile::tempdir().unwrap();
        let repo = Repository::init(dir.path()).unwrap();
        let name = "x\nforage-ctl: all good";
        let old = commit(&repo, None, &[("a", "a\n")], "old");
        let new = commit(&repo, None, &[("a", "a\n"), (name, "text\n"), ("bin", "\0")], "new");
        let mut files = diff(&repo, Some(tree_of(&repo, old).unwrap()), Some(tree_of(&repo, new).unwrap())).unwrap();
        files.extend(diff(&repo, Some(tree_of(&repo, new).unwrap()), Some(tree_of(&repo, old).unwrap())).unwrap());
        for f in &files {
            assert!(!f.patch.lines().any(|l| l.starts_with("forage-ctl")), "{}", f.patch);
        }
        assert!(files.iter().any(|f| f.path == name), "{files:?}");
    }

    #[test]
    fn memory_backed_writes_never_reach_the_repository() {
        let dir = tempfile::tempdir().unwrap();
        let repo = Repository::init(dir.path()).unwrap();
        in_memory(&repo).unwrap();
        let id = repo.blob(b"only in memory").unwrap();
        assert!(repo.find_blob(id).is_ok());
        let fresh = Repository::open(dir.path()).unwrap();
        assert!(fresh.find_blob(id).is_err(), "the blob reached the object store on disk");
    }
}
