//! The files in a sandbox's worktree, as git would commit them with `git add -A`,
//! read by forage on the host: uncommitted work for `status` and `down`.
//!
//! The agent wrote these files, so they are walked with `untrusted::Dir`: symlinks
//! are recorded as symlinks (never followed), FIFOs, sockets and devices are
//! skipped, and every `.git` entry is left out (the worktree's own link, and the
//! git directory of a repository the agent made inside, whose *files* are kept).
//! Ignore rules come from the host's view of the worktree (its `.gitignore` files,
//! the repository's `info/exclude`, the user's `core.excludesFile`); tracked files
//! are kept even where an ignore rule matches. The host view's index serves as a
//! stat cache, so only files whose size, times or inode changed are read.

use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use git2::{Index, IndexEntry, IndexTime, ObjectType, Oid, Repository, Tree};
use nix::sys::stat::FileStat;

use super::super::untrusted::{Dir, Kind};
use crate::error::{Error, Result};

fn err(e: impl std::fmt::Display) -> Error {
    Error::Workspace(format!("reading the worktree: {e}"))
}

const MODE_FILE: u32 = 0o100644;
const MODE_EXEC: u32 = 0o100755;
const MODE_LINK: u32 = 0o120000;
const MODE_GITLINK: u32 = 0o160000;

/// One file as git would record it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileEntry {
    pub path: Vec<u8>,
    pub mode: u32,
    pub id: Oid,
}

/// The worktree's files, sorted by path.
#[derive(Debug, Default)]
pub struct WorktreeFiles {
    pub files: Vec<FileEntry>,
    /// Paths that are neither files, symlinks nor directories (FIFOs, sockets),
    /// which git cannot store, and (when only looking) paths the agent made
    /// unreadable: not in `files`.
    pub skipped: Vec<String>,
}

/// Reads the worktree at `root` through `view` (the host's view of it). With
/// `write`, the content of every changed file is written to the host's object
/// store (for a commit); without, it is only hashed.
pub fn read(view: &Repository, root: &Path, write: bool) -> Result<WorktreeFiles> {
    let index = view.index().map_err(err)?;
    let index_mtime = index.path().and_then(|p| std::fs::metadata(p).ok()).and_then(|m| m.modified().ok());
    let tracked: HashMap<Vec<u8>, IndexEntry> =
        index.iter().filter(|e| stage(e) == 0).map(|e| (e.path.clone(), e)).collect();
    let mut tracked_dirs: HashSet<Vec<u8>> = HashSet::new();
    for path in tracked.keys() {
        for (i, b) in path.iter().enumerate() {
            if *b == b'/' {
                tracked_dirs.insert(path[..i].to_vec());
            }
        }
    }
    let index_mtime = index_mtime.and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok());
    let mut walk = Walk { view, tracked, tracked_dirs, index_mtime, write, out: WorktreeFiles::default() };
    if let (true, Some(parent), Some(name)) = (write, root.parent(), root.file_name()) {
        Dir::open(parent).and_then(|p| p.grant_owner_access(name)).map_err(err)?;
    }
    let dir = Dir::open(root).map_err(err)?;
    walk.dir(&dir, &[])?;
    walk.out.files.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(walk.out)
}

fn stage(e: &IndexEntry) -> u16 {
    (e.flags >> 12) & 0x3
}

struct Walk<'a> {
    view: &'a Repository,
    tracked: HashMap<Vec<u8>, IndexEntry>,
    tracked_dirs: HashSet<Vec<u8>>,
    index_mtime: Option<std::time::Duration>,
    write: bool,
    out: WorktreeFiles,
}

impl Walk<'_> {
    fn dir(&mut self, dir: &Dir, prefix: &[u8]) -> Result<()> {
        let entries = match dir.entries() {
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied && !self.write => {
                self.out.skipped.push(String::from_utf8_lossy(prefix).into_owned());
                return Ok(());
            }
            other => other.map_err(err)?,
        };
        for (name, kind) in entries {
            if name == ".git" {
                continue;
            }
            let mut rel = prefix.to_vec();
            if !rel.is_empty() {
                rel.push(b'/');
            }
            rel.extend_from_slice(name.as_bytes());
            if let Some(e) = self.tracked.get(&rel).filter(|e| e.mode == MODE_GITLINK) {
                // A submodule: its commit as the index has it.
                self.out.files.push(FileEntry { path: rel, mode: e.mode, id: e.id });
                continue;
            }
            let tracked = self.tracked.contains_key(&rel);
            match kind {
                Kind::Dir if self.tracked_dirs.contains(&rel) || !self.ignored(&rel, true)? => {
                    if let Some(Some(sub)) = self.readable(dir, &name, &rel, |d, n| d.dir(n))? {
                        self.dir(&sub, &rel)?;
                    }
                }
                Kind::File | Kind::Symlink if tracked || !self.ignored(&rel, false)? => {
                    if let Some(entry) = self.file(dir, &name, rel, kind)? {
                        self.out.files.push(entry);
                    }
                }
                Kind::Other => self.out.skipped.push(String::from_utf8_lossy(&rel).into_owned()),
                _ => {}
            }
        }
        Ok(())
    }

    /// Runs `open` on `name`. If the agent took the user's permission to read it:
    /// when writing (an archive, after the agent is gone), gives the permission
    /// back and tries again; when only looking (`status`), lists it as skipped
    /// and returns `None`.
    fn readable<T>(
        &mut self,
        dir: &Dir,
        name: &OsStr,
        rel: &[u8],
        open: impl Fn(&Dir, &OsStr) -> std::io::Result<T>,
    ) -> Result<Option<T>> {
        if self.write {
            dir.grant_owner_access(name).map_err(err)?;
        }
        match open(dir, name) {
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied && !self.write => {
                self.out.skipped.push(String::from_utf8_lossy(rel).into_owned());
                Ok(None)
            }
            other => other.map(Some).map_err(err),
        }
    }

    fn ignored(&self, rel: &[u8], is_dir: bool) -> Result<bool> {
        let mut path = rel.to_vec();
        if is_dir {
            path.push(b'/');
        }
        self.view.is_path_ignored(Path::new(OsStr::from_bytes(&path))).map_err(err)
    }

    fn file(&mut self, dir: &Dir, name: &OsStr, rel: Vec<u8>, kind: Kind) -> Result<Option<FileEntry>> {
        if kind == Kind::Symlink {
            let target = dir.read_link(name).map_err(err)?;
            let id = self.blob(target.as_bytes())?;
            return Ok(Some(FileEntry { path: rel, mode: MODE_LINK, id }));
        }
        // Gone or replaced since the listing: whatever it is now is not a file.
        let Some(Some((mut file, st))) = self.readable(dir, name, &rel, |d, n| d.open_file(n))? else {
            return Ok(None);
        };
        let mode = if st.st_mode & 0o100 != 0 { MODE_EXEC } else { MODE_FILE };
        if let Some(id) = self.unchanged(&rel, mode, &st) {
            return Ok(Some(FileEntry { path: rel, mode, id }));
        }
        let mut content = Vec::with_capacity(st.st_size as usize);
        file.read_to_end(&mut content).map_err(err)?;
        let id = self.blob(&content)?;
        Ok(Some(FileEntry { path: rel, mode, id }))
    }

    /// The index's id for `rel` if the file's stat data says it did not change
    /// since the index recorded it (and the entry is not racily clean).
    fn unchanged(&self, rel: &[u8], mode: u32, st: &FileStat) -> Option<Oid> {
        let e = self.tracked.get(rel)?;
        let same_time =
            |t: &IndexTime, secs: i64, nsecs: i64| t.seconds() as i64 == secs && t.nanoseconds() as i64 == nsecs;
        let fresh = e.mode == mode
            && e.file_size == st.st_size as u32
            && e.ino == st.st_ino as u32
            && same_time(&e.mtime, st.st_mtime, st.st_mtime_nsec)
            && same_time(&e.ctime, st.st_ctime, st.st_ctime_nsec);
        let racy = self
            .index_mtime
            .is_none_or(|idx| (st.st_mtime as u64, st.st_mtime_nsec as u32) >= (idx.as_secs(), idx.subsec_nanos()));
        (fresh && !racy).then_some(e.id)
    }

    fn blob(&self, content: &[u8]) -> Result<Oid> {
        if self.write {
            self.view.blob(content).map_err(err)
        } else {
            Oid::hash_object(ObjectType::Blob, content).map_err(err)
        }
    }
}

impl WorktreeFiles {
    /// Writes these files as a tree into `repo` (after a `read` with `write`).
    pub fn write_tree(&self, repo: &Repository) -> Result<Oid> {
        let mut index = Index::new().map_err(err)?;
        for f in &self.files {
            let t = IndexTime::new(0, 0);
            let entry = IndexEntry {
                ctime: t,
                mtime: t,
                dev: 0,
                ino: 0,
                mode: f.mode,
                uid: 0,
                gid: 0,
                file_size: 0,
                id: f.id,
                flags: f.path.len().min(0xfff) as u16,
                flags_extended: 0,
                path: f.path.clone(),
            };
            index.add(&entry).map_err(err)?;
        }
        index.write_tree_to(repo).map_err(err)
    }

    /// The paths that differ from `tree` (added, changed or removed), sorted.
    pub fn changed_since(&self, repo: &Repository, tree: Option<&Tree>) -> Result<Vec<String>> {
        let mut committed: HashMap<Vec<u8>, (u32, Oid)> = HashMap::new();
        if let Some(tree) = tree {
            flatten(repo, tree, &[], &mut committed)?;
        }
        let mut changed: Vec<String> = Vec::new();
        for f in &self.files {
            if committed.remove(&f.path) != Some((f.mode, f.id)) {
                changed.push(String::from_utf8_lossy(&f.path).into_owned());
            }
        }
        changed.extend(committed.into_keys().map(|p| String::from_utf8_lossy(&p).into_owned()));
        changed.sort();
        Ok(changed)
    }
}

/// Every non-tree entry of `tree` by path (names as bytes: git2's own tree walk
/// would panic on a name that is not UTF-8).
fn flatten(repo: &Repository, tree: &Tree, prefix: &[u8], out: &mut HashMap<Vec<u8>, (u32, Oid)>) -> Result<()> {
    for entry in tree.iter() {
        let mut path = prefix.to_vec();
        if !path.is_empty() {
            path.push(b'/');
        }
        path.extend_from_slice(entry.name_bytes());
        if entry.kind() == Some(ObjectType::Tree) {
            let sub = repo.find_tree(entry.id()).map_err(err)?;
            flatten(repo, &sub, &path, out)?;
        } else {
            out.insert(path, (entry.filemode() as u32, entry.id()));
        }
    }
    Ok(())
}
