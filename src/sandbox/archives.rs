//! `archives`: what `down` archived, from the archive index, and pruning old
//! archives: their refs (git) or bookmarks (jj) deleted in the user's
//! repository, only where they still point at the commit `down` recorded.

use serde::Serialize;

use super::Engine;
use crate::error::Result;
use crate::names::SandboxName;
use crate::record::ArchiveEntry;
use crate::runtime::Runtime;
use crate::workspace::Mode;

/// What pruning did to one archive.
#[derive(Debug, Clone, Serialize)]
pub struct Pruned {
    #[serde(flatten)]
    pub archive: ArchiveEntry,
    pub outcome: PruneOutcome,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

/// What became of an archive `prune` was asked to delete.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PruneOutcome {
    /// Its ref (bookmark) and index entry are deleted.
    Deleted,
    /// Its ref was deleted already: only the index entry went.
    Gone,
    /// Its ref points elsewhere now, or could not be deleted (see `why`).
    Kept,
}

impl<R: Runtime> Engine<R> {
    /// Every archive of `name` (default: of every sandbox), oldest first.
    pub fn archives(&self, name: Option<&SandboxName>) -> Result<Vec<ArchiveEntry>> {
        let names = match name {
            Some(n) => vec![n.clone()],
            None => self.home.archived_names(),
        };
        let mut all = Vec::new();
        for n in names {
            all.extend(self.home.archives(&n)?);
        }
        all.sort_by(|a, b| (a.archived_at, &a.name).cmp(&(b.archived_at, &b.name)));
        Ok(all)
    }

    /// The archives `prune` would delete: those older than `older_than`.
    pub fn archives_older_than(
        &self,
        name: Option<&SandboxName>,
        older_than: std::time::Duration,
    ) -> Result<Vec<ArchiveEntry>> {
        let cutoff = super::now().saturating_sub(older_than.as_secs());
        Ok(self.archives(name)?.into_iter().filter(|a| a.archived_at < cutoff).collect())
    }

    /// Deletes exactly `doomed` (as `archives_older_than` listed them): each
    /// ref or bookmark that still points at its commit, and its index entry.
    pub async fn prune(&self, doomed: Vec<ArchiveEntry>) -> Result<Vec<Pruned>> {
        let mut names: Vec<SandboxName> = doomed.iter().map(|a| a.name.clone()).collect();
        names.sort();
        names.dedup();
        let mut out = Vec::new();
        for name in names {
            let _lock = self.lock_sandbox(&name).await?;
            let mut index = self.home.archives(&name)?;
            for archive in doomed.iter().filter(|a| a.name == name) {
                // Older indexes do not say which repository's lock to take.
                let _repo = match archive.common_dir.as_os_str().is_empty() {
                    true => None,
                    false => Some(self.lock_repo(&archive.common_dir).await?),
                };
                let entry = archive.clone();
                let deleted = super::blocking(move || match entry.mode {
                    Mode::Jj => {
                        crate::workspace::jj::delete_archive_bookmark(&entry.repo, &entry.refname, &entry.commit)
                    }
                    _ => crate::workspace::git::delete_archive_ref(&entry.common_dir, &entry.refname, &entry.commit),
                })
                .await;
                let (outcome, why) = match deleted {
                    Ok(true) => (PruneOutcome::Deleted, None),
                    Ok(false) => (PruneOutcome::Gone, None),
                    Err(e) => (PruneOutcome::Kept, Some(e.to_string())),
                };
                if outcome != PruneOutcome::Kept {
                    index.retain(|a| !(a.refname == archive.refname && a.commit == archive.commit));
                }
                out.push(Pruned { archive: archive.clone(), outcome, why });
            }
            self.home.set_archives(&name, &index)?;
        }
        Ok(out)
    }
}

/// The last part of an archive's ref (bookmark) name, which `restore
/// --archive` takes: `<timestamp>` for the sandbox's branch (jj: its first
/// head), `<timestamp>-<place>` for work found elsewhere (`-head`,
/// `-branch-NAME`, `-stash-N`; jj: `-head-N`), and `-N` after either for a
/// second `down` within one second.
pub fn archive_id(refname: &str) -> &str {
    refname.rsplit('/').next().unwrap_or(refname)
}

/// The `down` an archive came from: its timestamp.
fn stamp_of(refname: &str) -> &str {
    let id = archive_id(refname);
    id.get(..STAMP_LEN).unwrap_or(id)
}

/// `20261125T182101Z`: `sandbox::timestamp`'s length.
const STAMP_LEN: usize = 16;

/// Where in the agent's repository an archive's work was, from its name
/// (`head`, `branch-NAME`, `head-2`); `None` for the sandbox's own branch
/// (jj: first head), whose archive holds its work as a live sandbox has it.
fn place_of(refname: &str) -> Option<&str> {
    let rest = archive_id(refname).get(STAMP_LEN..)?.strip_prefix('-')?;
    // A bare number only tells two `down`s of one second apart.
    (!rest.bytes().all(|b| b.is_ascii_digit())).then_some(rest)
}

/// What `restore` names the branch (jj: bookmark) it makes of an archive by
/// default: the name the sandbox's work has in a live sandbox, branch
/// `forage-NAME` (jj: bookmark `forage/NAME`); for work found elsewhere (a
/// detached HEAD, another branch; jj: a further head), that name and the
/// place (`forage-NAME-head`, `forage/NAME-head-2`), so that every archive of
/// one `down` can be restored side by side. (Not jj's live
/// `forage-heads/NAME/N`: a new sandbox NAME's sync owns those, and would
/// delete a restored one.)
pub fn restore_name(name: &SandboxName, mode: Mode, refname: &str) -> String {
    let live = match mode {
        Mode::Jj => name.bookmark(),
        _ => name.branch(),
    };
    match place_of(refname) {
        None => live,
        Some(place) => format!("{live}-{place}"),
    }
}

/// The arguments of the `restore` that brings back archive `refname` of
/// sandbox `name` (`--archive` named, so that it is that one and no newer).
pub fn restore_args(name: &SandboxName, refname: &str) -> Vec<String> {
    vec!["restore".into(), name.to_string(), "--archive".into(), archive_id(refname).to_owned()]
}

impl<R: Runtime> Engine<R> {
    /// The other archives the `down` that made `archive` made (a detached
    /// HEAD's, other branches', further heads'), oldest first.
    pub fn archived_with(&self, archive: &ArchiveEntry) -> Result<Vec<ArchiveEntry>> {
        let stamp = stamp_of(&archive.refname);
        Ok(self
            .home
            .archives(&archive.name)?
            .into_iter()
            .filter(|a| a.refname != archive.refname && stamp_of(&a.refname) == stamp && a.repo == archive.repo)
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_archive_of_one_down_restores_under_its_own_name() {
        let name = SandboxName::parse("x").unwrap();
        let git = |r: &str| restore_name(&name, Mode::GitWorktree, r);
        let jj = |r: &str| restore_name(&name, Mode::Jj, r);
        assert_eq!(git("refs/forage/archive/x/20261125T182101Z"), "forage-x");
        assert_eq!(git("refs/forage/archive/x/20261125T182101Z-1"), "forage-x");
        assert_eq!(git("refs/forage/archive/x/20261125T182101Z-head"), "forage-x-head");
        assert_eq!(git("refs/forage/archive/x/20261125T182101Z-branch-feature"), "forage-x-branch-feature");
        assert_eq!(jj("forage/archive/x/20261125T182101Z"), "forage/x");
        assert_eq!(jj("forage/archive/x/20261125T182101Z-head-2"), "forage/x-head-2");
        assert_eq!(stamp_of("forage/archive/x/20261125T182101Z-head-2"), "20261125T182101Z");
        assert_eq!(archive_id("refs/forage/archive/x/20261125T182101Z-head"), "20261125T182101Z-head");
    }
}
