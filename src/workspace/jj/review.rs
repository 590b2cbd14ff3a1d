//! jj mode's side of the review commands (`workspace::review`): the work is
//! what the last sync brought to the user's repository, read from its git store;
//! its current files are the working-copy commit jj inside snapshotted, and
//! what lies under it is committed. Landing moves the user's bookmark (a new
//! commit only for a merge or a squash), which the repository's jj imports: jj
//! rewrites none of the agent's commits, so their change ids stay as they are.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use git2::{Oid, Repository};
use serde::{Deserialize, Serialize};

use super::super::review::{self, tree_of, LandPlan, LogEntry, Review, Work};
use super::{host_bookmarks, jj_on_host, ws_err, JjWorkspace};
use crate::error::{Error, Result};

/// The bookmarks a sandbox's work is landed on by default, when the record
/// does not say which the base was on (sandboxes made before it did).
const USUAL_TRUNKS: [&str; 3] = ["main", "master", "trunk"];

impl Review for JjWorkspace {
    fn repository(&self) -> Result<Repository> {
        self.open_host()
    }

    fn work(&self, repo: &Repository) -> Result<Work> {
        let first_change_on = Oid::from_str(&self.base[0]).map_err(ws_err)?;
        let base = Oid::from_str(&self.review_base()[0]).map_err(ws_err)?;
        let wc = match self.last_sync() {
            Some(sync) => Oid::from_str(&sync.working_copy).map_err(ws_err)?,
            None => first_change_on,
        };
        // What the working copy sits on is committed; the working copy's own
        // change is what jj users call uncommitted.
        let tip = if self.base.iter().any(|b| *b == wc.to_string()) {
            wc
        } else {
            repo.find_commit(wc).map_err(ws_err)?.parent_id(0).unwrap_or(base)
        };
        let bookmarks = self.user_bookmarks()?;
        let target = self.target_bookmark(&bookmarks);
        let start = match target.as_ref().and_then(|t| bookmarks.get(t)) {
            Some(target_tip) => repo.merge_base(*target_tip, wc).unwrap_or(base),
            None => base,
        };
        Ok(Work { start, tip, current: tree_of(repo, wc)?, current_commit: Some(wc), target, skipped: Vec::new() })
    }

    /// Every change of the agent's, from all its heads.
    fn commits(&self, repo: &Repository, work: &Work) -> Result<Vec<LogEntry>> {
        let heads: Vec<Oid> = self
            .last_sync()
            .map(|s| {
                s.heads.iter().chain(std::iter::once(&s.working_copy)).filter_map(|h| Oid::from_str(h).ok()).collect()
            })
            .unwrap_or_default();
        let mut all: Vec<LogEntry> = Vec::new();
        for head in heads {
            for entry in review::log(repo, head, &[work.start])? {
                if !all.iter().any(|e| e.id == entry.id) {
                    all.push(entry);
                }
            }
        }
        all.sort_by_key(|e| std::cmp::Reverse(e.time));
        Ok(all)
    }

    fn landed_file(&self) -> Option<PathBuf> {
        self.private.as_ref().map(|p| p.join("landed.json"))
    }

    fn target_tip(&self, _repo: &Repository, target: &str) -> Result<Oid> {
        self.user_bookmarks()?.get(target).copied().ok_or_else(|| {
            Error::not_found(format!(
                "there is no bookmark {target:?} (pointing at one commit) in {} to land the work on",
                self.repo.display()
            ))
        })
    }

    /// `jj bookmark set`, the jj way. A commit forage made (a merge or a
    /// squash) is first made known to the repository's jj through a fresh ref
    /// of the sandbox's own (`forage-landing/<name>`), which jj then deletes
    /// itself: no git ref jj knows of moves under it (see `bookmarks`).
    fn land(&self, repo: &Repository, plan: &LandPlan) -> Result<()> {
        let (before, after) = (plan.before_id()?, plan.commit_id()?);
        let now = self.user_bookmarks()?.get(&plan.target).copied();
        if now != Some(before) {
            return Err(Error::conflict(format!(
                "bookmark {} moved since the merge was planned; nothing was changed",
                plan.target
            ))
            .hint("run the merge again"));
        }
        let root = self.repo_str()?;
        let landing = format!("forage-landing/{}", self.bookmark_name());
        let made_by_forage = !plan.fast_forward;
        if made_by_forage {
            // Not forced: one left behind is taken in and deleted first.
            if repo.find_reference(&format!("refs/heads/{landing}")).is_ok() {
                jj_on_host(root, &["git", "import"])?;
                self.delete_bookmarks(repo, root, std::slice::from_ref(&landing))?;
            }
            repo.reference(&format!("refs/heads/{landing}"), after, false, "forage: a merge to land")
                .map_err(|e| ws_err(format!("writing {landing}: {e}")))?;
            jj_on_host(root, &["git", "import"])?;
        }
        let set = jj_on_host(root, &["bookmark", "set", &plan.target, "-r", &after.to_string()]);
        if made_by_forage {
            self.delete_bookmarks(repo, root, &[landing])?;
        }
        set.map(|_| ())
    }

    fn apply(&self, _repo: &Repository, work: &Work) -> Result<Vec<String>> {
        // The user's working copy: the repository's own top directory, with
        // the store opened over it so that git2 can patch its files (jj takes
        // them in at its next command).
        let checkout = self.open_host()?;
        checkout.set_workdir(&self.repo, false).map_err(ws_err)?;
        review::apply_to_workdir(
            &checkout,
            tree_of(&checkout, work.start)?,
            work.current,
            &format!("working copy {}", self.repo.display()),
            "`jj new` first to apply it onto a clean change, or land it with `merge`",
        )
    }
}

/// A change `merge` landed that the agent edited again afterwards: two
/// visible commits, the landed one and the agent's, now carry its change id,
/// which jj shows as a divergent change.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Divergent {
    pub change_id: String,
    /// The bookmark it landed on.
    pub target: String,
    /// The commit that landed.
    pub landed: String,
    /// The agent's later version of the change.
    pub edited: String,
}

impl Divergent {
    /// What happened, in jj's words.
    pub fn describe(&self) -> String {
        let short = |id: &str| id[..id.len().min(12)].to_owned();
        let change = short(&self.change_id);
        format!(
            "change {change} landed on {} as {}, and the agent edited it since ({}): your jj shows change {change} as divergent",
            self.target,
            short(&self.landed),
            short(&self.edited)
        )
    }

    /// The command, run in sandbox `name`, that keeps the agent's edit as a
    /// change of its own.
    pub fn keep_inside(&self, name: &str) -> Vec<String> {
        let args = ["exec", name, "--", "jj", "-R", "/workspace", "metaedit", "--update-change-id", "-r", &self.edited];
        args.map(str::to_owned).to_vec()
    }

    /// The command, run in sandbox `name`, that drops the agent's edit.
    pub fn drop_inside(&self, name: &str) -> Vec<String> {
        ["exec", name, "--", "jj", "-R", "/workspace", "abandon", &self.edited].map(str::to_owned).to_vec()
    }
}

/// At most this many landed commits are looked at for change ids an agent
/// edited again (a merge lands the agent's work, however long).
const MAX_LANDED_WALK: usize = 10_000;

impl JjWorkspace {
    /// The changes of the agent's (`commits`, as jj inside listed them and
    /// the host now has them) that carry the change id of a different commit
    /// `merge` landed, while that one is still on a bookmark of the user's.
    pub(super) fn divergent(&self, host: &Repository, commits: &[Oid]) -> Result<Vec<Divergent>> {
        let Some(landed) = self.landed_file().and_then(|f| review::Landed::read(&f)) else { return Ok(Vec::new()) };
        let Ok(landed_tip) = Oid::from_str(&landed.commit) else { return Ok(Vec::new()) };
        let change_of = |id: Oid| -> Option<String> {
            let commit = host.find_commit(id).ok()?;
            let value = commit.header_field_bytes("change-id").ok()?;
            Some(String::from_utf8_lossy(&value).trim().to_owned())
        };
        // The landed commits, by change id: those the merge brought, down to the base.
        let mut walk = host.revwalk().map_err(ws_err)?;
        walk.push(landed_tip).map_err(ws_err)?;
        for base in self.review_base().iter().chain(&self.base) {
            if let Ok(id) = Oid::from_str(base) {
                let _ = walk.hide(id);
            }
        }
        let mut landed_changes: HashMap<String, Oid> = HashMap::new();
        for id in walk.take(MAX_LANDED_WALK).flatten() {
            if let Some(change) = change_of(id) {
                landed_changes.entry(change).or_insert(id);
            }
        }
        let mut found: Vec<Divergent> = commits
            .iter()
            .filter_map(|id| {
                let change = change_of(*id)?;
                let landed_as = *landed_changes.get(&change).filter(|l| **l != *id)?;
                Some(Divergent {
                    change_id: change,
                    target: landed.target.clone(),
                    landed: landed_as.to_string(),
                    edited: id.to_string(),
                })
            })
            .collect();
        if found.is_empty() {
            return Ok(found);
        }
        // Only while the user keeps what landed (jj asked only now, when it matters).
        let tips: Vec<Oid> = self.user_bookmarks()?.into_values().collect();
        found.retain(|d| Oid::from_str(&d.landed).is_ok_and(|l| review::held_by(host, l, &tips)));
        Ok(found)
    }

    /// The user's local bookmarks (none of forage's), as the repository's jj
    /// has them: a repository not colocated with git keeps them out of its
    /// git store's refs.
    pub(super) fn user_bookmarks(&self) -> Result<BTreeMap<String, Oid>> {
        let mut all = host_bookmarks(&self.repo)?;
        all.retain(|name, _| !name.starts_with("forage"));
        Ok(all)
    }

    /// The bookmark the sandbox's base was on when it was made, or else the
    /// first of `main`, `master` and `trunk` the repository has.
    fn target_bookmark(&self, bookmarks: &BTreeMap<String, Oid>) -> Option<String> {
        match &self.base_bookmark {
            Some(b) if bookmarks.contains_key(b) => Some(b.clone()),
            _ => USUAL_TRUNKS.iter().find(|b| bookmarks.contains_key(**b)).map(|b| (*b).to_owned()),
        }
    }

    /// True when what `merge` landed is exactly the sandbox's files (those of
    /// working-copy commit `wc`, default: as the last sync brought them), and
    /// still on a bookmark of the user's.
    pub(super) fn landed_covers(&self, wc: Option<Oid>) -> Result<bool> {
        let Some(landed) = self.landed_file().and_then(|f| review::Landed::read(&f)) else { return Ok(false) };
        let repo = self.open_host()?;
        let current = match wc {
            Some(wc) => match repo.find_commit(wc) {
                Ok(c) => c.tree_id(),
                Err(_) => return Ok(false),
            },
            None => self.work(&repo)?.current,
        };
        let tips: Vec<Oid> = self.user_bookmarks()?.into_values().collect();
        Ok(landed.covers(&repo, current, &tips))
    }
}
