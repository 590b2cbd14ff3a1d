//! The files in a sandbox's worktree, as git would commit them with `git add -A`,
//! read by forage on the host: the uncommitted work of a git sandbox, and the
//! files a jj sandbox changed after jj's last snapshot.
//!
//! The agent wrote these files, so they are walked with `untrusted::Dir`: symlinks
//! are recorded as symlinks (never followed), FIFOs, sockets and devices are
//! skipped, and every `.git` entry is left out (the worktree's own link, and the
//! git directory of a repository the agent made inside, whose *files* are kept;
//! in jj mode `.jj` too). Ignore rules come from a repository whose working
//! directory is the worktree (the worktree's `.gitignore` files, that
//! repository's `info/exclude`, the user's `core.excludesFile`); files already
//! known are kept even where an ignore rule matches. What is already known
//! (`Known`) spares reading the files that did not change.

use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use git2::{Index, IndexEntry, IndexTime, ObjectType, Oid, Repository, Tree};
use nix::sys::stat::FileStat;

use super::untrusted::{Dir, Kind};
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

/// What forage already knows of the files, so that unchanged ones are not read.
pub enum Known {
    /// git: the host view's index, whose stat data tells which files changed
    /// since it recorded them.
    Index(Index),
    /// jj: the tree of jj's snapshot, taken no earlier than `since` (seconds and
    /// nanoseconds since the epoch): a file it holds whose modification and
    /// change times are both older is as the snapshot has it.
    Snapshot { files: HashMap<Vec<u8>, (u32, Oid)>, since: (i64, i64) },
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

/// Reads the worktree at `root`. `repo`'s working directory must be `root`: it
/// gives the ignore rules, and its object store receives the content of every
/// changed file when `write` is set (for a commit); without, files are only hashed.
pub fn read(repo: &Repository, root: &Path, known: Known, write: bool) -> Result<WorktreeFiles> {
    let (tracked, index_mtime, jj): (HashMap<Vec<u8>, Tracked>, _, _) = match known {
        Known::Index(index) => {
            let mtime = index.path().and_then(|p| std::fs::metadata(p).ok()).and_then(|m| m.modified().ok());
            let since = mtime.and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok());
            let entries = index.iter().filter(|e| stage(e) == 0).map(|e| (e.path.clone(), Tracked::Entry(e))).collect();
            (entries, since.map(|d| (d.as_secs() as i64, d.subsec_nanos() as i64)), false)
        }
        Known::Snapshot { files, since } => {
            let entries = files.into_iter().map(|(p, (mode, id))| (p, Tracked::Snapshot { mode, id })).collect();
            (entries, Some(since), true)
        }
    };
    let mut tracked_dirs: HashSet<Vec<u8>> = HashSet::new();
    for path in tracked.keys() {
        for (i, b) in path.iter().enumerate() {
            if *b == b'/' {
                tracked_dirs.insert(path[..i].to_vec());
            }
        }
    }
    let mut walk = Walk { repo, tracked, tracked_dirs, since: index_mtime, jj, write, out: WorktreeFiles::default() };
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

/// A file forage already knows, and how.
enum Tracked {
    Entry(IndexEntry),
    Snapshot { mode: u32, id: Oid },
}

impl Tracked {
    fn mode(&self) -> u32 {
        match self {
            Tracked::Entry(e) => e.mode,
            Tracked::Snapshot { mode, .. } => *mode,
        }
    }

    fn id(&self) -> Oid {
        match self {
            Tracked::Entry(e) => e.id,
            Tracked::Snapshot { id, .. } => *id,
        }
    }
}

struct Walk<'a> {
    repo: &'a Repository,
    tracked: HashMap<Vec<u8>, Tracked>,
    tracked_dirs: HashSet<Vec<u8>>,
    /// Files changed at or after this time are read whatever else is known.
    since: Option<(i64, i64)>,
    /// jj mode: `.jj` is left out like `.git`.
    jj: bool,
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
            if name == ".git" || (self.jj && name == ".jj") {
                continue;
            }
            let mut rel = prefix.to_vec();
            if !rel.is_empty() {
                rel.push(b'/');
            }
            rel.extend_from_slice(name.as_bytes());
            if let Some(e) = self.tracked.get(&rel).filter(|e| e.mode() == MODE_GITLINK) {
                // A submodule: its commit as forage knows it.
                self.out.files.push(FileEntry { path: rel, mode: e.mode(), id: e.id() });
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
        self.repo.is_path_ignored(Path::new(OsStr::from_bytes(&path))).map_err(err)
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

    /// The known id of `rel` if the file did not change since forage learnt it:
    /// its stat data as the index recorded it, or (jj) its times older than the
    /// snapshot. A file changed at or after the index was written, or the
    /// snapshot taken, is always read (it may be racily clean).
    fn unchanged(&self, rel: &[u8], mode: u32, st: &FileStat) -> Option<Oid> {
        let known = self.tracked.get(rel)?;
        let older = |secs: i64, nsecs: i64| self.since.is_some_and(|since| (secs, nsecs) < since);
        if known.mode() != mode || !older(st.st_mtime, st.st_mtime_nsec) || !older(st.st_ctime, st.st_ctime_nsec) {
            return None;
        }
        match known {
            Tracked::Snapshot { id, .. } => Some(*id),
            Tracked::Entry(e) => {
                let same_time = |t: &IndexTime, secs: i64, nsecs: i64| {
                    t.seconds() as i64 == secs && t.nanoseconds() as i64 == nsecs
                };
                let fresh = e.file_size == st.st_size as u32
                    && e.ino == st.st_ino as u32
                    && same_time(&e.mtime, st.st_mtime, st.st_mtime_nsec)
                    && same_time(&e.ctime, st.st_ctime, st.st_ctime_nsec);
                fresh.then_some(e.id)
            }
        }
    }

    fn blob(&self, content: &[u8]) -> Result<Oid> {
        if self.write {
            self.repo.blob(content).map_err(err)
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

/// Every non-tree entry of `tree` by path: (mode, id).
pub fn tree_files(repo: &Repository, tree: &Tree) -> Result<HashMap<Vec<u8>, (u32, Oid)>> {
    let mut out = HashMap::new();
    flatten(repo, tree, &[], &mut out)?;
    Ok(out)
}

/// Fills `out` as `tree_files` (names as bytes: git2's own tree walk would panic
/// on a name that is not UTF-8).
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
