//! The agent's private git directory and forage's files around it, all under
//! FORAGE_HOME/private/<name>:
//!
//! ```text
//! git/       the agent's repository (HEAD, index, refs, new objects): writable
//!            inside at /forage/git; forage only reads it, as untrusted data
//! gitlink    "gitdir: /forage/git": read-only over /workspace/.git
//! remotes/   the host's branches as refs/remotes/origin/*: read-only inside,
//!            rewritten by forage at each sync
//! import/    where an import stages the agent's objects (forage's alone)
//! synced     the agent's tip that the last sync brought to the host
//! ```
//!
//! The private repository borrows the host's objects through `alternates`: the
//! host's `objects/` is mounted read-only at its own path. Nothing else of the
//! host's git directory is visible inside.

use std::collections::{BTreeMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};

use git2::{Oid, Repository};

use crate::error::{Error, Result};
use crate::host_paths::{Exposure, Guard};
use crate::runtime::{Mount, WORKSPACE_TARGET};

/// Where the private git directory appears inside the container.
pub const PRIVATE_GIT_TARGET: &str = "/forage/git";

fn err(e: impl std::fmt::Display) -> Error {
    Error::workspace(format!("the agent's private repository: {e}"))
}

/// FORAGE_HOME/private/<name>, as the record names it.
#[derive(Debug, Clone, Copy)]
pub struct PrivateRepo<'a> {
    pub dir: &'a Path,
}

impl PrivateRepo<'_> {
    pub fn git_dir(&self) -> PathBuf {
        self.dir.join("git")
    }

    fn gitlink(&self) -> PathBuf {
        self.dir.join("gitlink")
    }

    fn remotes(&self) -> PathBuf {
        self.dir.join("remotes")
    }

    pub fn staging(&self) -> PathBuf {
        self.dir.join("import")
    }

    /// Makes the private repository: `branch` at `base`, the index of the host's
    /// fresh checkout (`host_index`), the host's tags, and its branches as
    /// `origin/*`, in the directory `dir` (made by the caller). Nothing is
    /// running yet, so plain writes are safe here.
    /// For a copy-on-write workspace: git inside compares a file's size and
    /// mtime (whole seconds) only, never inode numbers or ctime, so that the
    /// base checkout's index stays valid through the overlay (ADR 0003).
    /// Written before the container exists.
    pub fn trust_stat_minimally(&self) -> Result<()> {
        let path = self.git_dir().join("config");
        let mut config = std::fs::read(&path).map_err(err)?;
        config.extend_from_slice(b"[core]\n\tcheckStat = minimal\n\ttrustctime = false\n");
        write(&path, &config)
    }

    pub fn create(&self, host: &Repository, host_index: &Path, branch: &str, base: Oid) -> Result<()> {
        let git = self.git_dir();
        for dir in ["objects/info", "objects/pack", "refs/heads", "refs/tags", "refs/remotes"] {
            std::fs::create_dir_all(git.join(dir)).map_err(err)?;
        }
        write(&git.join("HEAD"), format!("ref: refs/heads/{branch}\n").as_bytes())?;
        write(
            &git.join("config"),
            b"[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n\tlogallrefupdates = true\n",
        )?;
        let alternates: String = object_dirs(host).iter().map(|d| format!("{}\n", d.display())).take(1).collect();
        write(&git.join("objects/info/alternates"), alternates.as_bytes())?;
        let branch_ref = git.join("refs/heads").join(branch);
        std::fs::create_dir_all(branch_ref.parent().expect("a ref has a parent")).map_err(err)?;
        write(&branch_ref, format!("{base}\n").as_bytes())?;
        let mut tags = String::new();
        for (name, id) in refs_under(host, "refs/tags/")? {
            tags.push_str(&format!("{id} {name}\n"));
        }
        write(&git.join("packed-refs"), tags.as_bytes())?;
        first_index(host_index, &git.join("index"))?;
        write(&self.gitlink(), format!("gitdir: {PRIVATE_GIT_TARGET}\n").as_bytes())?;
        std::fs::create_dir(self.remotes()).map_err(err)?;
        self.refresh_remotes(host)
    }

    /// The agent's branch tip that the last sync brought to the host (forage's
    /// own note, outside anything the agent can reach).
    pub fn last_synced(&self) -> Option<Oid> {
        let text = std::fs::read_to_string(self.dir.join("synced")).ok()?;
        super::refs::parse_oid(text.trim())
    }

    pub fn set_last_synced(&self, tip: Oid) -> Result<()> {
        replace(&self.dir.join("synced"), format!("{tip}\n").as_bytes())
    }

    /// The mounts that make git in /workspace use the private repository.
    pub fn mounts(&self, host: &Repository, read_only: bool, guard: &Guard) -> Vec<Mount> {
        let ro = |source: PathBuf, target: String| Mount { source, target, read_only: true, overlay: None };
        let mut mounts = vec![
            ro(self.gitlink(), format!("{WORKSPACE_TARGET}/.git")),
            Mount { source: self.git_dir(), target: PRIVATE_GIT_TARGET.into(), read_only, overlay: None },
            ro(self.remotes(), format!("{PRIVATE_GIT_TARGET}/refs/remotes")),
        ];
        // The host's objects (and those it borrows itself), read-only at their own
        // paths, so that the alternates chain resolves inside as on the host.
        for dir in mountable_object_dirs(host, guard) {
            mounts.push(ro(dir.clone(), dir.display().to_string()));
        }
        mounts
    }

    /// Rewrites `remotes/origin/*` to the host's branches as they are now, and
    /// `origin/HEAD` to the host's checked-out branch.
    pub fn refresh_remotes(&self, host: &Repository) -> Result<()> {
        let origin = self.remotes().join("origin");
        let wanted: BTreeMap<String, Oid> = refs_under(host, "refs/heads/")?
            .into_iter()
            .map(|(name, id)| (name.trim_start_matches("refs/heads/").to_owned(), id))
            .collect();
        let head = host.head().ok().filter(|h| h.is_branch()).and_then(|h| h.shorthand().ok().map(str::to_owned));
        let extra = head.map(|b| ("HEAD".to_owned(), format!("ref: refs/remotes/origin/{b}\n")));
        write_refs(&origin, &wanted, extra)
    }
}

/// Makes `dir` hold exactly the loose refs `wanted` (name, `/`-separated, to
/// target): a forage-owned directory the agent sees read-only. A file is only
/// rewritten when its target changed, whole (never half a ref).
pub fn write_ref_dir(dir: &Path, wanted: &BTreeMap<String, Oid>) -> Result<()> {
    write_refs(dir, wanted, None)
}

fn write_refs(dir: &Path, wanted: &BTreeMap<String, Oid>, extra: Option<(String, String)>) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(err)?;
    let mut keep: HashSet<PathBuf> = HashSet::new();
    let files = wanted
        .iter()
        .map(|(name, id)| (name.as_str(), format!("{id}\n")))
        .chain(extra.iter().map(|(n, c)| (n.as_str(), c.clone())));
    for (name, content) in files {
        let path = dir.join(name);
        keep.insert(path.clone());
        if std::fs::read_to_string(&path).is_ok_and(|c| c == content) {
            continue;
        }
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(err)?;
        }
        replace(&path, content.as_bytes())?;
    }
    prune(dir, &keep);
    Ok(())
}

/// The object directories `mounts` hands the agent (read-only): those of
/// `object_dirs` that `host_paths` allows. `up` and `reset` refuse a repository
/// that borrows from any other (`check_object_dirs`); this drops one added to
/// `alternates` since, rather than mount it.
/// Puts `source` in place as the agent's first index at `target`. A
/// copy-on-write base's index (read-only, owned by `SHARED_INDEX_OWNER`) is
/// shared as a hard link, which costs no disk: git never writes an index in
/// place but renames a new one over it, and the agent may not write or chmod
/// a file it does not own. Any other index (the host's fresh checkout's, or a
/// base index forage could not give away) is copied, writable.
fn first_index(source: &Path, target: &Path) -> Result<()> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    // Never a file of forage's own uid, which the agent shares and could chmod.
    let owner = crate::workspace::cow::SHARED_INDEX_OWNER;
    let own = nix::unistd::geteuid().as_raw();
    let shared = std::fs::metadata(source).is_ok_and(|m| m.uid() == owner && owner != own && m.mode() & 0o222 == 0);
    if shared && std::fs::hard_link(source, target).is_ok() {
        return Ok(());
    }
    std::fs::copy(source, target).map_err(|e| err(format!("copying the index: {e}")))?;
    std::fs::set_permissions(target, std::fs::Permissions::from_mode(0o644)).map_err(err)
}

pub(crate) fn mountable_object_dirs(host: &Repository, guard: &Guard) -> Vec<PathBuf> {
    object_dirs(host)
        .into_iter()
        .filter(|dir| {
            let refused = guard.refusal(dir, Exposure::ReadOnly);
            if let Some(why) = &refused {
                tracing::warn!("not mounting {}, which the repository borrows objects from: {why}", dir.display());
            }
            refused.is_none()
        })
        .collect()
}

/// Refuses a repository whose objects (or those it borrows through
/// `objects/info/alternates`) lie where no agent may look: each is mounted
/// read-only into the sandbox.
pub(crate) fn check_object_dirs(host: &Repository, guard: &Guard) -> Result<()> {
    for dir in object_dirs(host) {
        if let Some(why) = guard.refusal(&dir, Exposure::ReadOnly) {
            return Err(Error::usage(format!(
                "the repository keeps or borrows objects in {} (see its objects/info/alternates), which the sandbox would see read-only, but {why}; make it a repository of its own (`git repack -a -d`, then remove the alternates file)",
                dir.display()
            )));
        }
    }
    Ok(())
}

/// The host repository's object directory, then the ones it borrows from
/// (its own `alternates`, a trusted host file), up to git's depth of 5.
pub(crate) fn object_dirs(host: &Repository) -> Vec<PathBuf> {
    let mut dirs = vec![host.commondir().join("objects")];
    let mut i = 0;
    while i < dirs.len() && dirs.len() < 6 {
        let here = dirs[i].clone();
        if let Ok(text) = std::fs::read_to_string(here.join("info/alternates")) {
            for line in text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
                if let Ok(dir) = here.join(line).canonicalize() {
                    if !dirs.contains(&dir) {
                        dirs.push(dir);
                    }
                }
            }
        }
        i += 1;
    }
    dirs.into_iter().map(|d| d.canonicalize().unwrap_or(d)).collect()
}

/// The direct (non-symbolic) refs under `prefix` and their targets, peeled to
/// what they point at (a tag ref keeps pointing at its tag object).
fn refs_under(host: &Repository, prefix: &str) -> Result<Vec<(String, Oid)>> {
    let mut out = Vec::new();
    for r in host.references_glob(&format!("{prefix}*")).map_err(err)? {
        let r = r.map_err(err)?;
        if let (Ok(name), Some(id)) = (r.name(), r.target()) {
            out.push((name.to_owned(), id));
        }
    }
    out.sort();
    Ok(out)
}

fn write(path: &Path, bytes: &[u8]) -> Result<()> {
    std::fs::write(path, bytes).map_err(|e| err(format!("writing {}: {e}", path.display())))
}

/// Writes `path` whole or not at all (a reader inside never sees half a ref).
pub(super) fn replace(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_file_name(format!(".forage-{}.tmp", std::process::id()));
    let mut f = std::fs::File::create(&tmp).map_err(err)?;
    f.write_all(bytes).map_err(err)?;
    std::fs::rename(&tmp, path).map_err(|e| err(format!("writing {}: {e}", path.display())))
}

/// Removes every file under `dir` not in `keep`, then the directories left empty.
fn prune(dir: &Path, keep: &HashSet<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            prune(&path, keep);
            let _ = std::fs::remove_dir(&path);
        } else if !keep.contains(&path) {
            let _ = std::fs::remove_file(&path);
        }
    }
}
