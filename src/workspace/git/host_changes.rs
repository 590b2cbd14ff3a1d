//! The user's uncommitted changes in their own checkout: counted for `up`'s
//! warning (the agent starts from HEAD and will not see them), and, with
//! `--include-uncommitted`, copied as files into the sandbox's new worktree
//! before any container exists.
//!
//! The user's checkout is the user's, not an agent's (`up` refuses when an
//! agent can write it), so git2 reads its status as `git status` would:
//! tracked files changed, added or deleted, and untracked files that are not
//! ignored. Symlinks are copied as symlinks, never followed; directories git
//! does not list file by file (a nested repository) and special files are not
//! copied. The worktree is written one component at a time without following
//! a symlink (a tracked symlink of HEAD's may stand where the user has a
//! directory now), and the user's checkout is only read.

use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

use git2::{Repository, Status, StatusOptions};

use super::ws_err;
use crate::error::Result;
use crate::workspace::untrusted::Dir;

/// What to do with one path of the worktree.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Change {
    /// Copy the user's file or symlink.
    Copy,
    /// The user deleted it.
    Remove,
    /// Not copied: why.
    Skip(&'static str),
}

/// The uncommitted changes of a checkout, path by path (as bytes, `/`-separated).
#[derive(Debug, Clone, Default)]
pub struct HostChanges {
    changes: Vec<(Vec<u8>, Change)>,
}

impl HostChanges {
    /// Reads the status of the checkout at `top`.
    pub fn read(top: &Path) -> Result<HostChanges> {
        let repo = Repository::open(top).map_err(|e| ws_err(format!("opening {}: {e}", top.display())))?;
        let mut opts = StatusOptions::new();
        opts.include_untracked(true)
            .recurse_untracked_dirs(true)
            .include_ignored(false)
            .exclude_submodules(true)
            .include_unmodified(false);
        let statuses = repo
            .statuses(Some(&mut opts))
            .map_err(|e| ws_err(format!("reading the status of {}: {e}", top.display())))?;
        let mut changes = Vec::new();
        for entry in statuses.iter() {
            let status = entry.status();
            if status.is_empty() || status.contains(Status::IGNORED) {
                continue;
            }
            let path = entry.path_bytes().to_vec();
            let change = match std::fs::symlink_metadata(top.join(OsStr::from_bytes(&path))) {
                Err(e) if e.kind() == io::ErrorKind::NotFound => Change::Remove,
                Err(_) => Change::Skip("unreadable"),
                Ok(m) if m.file_type().is_file() || m.file_type().is_symlink() => Change::Copy,
                // A tracked file or symlink replaced by a directory: its files
                // come as entries of their own.
                Ok(m) if m.file_type().is_dir() && !status.contains(Status::WT_NEW) => Change::Remove,
                Ok(m) if m.file_type().is_dir() => {
                    Change::Skip("a directory git does not list file by file (a repository of its own?)")
                }
                Ok(_) => Change::Skip("not a file or symlink"),
            };
            changes.push((path, change));
        }
        // Deletions first: a path HEAD has as a file may be a directory now.
        changes.sort_by(|(a, x), (b, y)| (*x != Change::Remove).cmp(&(*y != Change::Remove)).then(a.cmp(b)));
        Ok(HostChanges { changes })
    }

    /// How many paths differ from HEAD (copied, removed or skipped).
    pub fn count(&self) -> usize {
        self.changes.len()
    }

    /// The paths that cannot be copied, each with why.
    pub fn skipped(&self) -> Vec<String> {
        self.changes
            .iter()
            .filter_map(|(p, c)| match c {
                Change::Skip(why) => Some(format!("{}: {why}", String::from_utf8_lossy(p))),
                _ => None,
            })
            .collect()
    }

    /// Makes the worktree at `worktree` (a fresh checkout of HEAD, which no
    /// container has seen yet) hold the same files as the checkout at `top`.
    pub fn copy_into(&self, top: &Path, worktree: &Path) -> Result<()> {
        let root = Dir::open(worktree).map_err(|e| ws_err(format!("opening {}: {e}", worktree.display())))?;
        for (path, change) in &self.changes {
            let shown = String::from_utf8_lossy(path);
            let done = match change {
                Change::Copy => copy_one(&root, top, path),
                Change::Remove => remove_one(&root, path),
                Change::Skip(_) => Ok(()),
            };
            done.map_err(|e| ws_err(format!("copying your uncommitted {shown} into {}: {e}", worktree.display())))?;
        }
        Ok(())
    }
}

/// `path`'s parent directories and its last component; refused if any
/// component could leave the worktree or reach its `.git`.
fn split(path: &[u8]) -> io::Result<(Vec<&OsStr>, &OsStr)> {
    let parts: Vec<&OsStr> = path.split(|b| *b == b'/').map(OsStr::from_bytes).collect();
    if parts.iter().any(|p| p.is_empty() || *p == "." || *p == ".." || p.eq_ignore_ascii_case(".git")) {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "not a path of a checkout's files"));
    }
    let (last, parents) = parts.split_last().expect("split yields one part at least");
    Ok((parents.to_vec(), last))
}

/// The directory `parents` below `root`, made where missing; anything that
/// is not a directory in its way (a symlink HEAD has there) is replaced.
fn parent_dir(root: &Dir, parents: &[&OsStr], make: bool) -> io::Result<Option<Dir>> {
    let mut at = root.try_clone()?;
    for part in parents {
        at = match at.dir(part)? {
            Some(d) => d,
            None if !make => return Ok(None),
            None => {
                at.remove_entry(part)?;
                at.make_dir_with_mode(part, 0o755)?
            }
        };
    }
    Ok(Some(at))
}

fn copy_one(root: &Dir, top: &Path, path: &[u8]) -> io::Result<()> {
    let (parents, name) = split(path)?;
    let source = top.join(OsStr::from_bytes(path));
    let dir = parent_dir(root, &parents, true)?.expect("made");
    dir.remove_entry(name)?;
    let meta = std::fs::symlink_metadata(&source)?;
    if meta.file_type().is_symlink() {
        return dir.create_symlink(std::fs::read_link(&source)?.as_os_str(), name);
    }
    let mut from = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(&source)?;
    if !from.metadata()?.is_file() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "no longer a regular file"));
    }
    let mut to = dir.create_file(name, meta.mode() & 0o777)?;
    io::copy(&mut from, &mut to)?;
    Ok(())
}

fn remove_one(root: &Dir, path: &[u8]) -> io::Result<()> {
    let (parents, name) = split(path)?;
    if let Some(dir) = parent_dir(root, &parents, false)? {
        dir.remove_entry(name)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    /// A repository whose HEAD tracks `d` as a symlink to `outside`, and
    /// whose checkout has a directory `d/` with a file instead, an edit and
    /// a deletion.
    fn user_repo(root: &Path, outside: &Path) -> PathBuf {
        let top = root.join("user");
        let repo = Repository::init(&top).unwrap();
        std::os::unix::fs::symlink(outside, top.join("d")).unwrap();
        std::fs::write(top.join("a.txt"), "a\n").unwrap();
        std::fs::write(top.join("gone.txt"), "gone\n").unwrap();
        let mut index = repo.index().unwrap();
        for p in ["d", "a.txt", "gone.txt"] {
            index.add_path(Path::new(p)).unwrap();
        }
        let tree = repo.find_tree(index.write_tree().unwrap()).unwrap();
        let sig = git2::Signature::now("t", "t@example.com").unwrap();
        repo.commit(Some("HEAD"), &sig, &sig, "init", &tree, &[]).unwrap();
        std::fs::remove_file(top.join("d")).unwrap();
        std::fs::create_dir(top.join("d")).unwrap();
        std::fs::write(top.join("d/f.txt"), "mine\n").unwrap();
        std::fs::write(top.join("a.txt"), "a\nedited\n").unwrap();
        std::fs::remove_file(top.join("gone.txt")).unwrap();
        top
    }

    #[test]
    fn copies_the_checkout_s_changes_where_head_has_a_symlink_and_the_user_a_directory() {
        let tmp = tempfile::tempdir().unwrap();
        let outside = tmp.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        let top = user_repo(tmp.path(), &outside);
        // The new worktree: HEAD's files, `d` a symlink to `outside`.
        let worktree = tmp.path().join("worktree");
        std::fs::create_dir(&worktree).unwrap();
        std::os::unix::fs::symlink(&outside, worktree.join("d")).unwrap();
        std::fs::write(worktree.join("a.txt"), "a\n").unwrap();
        std::fs::write(worktree.join("gone.txt"), "gone\n").unwrap();

        let changes = HostChanges::read(&top).unwrap();
        // `d` (a symlink deleted), `d/f.txt` (untracked), `a.txt`, `gone.txt`.
        assert_eq!(changes.count(), 4, "{changes:?}");
        assert_eq!(changes.skipped(), Vec::<String>::new());
        changes.copy_into(&top, &worktree).unwrap();
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0, "nothing written through the symlink");
        assert!(std::fs::symlink_metadata(worktree.join("d")).unwrap().is_dir());
        assert_eq!(std::fs::read_to_string(worktree.join("d/f.txt")).unwrap(), "mine\n");
        assert_eq!(std::fs::read_to_string(worktree.join("a.txt")).unwrap(), "a\nedited\n");
        assert!(!worktree.join("gone.txt").exists());
    }

    #[test]
    fn a_symlink_in_the_worktree_is_replaced_never_written_through() {
        let tmp = tempfile::tempdir().unwrap();
        let outside = tmp.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        let top = tmp.path().join("user");
        std::fs::create_dir_all(top.join("d")).unwrap();
        std::fs::write(top.join("d/f.txt"), "mine\n").unwrap();
        std::fs::write(top.join("g.txt"), "g\n").unwrap();
        let worktree = tmp.path().join("worktree");
        std::fs::create_dir(&worktree).unwrap();
        std::os::unix::fs::symlink(&outside, worktree.join("d")).unwrap();
        std::os::unix::fs::symlink(outside.join("g.txt"), worktree.join("g.txt")).unwrap();
        // Only the copies: whatever stands in the worktree's way is replaced.
        let changes =
            HostChanges { changes: vec![(b"d/f.txt".to_vec(), Change::Copy), (b"g.txt".to_vec(), Change::Copy)] };
        changes.copy_into(&top, &worktree).unwrap();
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0, "nothing written through a symlink");
        assert_eq!(std::fs::read_to_string(worktree.join("d/f.txt")).unwrap(), "mine\n");
        assert!(std::fs::symlink_metadata(worktree.join("g.txt")).unwrap().is_file());
    }
}
