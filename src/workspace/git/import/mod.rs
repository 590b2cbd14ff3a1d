//! Bringing the agent's commits from its private object store into the host
//! repository: the one way anything the agent made reaches the host's git.
//!
//! The private store is the agent's to write, so it is never opened as a
//! repository (that would honour its `alternates`, `commondir`, config): its
//! objects are read as untrusted data (`store`), every size bounded before it
//! is read. The walk (`walk`) reads everything the tips reach that the host
//! lacks, once, checks each object against its id and by git's own fsck rules
//! (`super::fsck`), counts it, and spools its pack entry (`pack`); only if
//! all of it passes is the spool written, as one pack, into the host's object
//! store. A refused tip writes nothing.

mod pack;
mod store;
mod walk;

use std::path::Path;

use git2::{Oid, Repository};

use super::super::untrusted::{remove_created_dir, Dir, Kind};
use super::fsck::{self, EntryKind};
use crate::error::{Error, Result};
pub(crate) use store::AgentObjects;

fn err(e: impl std::fmt::Display) -> Error {
    Error::workspace(format!("importing the agent's commits: {e}"))
}

/// A refusal of the agent's objects, saying what to do about it.
fn refused(why: String) -> Error {
    err(format!(
        "{why}; nothing was imported (git or jj would refuse it: rewrite the agent's commits without it inside the sandbox)"
    ))
}

/// What one import brought over (or, looking only, would bring).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Imported {
    pub objects: usize,
    /// The commits, each with the first line of its message.
    pub commits: Vec<(Oid, String)>,
    /// The jj change id each commit carries (its `change-id` header), if any.
    pub change_ids: Vec<(Oid, String)>,
}

/// The agent's objects, readable by forage alone (see `store`): its packs
/// copied into a staging directory, removed when dropped.
pub struct Staged {
    /// The objects, or why they cannot be read (a pack over its bound, say):
    /// then every import and look is refused saying so, and callers that go on
    /// past a refused place (`status`, `down`) still go on.
    objects: std::result::Result<AgentObjects, String>,
    dir: std::path::PathBuf,
    owner: std::path::PathBuf,
}

impl Staged {
    /// Stages `private_objects` (the agent's `objects/`, if it has one) in
    /// `staging`, a path forage owns.
    pub fn new(private_objects: Option<&Dir>, staging: &Path) -> Result<Staged> {
        let owner = staging.parent().ok_or_else(|| err("staging has no parent"))?.to_path_buf();
        remove_created_dir(staging, &owner).map_err(err)?;
        std::fs::create_dir(staging).map_err(err)?;
        // Made first, so that the staging directory goes again on any error.
        let mut staged = Staged { objects: Err(String::new()), dir: staging.to_path_buf(), owner };
        let held = private_objects.map(Dir::try_clone).transpose().map_err(err)?;
        staged.objects = AgentObjects::new(held, staging);
        Ok(staged)
    }

    fn objects(&self) -> Result<&AgentObjects> {
        self.objects.as_ref().map_err(|why| refused(why.clone()))
    }

    /// Imports everything `tips` reach that the host lacks, every object checked.
    pub fn import(&self, host: &Repository, tips: &[Oid]) -> Result<Imported> {
        let odb = host.odb().map_err(err)?;
        let started = std::time::Instant::now();
        let spool_path = self.dir.join("pack.spool");
        let mut spool = pack::Spool::create(&spool_path).map_err(err)?;
        let found = walk::Walk::new(self.objects()?, &odb, Some(&mut spool)).run(tips);
        let found = found.map_err(refused)?;
        tracing::debug!("import: {} new objects checked in {:?}", found.objects, started.elapsed());
        if found.objects > 0 {
            let started = std::time::Instant::now();
            spool.write_into(&odb).map_err(refused)?;
            tracing::debug!("import: pack written in {:?}", started.elapsed());
        }
        std::fs::remove_file(&spool_path).map_err(err)?;
        Ok(imported(found))
    }

    /// What `import` would bring, every object checked the same way, writing
    /// nothing to the host.
    pub fn look(&self, host: &Repository, tips: &[Oid]) -> Result<Imported> {
        let odb = host.odb().map_err(err)?;
        walk::Walk::new(self.objects()?, &odb, None).run(tips).map(imported).map_err(refused)
    }
}

fn imported(found: walk::Found) -> Imported {
    Imported { objects: found.objects, commits: found.commits, change_ids: found.change_ids }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if let Err(e) = remove_created_dir(&self.dir, &self.owner) {
            tracing::warn!("removing {}: {e}", self.dir.display());
        }
    }
}

/// Imports everything `tips` reach that the host lacks. `private_objects` is the
/// agent's `objects/` directory; `staging` a path forage owns (removed again).
pub fn import(host: &Repository, private_objects: Option<&Dir>, staging: &Path, tips: &[Oid]) -> Result<Imported> {
    if all_there(host, tips)? {
        return Ok(Imported::default());
    }
    Staged::new(private_objects, staging)?.import(host, tips)
}

/// What `import` would bring, writing nothing to the host.
pub fn look(host: &Repository, private_objects: Option<&Dir>, staging: &Path, tips: &[Oid]) -> Result<Imported> {
    if all_there(host, tips)? {
        return Ok(Imported::default());
    }
    Staged::new(private_objects, staging)?.look(host, tips)
}

/// The host has every tip already (and so everything they reach).
fn all_there(host: &Repository, tips: &[Oid]) -> Result<bool> {
    let odb = host.odb().map_err(err)?;
    Ok(tips.iter().all(|t| odb.exists(*t)))
}

/// The name rules of the import (`fsck::check_name`), for a file of the
/// worktree: what forage would not put in a tree.
pub(crate) fn refused_name(name: &[u8], kind: Kind) -> std::result::Result<(), String> {
    let kind = match kind {
        Kind::Dir => EntryKind::Dir,
        Kind::Symlink => EntryKind::Symlink,
        Kind::File | Kind::Other => EntryKind::File,
    };
    fsck::check_name(name, kind).map(|_| ())
}

#[cfg(test)]
mod tests;
