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
