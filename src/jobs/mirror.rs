//! A job's repository: forage's own bare mirror of the source, one per
//! source URL under FORAGE_HOME/mirrors/<hash>, cloned once and fetched on
//! each use (git2). Agents never write it: a job's sandbox is a git-worktree
//! sandbox made from the mirror, so the agent gets its private repository
//! and the mirror only gains the job's branch, as a user's repository would.

use std::path::{Path, PathBuf};

use git2::{Direction, Repository};
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::store::Home;

/// What a fetch copies: the source's branches and tags, as they are there.
/// No pruning: a job's branch (forage-NAME) lives only in the mirror.
const REFSPECS: [&str; 2] = ["+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*"];

/// The source as forage keys its mirror: `file://` and an absolute, resolved
/// path, so that a path and its `file://` URL share one mirror. This build's
/// git (git2 without its network transports) reaches repositories on this
/// machine only.
pub fn source_url(raw: &str) -> Result<String> {
    let path = match raw.strip_prefix("file://") {
        Some(path) => PathBuf::from(path),
        None if raw.contains("://") || looks_like_scp(raw) => {
            return Err(Error::usage(format!(
                "repository {raw:?}: forage's jobs reach repositories on this machine only (a path or a file:// URL)"
            ))
            .hint("clone it yourself, then pass the clone's path"))
        }
        None => PathBuf::from(raw),
    };
    let resolved = path.canonicalize().map_err(|e| {
        Error::workspace(format!("repository {raw:?} cannot be read ({e}); pass the path of a git repository"))
    })?;
    Ok(format!("file://{}", resolved.display()))
}

/// `host:path` or `user@host:path`, as ssh URLs are written without a scheme.
fn looks_like_scp(raw: &str) -> bool {
    match raw.split_once(':') {
        Some((host, _)) => !host.is_empty() && !host.contains('/'),
        None => false,
    }
}

/// Where the mirror of `url` lives.
pub fn dir(home: &Home, url: &str) -> PathBuf {
    let digest = Sha256::digest(url.as_bytes());
    let key: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    home.root().join("mirrors").join(key)
}

/// What `update` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Updated {
    Cloned,
    Fetched,
}

/// Clones `url` into `dir` (first use) or fetches it there. The caller holds
/// the mirror's lock. A failed clone leaves no directory; a failed fetch
/// leaves the mirror as it was (git writes the fetched refs only once the
/// objects are in).
pub fn update(dir: &Path, url: &str) -> Result<Updated> {
    let failed = |e: git2::Error| {
        Error::workspace(format!("fetching {url} into forage's mirror {} failed: {}", dir.display(), e.message()))
    };
    if dir.exists() {
        let repo = Repository::open_bare(dir).map_err(failed)?;
        fetch(&repo, url).map_err(failed)?;
        return Ok(Updated::Fetched);
    }
    let parent = dir.parent().expect("a mirror lives in FORAGE_HOME/mirrors");
    std::fs::create_dir_all(parent).map_err(|e| Error::other(format!("creating {}: {e}", parent.display())))?;
    let tmp =
        parent.join(format!(".{}.{}.tmp", dir.file_name().and_then(|f| f.to_str()).unwrap_or("m"), std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let made = Repository::init_bare(&tmp).and_then(|repo| fetch(&repo, url));
    if let Err(e) = made {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(failed(e));
    }
    std::fs::rename(&tmp, dir).map_err(|e| Error::other(format!("moving the new mirror to {}: {e}", dir.display())))?;
    Ok(Updated::Cloned)
}

/// Fetches the source's branches and tags, and points HEAD where the
/// source's does (its default branch, the jobs' default base).
fn fetch(repo: &Repository, url: &str) -> Result<(), git2::Error> {
    let mut remote = repo.remote_anonymous(url)?;
    let head = {
        let connection = remote.connect_auth(Direction::Fetch, None, None)?;
        connection.default_branch().ok().and_then(|b| b.as_str().ok().map(str::to_owned))
    };
    remote.fetch(&REFSPECS, None, None)?;
    if let Some(head) = head.filter(|h| repo.find_reference(h).is_ok()) {
        repo.set_head(&head)?;
    }
    Ok(())
}
