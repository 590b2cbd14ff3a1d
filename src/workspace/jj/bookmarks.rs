//! Moving the sandbox's bookmarks in the user's repository so that the user's
//! jj never imports a move itself.
//!
//! In a colocated repository jj imports git's refs at the start of every
//! command, with the user's settings: a ref that moved or went away makes it
//! abandon what only the old target reached (the user's unbookmarked changes
//! under the agent's work included, rebasing the user's working copy) and take
//! a new commit carrying an old one's change id for its rewrite. A ref forage
//! moved with git would be imported that way by whichever jj ran first. So
//! forage never moves or deletes a git ref the repository's jj knows of:
//!
//! 1. each new target gets a fresh ref, `forage-import/<name>/<n>`: a ref no
//!    jj has seen before reached nothing before, so importing it abandons and
//!    rewrites nothing, whichever jj does it;
//! 2. forage's own `jj git import` (abandoning and rewriting nothing) takes
//!    them in;
//! 3. `jj bookmark set` moves each bookmark, and `jj bookmark delete` removes
//!    the staged ones and those no longer wanted. jj records each in its
//!    operation log and, holding the lock under which every jj of the
//!    repository imports (`git_import_export.lock`), exports the git refs
//!    before that operation is published: no jj finds a ref its view does not
//!    already have.
//! 4. forage abandons the sandbox's own commits its bookmarks no longer reach.
//!
//! In a repository not colocated with git no jj imports unasked (and jj
//! exports nothing by itself): there the refs move with git and forage's own
//! import follows at once, as before (`move_with_git`).

use std::collections::BTreeMap;

use git2::{Oid, Repository};

use super::ownership::{self, Owned};
use super::{jj_on_host, ws_err, JjWorkspace, HEADS_PREFIX};
use crate::error::Result;

/// Fresh refs that bring commits into the repository's jj view (step 1).
const STAGING_PREFIX: &str = "forage-import";

impl JjWorkspace {
    /// Makes the sandbox's bookmarks (`forage/<name>`, `forage-heads/<name>/*`)
    /// exactly `wanted` (all on commits it owns), as the module says, and
    /// abandons the sandbox's own commits they no longer reach. With
    /// `import_first`, jj imports even if no bookmark moves (`down` made
    /// archive refs, fresh ones, for it to take in).
    pub(super) fn point_bookmarks(
        &self,
        host: &Repository,
        wanted: &BTreeMap<String, Oid>,
        owned: &Owned,
        import_first: bool,
    ) -> Result<()> {
        let repo = self.repo_str()?;
        let current = self.own_bookmarks(repo)?;
        // Staged refs an interrupted move left in git (perhaps not yet in jj's view).
        let leftovers = self.staged_in_git(host)?;
        let mut moves: BTreeMap<Oid, Vec<&str>> = BTreeMap::new();
        for (name, target) in wanted {
            if current.get(name) != Some(&Some(*target)) {
                moves.entry(*target).or_default().push(name);
            }
        }
        let mut gone: Vec<String> = current.keys().filter(|n| !wanted.contains_key(*n)).cloned().collect();
        gone.extend(leftovers.iter().filter(|n| !current.contains_key(*n)).cloned());
        if moves.is_empty() && gone.is_empty() && !import_first {
            return Ok(());
        }
        if self.is_colocated() {
            let taken = current.keys().chain(&leftovers).cloned().collect();
            let staged = self.stage(host, moves.keys().copied(), taken)?;
            if import_first || !staged.is_empty() || !leftovers.is_empty() {
                jj_on_host(repo, &["git", "import"])?;
            }
            for (target, names) in &moves {
                let target = target.to_string();
                let mut args = vec!["bookmark", "set", "--allow-backwards", "-r", &target];
                args.extend(names);
                jj_on_host(repo, &args)?;
            }
            gone.extend(staged);
            self.delete_bookmarks(host, repo, &gone)?;
        } else {
            self.move_with_git(host, repo, &moves, &gone)?;
        }
        let staging = self.staging_prefix();
        let old: Vec<Oid> = current.iter().filter(|(n, _)| !n.starts_with(&staging)).filter_map(|(_, t)| *t).collect();
        let new: Vec<Oid> = wanted.values().copied().collect();
        ownership::abandon_obsolete(repo, host, &old, &new, owned)
    }

    /// Removes the sandbox's bookmarks (`forage/<name>` and its further heads)
    /// and abandons the work only they kept: for `down --discard`, and after an
    /// archive bookmark took the work over.
    pub fn drop_bookmarks(&self) -> Result<()> {
        if self.is_legacy() {
            return Ok(());
        }
        let host = self.open_host()?;
        let owned = Owned::read(&self.owned_file()?);
        self.point_bookmarks(&host, &BTreeMap::new(), &owned, false)
    }

    /// `forage-import/<name>/`
    fn staging_prefix(&self) -> String {
        format!("{STAGING_PREFIX}/{}/", self.bookmark_name())
    }

    /// The sandbox's bookmarks in the repository's jj (its own, its further
    /// heads', and staged ones), with where each points (`None`: conflicted).
    fn own_bookmarks(&self, repo: &str) -> Result<BTreeMap<String, Option<Oid>>> {
        let template = r#"if(!remote, name ++ " " ++ if(normal_target, normal_target.commit_id(), "-") ++ "\n")"#;
        let patterns = [
            format!("exact:{}", self.bookmark),
            format!("glob:{HEADS_PREFIX}/{}/*", self.bookmark_name()),
            format!("glob:{}*", self.staging_prefix()),
        ];
        let mut args = vec!["bookmark", "list", "-T", template];
        args.extend(patterns.iter().map(String::as_str));
        Ok(jj_on_host(repo, &args)?
            .lines()
            .filter_map(|l| l.split_once(' '))
            .map(|(name, target)| (name.to_owned(), Oid::from_str(target).ok()))
            .collect())
    }

    /// The names of the staged refs in the repository's git store.
    fn staged_in_git(&self, host: &Repository) -> Result<Vec<String>> {
        let glob = format!("refs/heads/{}*", self.staging_prefix());
        let mut names = Vec::new();
        for r in host.references_glob(&glob).map_err(ws_err)? {
            let r = r.map_err(ws_err)?;
            if let Some(name) = r.name().ok().and_then(|n| n.strip_prefix("refs/heads/")) {
                names.push(name.to_owned());
            }
        }
        Ok(names)
    }

    /// A fresh ref `forage-import/<name>/<n>` on each of `targets` (step 1),
    /// by names neither git nor jj has (`taken`); their names.
    fn stage(
        &self,
        host: &Repository,
        targets: impl Iterator<Item = Oid>,
        taken: std::collections::HashSet<String>,
    ) -> Result<Vec<String>> {
        let mut names = Vec::new();
        let mut n = 0;
        for target in targets {
            let name = loop {
                n += 1;
                let name = format!("{}{n}", self.staging_prefix());
                if !taken.contains(&name) && host.find_reference(&format!("refs/heads/{name}")).is_err() {
                    break name;
                }
            };
            // Not forced: a ref that exists after all is refused, never moved.
            host.reference(&format!("refs/heads/{name}"), target, false, "forage: for jj to import")
                .map_err(|e| ws_err(format!("writing {name}: {e}")))?;
            names.push(name);
        }
        Ok(names)
    }

    /// Deletes the sandbox's bookmarks `names`: with jj where jj imports
    /// unasked (step 3), else as `move_with_git` does.
    pub(super) fn delete_bookmarks(&self, host: &Repository, repo: &str, names: &[String]) -> Result<()> {
        if names.is_empty() {
            return Ok(());
        }
        if !self.is_colocated() {
            return self.move_with_git(host, repo, &BTreeMap::new(), names);
        }
        let exact: Vec<String> = names.iter().map(|n| format!("exact:{n}")).collect();
        let mut args = vec!["bookmark", "delete"];
        args.extend(exact.iter().map(String::as_str));
        jj_on_host(repo, &args).map(|_| ())
    }

    /// Where no jj imports unasked (a repository not colocated with git, whose
    /// jj also exports nothing by itself): the refs move with git, and forage's
    /// own import, which abandons and rewrites nothing, follows at once.
    fn move_with_git(
        &self,
        host: &Repository,
        repo: &str,
        moves: &BTreeMap<Oid, Vec<&str>>,
        gone: &[String],
    ) -> Result<()> {
        for (target, names) in moves {
            for name in names {
                host.reference(&format!("refs/heads/{name}"), *target, true, "forage: the agent's work")
                    .map_err(|e| ws_err(format!("pointing {name} at {target}: {e}")))?;
            }
        }
        for name in gone {
            if let Ok(mut r) = host.find_reference(&format!("refs/heads/{name}")) {
                r.delete().map_err(|e| ws_err(format!("deleting {name}: {e}")))?;
            }
        }
        jj_on_host(repo, &["git", "import"]).map(|_| ())
    }

    /// The repository's working copy is git's too, so that jj imports git's
    /// refs at the start of every command (and exports its own after).
    fn is_colocated(&self) -> bool {
        self.git_dir.as_ref().is_some_and(|g| self.repo.join(".git").canonicalize().ok().as_ref() == Some(g))
    }
}
