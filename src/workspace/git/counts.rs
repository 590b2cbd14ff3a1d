//! `list`'s AHEAD and DIRTY for a git-worktree sandbox, true without a sync:
//! AHEAD counts the commits on the agent's branch in its private repository
//! (what the next sync would bring) on top of the host's branch, and DIRTY
//! compares the worktree with the agent's HEAD, as `git status` inside does.
//! The agent's refs and objects are read by `peek`, never imported.

use std::collections::HashMap;
use std::path::Path;

use git2::{Oid, Repository};

use super::peek::{AgentRef, AgentTips, Peek, Unsynced, MAX_UNSYNCED};
use super::private::PrivateRepo;
use super::GitWorkspace;
use crate::workspace::dirty_memo::Memo;
use crate::workspace::untrusted::Dir;
use crate::workspace::{Count, Counting, WorkCounts};

impl GitWorkspace {
    pub(super) fn list_counts(&self, shared: &mut Counting) -> Option<WorkCounts> {
        let private_dir = self.private.as_deref()?;
        let private = PrivateRepo { dir: private_dir };
        let opened = shared.repository(&self.common_dir).ok()?;
        let (repo, rules) = &*opened;
        let host_tip = self.tip(repo);
        let git = Dir::open(&private.git_dir());
        let agent = match &git {
            Ok(git) => AgentTips::read(git, &self.branch),
            // No private repository (yet): the host's branch is all there is.
            Err(_) => AgentTips { head: host_tip.map_or(AgentRef::Absent, AgentRef::Commit), branch: AgentRef::Absent },
        };
        let mut peek = LazyPeek { repo, git: git.as_ref().ok(), peek: None };

        let upstream = match &self.base_ref {
            Some(r) => shared.ref_target(&self.common_dir, repo, r),
            None => None,
        }
        .or_else(|| Oid::from_str(&self.base).ok());
        // Read only when the agent's tip is not the host's (usually it is).
        let last_synced = || private.last_synced().or_else(|| Oid::from_str(&self.base).ok());
        let ahead = match agent.branch {
            AgentRef::Unreadable(why) => Count::Unknown(format!("the agent's branch: {why}")),
            // What the next sync brings: a tip the agent moved since the last one.
            AgentRef::Commit(tip) if Some(tip) != host_tip && Some(tip) != last_synced() => {
                match peek.get().and_then(|p| p.unsynced(tip)) {
                    Ok(Unsynced::More) => Count::AtLeast(MAX_UNSYNCED),
                    Ok(Unsynced::Counted { commits, joins }) => match ahead_of(shared, repo, &joins, upstream) {
                        Some(n) => Count::Exact(commits + n),
                        None => {
                            Count::Unknown("what the agent's commits sit on is not all commits of the host's".into())
                        }
                    },
                    Err(why) => Count::Unknown(format!("the agent's branch: {why}")),
                }
            }
            _ => Count::Exact(match (host_tip, upstream) {
                (Some(tip), Some(upstream)) => shared.ahead(repo, tip, upstream).unwrap_or(0),
                _ => 0,
            }),
        };

        let dirty = match agent.head {
            AgentRef::Unreadable(why) => Count::Unknown(format!("the agent's HEAD: {why}")),
            AgentRef::Commit(head) => self.dirty_against(shared, rules, private_dir, Some(head), &mut peek),
            // A branch with no commit yet: every file is new.
            AgentRef::Absent => self.dirty_against(shared, rules, private_dir, None, &mut peek),
        };
        Some(WorkCounts { ahead, dirty })
    }

    /// The files of the worktree that differ from commit `compared` (none: an
    /// empty tree), remembered (`dirty_memo`) while nothing they depend on
    /// changes.
    fn dirty_against(
        &self,
        shared: &mut Counting,
        rules: &crate::workspace::worktree_files::HostRules,
        private: &Path,
        compared: Option<Oid>,
        peek: &mut LazyPeek<'_>,
    ) -> Count {
        let repo = peek.repo;
        if let (Some(_), Some(commit)) = (&self.cow, compared) {
            // Copy-on-write: O(changed files), so worth no memo.
            let committed = match peek.get().and_then(|p| p.commit_lookup(commit)) {
                Ok(lookup) => lookup,
                Err(why) => return Count::Unknown(format!("the agent's HEAD: {why}")),
            };
            return match self.changed_layers(repo, rules, &committed) {
                Ok(Some((changed, _))) => Count::Exact(changed.len()),
                Ok(None) => Count::Exact(0),
                Err(e) => Count::Unknown(e.to_string()),
            };
        }
        let key = self.memo_key(compared, rules);
        if let Some(dirty) = Memo::load(private).and_then(|m| m.dirty_if_unchanged(&key, &self.path)) {
            return Count::Exact(dirty);
        }
        let began = std::time::SystemTime::now();
        let (files, observed) = match self.read_worktree(repo, rules, true) {
            Ok(Some(read)) => read,
            Ok(None) => return Count::Exact(0),
            Err(e) => return Count::Unknown(e.to_string()),
        };
        let committed = match compared {
            Some(commit) => match peek.get().and_then(|p| p.commit_files(commit)) {
                Ok(files) => files,
                Err(why) => return Count::Unknown(format!("the agent's HEAD: {why}")),
            },
            None => HashMap::new(),
        };
        let dirty = files.changed_against(committed).len();
        if let Some(memo) = observed.into_memo(key, dirty, began) {
            shared.remember(private, memo);
        }
        Count::Exact(dirty)
    }
}

/// A `Peek` made the first time it is needed: most sandboxes need none.
struct LazyPeek<'r> {
    repo: &'r Repository,
    /// The agent's git directory, if it has one.
    git: Option<&'r Dir>,
    peek: Option<Result<Peek<'r>, String>>,
}

impl<'r> LazyPeek<'r> {
    fn get(&mut self) -> Result<&Peek<'r>, String> {
        let (repo, git) = (self.repo, self.git);
        let made = self.peek.get_or_insert_with(|| {
            let objects = git.map(|g| g.dir("objects").map_err(|e| e.to_string())).transpose()?.flatten();
            Peek::new(repo, objects)
        });
        made.as_ref().map_err(Clone::clone)
    }
}

/// Commits the host's commits `joins` reach that `upstream` does not.
fn ahead_of(shared: &mut Counting, repo: &Repository, joins: &[Oid], upstream: Option<Oid>) -> Option<usize> {
    let Some(upstream) = upstream else { return Some(0) };
    match joins {
        [] => Some(0),
        [one] => shared.ahead(repo, *one, upstream),
        many => {
            let mut walk = repo.revwalk().ok()?;
            for j in many {
                walk.push(*j).ok()?;
            }
            walk.hide(upstream).ok()?;
            Some(walk.count())
        }
    }
}
