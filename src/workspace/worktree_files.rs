//! The files in a sandbox's worktree, as git would commit them with `git add -A`,
//! read by forage on the host: the uncommitted work of a git sandbox, and the
//! files a jj sandbox changed after jj's last snapshot.
//!
//! The agent wrote these files, so nothing here trusts them:
//! - the tree is walked with `untrusted::Dir` (no symlink followed, never
//!   blocking on a FIFO), one directory at a time (`untrusted::Descent`: no
//!   recursion, a bounded number of descriptors), at most `MAX_DEPTH` deep;
//! - symlinks are recorded as symlinks; FIFOs, sockets and devices are skipped;
//!   so are names git would refuse (`.GIT`, `.git.`, a `.gitmodules` symlink)
//!   and files over `MAX_FILE_BYTES`; each is listed as skipped, with why;
//! - every `.git` entry is left out (the worktree's own link, and the git
//!   directory of a repository the agent made inside, whose *files* are kept;
//!   in jj mode `.jj` too);
//! - content is hashed (and written) as it streams, never held whole;
//! - ignore rules are forage's own reading of the worktree's `.gitignore` files
//!   (read like any other file of the agent's) and the host's `info/exclude` and
//!   `core.excludesFile`; files already known are kept even where a rule matches.
//!
//! What is already known (`Known`) spares reading the files that did not change.

use std::collections::{HashMap, HashSet};
use std::ffi::{OsStr, OsString};
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use git2::{Index, IndexEntry, IndexTime, ObjectType, Oid, Repository, Tree};
use ignore::gitignore::{Gitignore, GitignoreBuilder};
use nix::sys::stat::{FileStat, SFlag};
use sha1::{Digest, Sha1};

use super::dirty_memo::Observed;
use super::tree_lookup::{differing_files, TreeLookup};
use super::untrusted::{Descent, Dir, Kind};
use crate::error::{Error, Result};

fn err(e: impl std::fmt::Display) -> Error {
    Error::workspace(format!("reading the worktree: {e}"))
}

const MODE_FILE: u32 = 0o100644;
const MODE_EXEC: u32 = 0o100755;
const MODE_LINK: u32 = 0o120000;
const MODE_GITLINK: u32 = 0o160000;

/// Deeper than this, a directory is listed as skipped (git itself refuses
/// paths much longer than this allows).
const MAX_DEPTH: usize = 512;
/// Larger files are listed as skipped rather than archived: an agent can make
/// a sparse file of any size in no time, which would take forage as long to read.
/// A file's size is the one it claims (`st_size`), however few blocks a
/// sparse file holds: that is what reading it costs. Checked before reading.
pub const MAX_FILE_BYTES: u64 = 1 << 30;
/// How much of the files' content one walk reads in all, when it only looks or
/// archives (streamed, never held: this bounds the time, not the memory).
const MAX_READ_BYTES: u64 = 4 << 30;
/// How much of the files' content one walk stores for a review, in all: a
/// review that only looks stores it in memory (`review::in_memory`).
const MAX_STORED_BYTES: u64 = 256 << 20;
/// A `.gitignore` larger than this is not read.
const MAX_IGNORE_FILE: u64 = 1 << 20;

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
    /// A copy-on-write upper layer: the committed files (a tree's, by path),
    /// which decide what is tracked; every file is read (the layer holds only
    /// what the agent changed).
    Tree(HashMap<Vec<u8>, (u32, Oid)>),
}

/// The worktree's files, sorted by path.
#[derive(Debug, Default)]
pub struct WorktreeFiles {
    pub files: Vec<FileEntry>,
    /// Paths not in `files`, each with why: not a file, symlink or directory; a
    /// name git refuses; too big; too deep; or (when only looking) made
    /// unreadable by the agent.
    pub skipped: Vec<(String, String)>,
    /// Paths too big to read, which only looking cannot compare: counted as changed.
    unread: Vec<Vec<u8>>,
    /// The paths of `skipped`, as bytes.
    unseen: Vec<Vec<u8>>,
}

/// What a `read` does with the files it reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reading {
    /// Only hashes them (`status`): a file the agent made unreadable is skipped.
    Look,
    /// Also stores their content in the repository's object store (a review's
    /// tree, in memory or on disk): unreadable files are still skipped.
    Store,
    /// Stores them, first giving the user back any permission the agent took
    /// (an archive, after the agent is gone): nothing is skipped for that.
    TakeOver,
}

impl Reading {
    fn stores(self) -> bool {
        self != Reading::Look
    }

    /// How much of the files' content one walk reads (see `MAX_READ_BYTES`).
    fn budget(self) -> u64 {
        match self {
            Reading::Store => MAX_STORED_BYTES,
            Reading::Look | Reading::TakeOver => MAX_READ_BYTES,
        }
    }
}

/// Reads the worktree at `root`. `repo` is the host's repository: its
/// `info/exclude` and `core.excludesFile` add to the worktree's ignore rules,
/// and its object store receives the content of every changed file unless
/// `how` is `Look`.
pub fn read(repo: &Repository, root: &Path, known: Known, how: Reading) -> Result<WorktreeFiles> {
    read_with(repo, &HostRules::of(repo), root, known, how)
}

/// `read`, with the host's ignore rules already read (`list` reads many
/// worktrees of one repository).
pub fn read_with(
    repo: &Repository,
    rules: &HostRules,
    root: &Path,
    known: Known,
    how: Reading,
) -> Result<WorktreeFiles> {
    Ok(walk(repo, rules, root, known, how, None, None)?.0)
}

/// The files of a copy-on-write workspace (docs/adr/0003): `lower`, the base
/// tree's files, which the lower layer holds (forage checked it out and
/// nothing writes it, so it is never read), with the upper layer at `upper`
/// over them, read like any worktree of the agent's. A whiteout hides the
/// lower entry of its name, an opaque directory everything the lower layer
/// has below it, and any other entry replaces the lower one: O(entries in the
/// upper layer) on disk.
pub fn read_layered(
    repo: &Repository,
    rules: &HostRules,
    upper: &Path,
    lower: HashMap<Vec<u8>, (u32, Oid)>,
    committed: HashMap<Vec<u8>, (u32, Oid)>,
    how: Reading,
) -> Result<WorktreeFiles> {
    let layers = Layers { lower, upper: HashMap::new() };
    Ok(walk(repo, rules, upper, Known::Tree(committed), how, None, Some((layers, None)))?.0)
}

/// The paths by which a copy-on-write workspace differs from `committed`
/// (the agent's HEAD), sorted, and what could not be read ("path: why"):
/// what `read_layered` and `changed_against` give, in O(the upper layer's
/// entries and the difference between the two trees) instead of
/// O(repository). See `LayeredChanges::read`.
pub fn changed_layered(
    repo: &Repository,
    rules: &HostRules,
    upper: &Path,
    lower: &TreeLookup<'_>,
    committed: &TreeLookup<'_>,
) -> Result<(Vec<String>, Vec<String>)> {
    let changes = LayeredChanges::read(repo, rules, upper, lower, committed, Reading::Look)?;
    Ok((changes.changed(), changes.skipped()))
}

/// How a copy-on-write workspace differs from the agent's HEAD, read in
/// O(changed files).
pub struct LayeredChanges {
    /// The paths that differ, as bytes.
    changed: std::collections::BTreeSet<Vec<u8>>,
    /// What the upper layer holds that was read (files, symlinks, submodules).
    files: WorktreeFiles,
    /// The upper layer's entries.
    uppers: Layers,
}

impl LayeredChanges {
    /// Walks the upper layer as `read_layered` walks it, with the two trees
    /// looked up by path as the walk asks; then
    /// - a file the upper layer holds counts if the committed tree lacks it
    ///   or has another;
    /// - a committed file the upper layer deletes (a whiteout, an opaque
    ///   directory, a file or directory in its place that is not it) counts;
    /// - a file the lower layer shows through counts where the base tree and
    ///   the committed one differ.
    pub fn read(
        repo: &Repository,
        rules: &HostRules,
        upper: &Path,
        lower: &TreeLookup<'_>,
        committed: &TreeLookup<'_>,
        how: Reading,
    ) -> Result<LayeredChanges> {
        let layers = Layers { lower: HashMap::new(), upper: HashMap::new() };
        let lazy = LazyTrees { committed, lower };
        let (files, _, uppers) =
            walk(repo, rules, upper, Known::Tree(HashMap::new()), how, None, Some((layers, Some(lazy))))?;
        let uppers = Layers { lower: HashMap::new(), upper: uppers.unwrap_or_default() };
        let seen: HashSet<&[u8]> = files.files.iter().map(|f| f.path.as_slice()).collect();
        let mut changed: std::collections::BTreeSet<Vec<u8>> = files.unread.iter().cloned().collect();
        for f in &files.files {
            if committed.file(&f.path).map_err(err)? != Some((f.mode, f.id)) {
                changed.insert(f.path.clone());
            }
        }
        for (path, upper) in &uppers.upper {
            let below = match upper {
                Upper::Whiteout | Upper::Other | Upper::Dir { opaque: true } => committed.files_under(path),
                // A directory merged with the lower one replaces only a file of its name.
                Upper::Dir { opaque: false } => {
                    committed.file(path).map(|f| f.map(|(m, id)| (path.clone(), m, id)).into_iter().collect())
                }
            };
            for (file, _, _) in below.map_err(err)? {
                if !seen.contains(file.as_slice()) {
                    changed.insert(file);
                }
            }
        }
        for path in differing_files(lower, committed).map_err(err)? {
            if !seen.contains(path.as_slice()) && uppers.shows(&path) {
                changed.insert(path);
            }
        }
        Ok(LayeredChanges { changed, files, uppers })
    }

    /// The paths that differ, sorted.
    pub fn changed(&self) -> Vec<String> {
        self.changed.iter().map(|p| String::from_utf8_lossy(p).into_owned()).collect()
    }

    /// What could not be read: "path: why".
    pub fn skipped(&self) -> Vec<String> {
        self.files.skipped.iter().map(|(path, why)| format!("{path}: {why}")).collect()
    }

    /// What could not be read: (path, why).
    pub fn take_skipped(&mut self) -> Vec<(String, String)> {
        std::mem::take(&mut self.files.skipped)
    }

    /// The workspace's files as a tree (after a read that stored them): the
    /// committed tree with each changed path made what the layers show, in
    /// O(changes). What could not be read is kept as committed, never
    /// deleted (as `WorktreeFiles::write_tree_keeping`).
    pub fn write_tree(&self, repo: &Repository, lower: &TreeLookup<'_>, committed: &Tree) -> Result<Oid> {
        let held: HashMap<&[u8], &FileEntry> = self.files.files.iter().map(|f| (f.path.as_slice(), f)).collect();
        let under = |path: &[u8], above: &[u8]| {
            path == above || (path.starts_with(above) && path.get(above.len()) == Some(&b'/'))
        };
        // Removals first, then what is there now: libgit2 refuses one update
        // that makes a directory where another removes a file of its name.
        let (mut removals, mut additions) =
            (git2::build::TreeUpdateBuilder::new(), git2::build::TreeUpdateBuilder::new());
        for path in &self.changed {
            if self.files.unseen.iter().any(|u| under(path, u)) {
                continue;
            }
            let now = match held.get(path.as_slice()) {
                Some(f) => Some((f.mode, f.id)),
                None if self.uppers.shows(path) => lower.file(path).map_err(err)?,
                None => None,
            };
            match now {
                Some((mode, id)) => additions.upsert(path.as_slice(), id, file_mode(mode)),
                None => removals.remove(path.as_slice()),
            };
        }
        let removed = removals.create_updated(repo, committed).map_err(err)?;
        additions.create_updated(repo, &repo.find_tree(removed).map_err(err)?).map_err(err)
    }
}

/// A tree entry's mode as git2 names it.
fn file_mode(mode: u32) -> git2::FileMode {
    match mode {
        MODE_EXEC => git2::FileMode::BlobExecutable,
        MODE_LINK => git2::FileMode::Link,
        MODE_GITLINK => git2::FileMode::Commit,
        _ => git2::FileMode::Blob,
    }
}

/// `changed_layered`'s trees, looked up by path as its walk asks: the
/// committed tree (what is tracked) and the base tree (the lower layer).
struct LazyTrees<'t> {
    committed: &'t TreeLookup<'t>,
    lower: &'t TreeLookup<'t>,
}

/// What an upper-layer entry does to the lower layer's entry of its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Upper {
    /// A character device 0/0: the lower entry is deleted.
    Whiteout,
    /// A directory: merged with the lower one, unless opaque.
    Dir { opaque: bool },
    /// Anything else replaces the lower entry.
    Other,
}

/// A copy-on-write workspace's lower layer, and the upper layer's entries as
/// its walk finds them.
struct Layers {
    lower: HashMap<Vec<u8>, (u32, Oid)>,
    upper: HashMap<Vec<u8>, Upper>,
}

impl Layers {
    /// Whether the lower layer's `path` shows through the upper layer: no
    /// upper entry of its name, and above it only upper directories that are
    /// not opaque (or none, below which the upper layer holds nothing).
    fn shows(&self, path: &[u8]) -> bool {
        for (i, b) in path.iter().enumerate() {
            if *b == b'/' {
                match self.upper.get(&path[..i]) {
                    None => return true,
                    Some(Upper::Dir { opaque: false }) => {}
                    Some(_) => return false,
                }
            }
        }
        !self.upper.contains_key(path)
    }

    /// The lower files that show through, and are not in `have` already.
    fn shown(self, have: &HashSet<Vec<u8>>) -> Vec<FileEntry> {
        let mut out = Vec::new();
        for (path, (mode, id)) in &self.lower {
            if !have.contains(path) && self.shows(path) {
                out.push(FileEntry { path: path.clone(), mode: *mode, id: *id });
            }
        }
        out
    }
}

/// `read_with`, also recording the stat data of everything that decided the
/// result (for `list`'s memo, `dirty_memo`).
pub fn read_observed(
    repo: &Repository,
    rules: &HostRules,
    root: &Path,
    known: Known,
    how: Reading,
) -> Result<(WorktreeFiles, Observed)> {
    let (files, observed, _) = walk(repo, rules, root, known, how, Some(Observed::default()), None)?;
    Ok((files, observed.unwrap_or_default()))
}

/// What a walk found, what decided it (if asked) and, when it walked an
/// upper layer with its trees looked up lazily, the upper layer's entries.
type Walked = (WorktreeFiles, Option<Observed>, Option<HashMap<Vec<u8>, Upper>>);

fn walk<'t>(
    repo: &'t Repository,
    rules: &HostRules,
    root: &Path,
    known: Known,
    how: Reading,
    observed: Option<Observed>,
    layers: Option<(Layers, Option<LazyTrees<'t>>)>,
) -> Result<Walked> {
    let (layers, lazy) = layers.map_or((None, None), |(layers, lazy)| (Some(layers), lazy));
    let (tracked, since, jj): (HashMap<Vec<u8>, Tracked>, _, _) = match known {
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
        Known::Tree(files) => {
            let entries = files.into_iter().map(|(p, (mode, id))| (p, Tracked::Snapshot { mode, id })).collect();
            (entries, None, false)
        }
    };
    let mut tracked_dirs: HashSet<Vec<u8>> = HashSet::new();
    // The lower layer's directories are walked wherever the upper one has
    // them, ignored or not: what is whited out there decides what shows.
    let lower = layers.iter().flat_map(|l| l.lower.keys());
    for path in tracked.keys().chain(lower) {
        for (i, b) in path.iter().enumerate() {
            if *b == b'/' {
                tracked_dirs.insert(path[..i].to_vec());
            }
        }
    }
    if let (Reading::TakeOver, Some(parent), Some(name)) = (how, root.parent(), root.file_name()) {
        Dir::open(parent).and_then(|p| p.grant_owner_access(name)).map_err(err)?;
    }
    let mut walk = Walk {
        repo,
        root: root.to_path_buf(),
        ignores: rules.rules.clone(),
        tracked,
        tracked_dirs,
        since,
        jj,
        how,
        out: WorktreeFiles::default(),
        observed,
        rel: Vec::new(),
        left: how.budget(),
        layers,
        lazy,
    };
    walk.run(Dir::open(root).map_err(err)?)?;
    let mut uppers = None;
    if let Some(layers) = walk.layers.take() {
        if walk.lazy.is_some() {
            uppers = Some(layers.upper);
        } else {
            let have: HashSet<Vec<u8>> =
                walk.out.files.iter().map(|f| f.path.clone()).chain(walk.out.unseen.iter().cloned()).collect();
            walk.out.files.extend(layers.shown(&have));
        }
    }
    walk.out.files.sort_by(|a, b| a.path.cmp(&b.path));
    Ok((walk.out, walk.observed, uppers))
}

fn stage(e: &IndexEntry) -> u16 {
    (e.flags >> 12) & 0x3
}

/// The host's own ignore rules: the repository's `info/exclude` and the user's
/// `core.excludesFile` (trusted files, read as git reads them).
pub struct HostRules {
    rules: Vec<Gitignore>,
    /// A digest of which files the rules came from and their stat data.
    digest: [u8; 20],
}

impl HostRules {
    pub fn of(repo: &Repository) -> HostRules {
        let (rules, digest) = host_ignores(repo);
        HostRules { rules, digest }
    }

    /// Changes whenever the rules may have (`dirty_memo`'s key).
    pub fn digest(&self) -> [u8; 20] {
        self.digest
    }
}

fn host_ignores(repo: &Repository) -> (Vec<Gitignore>, [u8; 20]) {
    let mut files: Vec<PathBuf> = vec![repo.commondir().join("info/exclude")];
    if let Some(path) = repo.config().ok().and_then(|c| c.get_path("core.excludesFile").ok()) {
        files.push(path);
    }
    let mut digest = Sha1::new();
    let mut rules = Vec::new();
    for f in files {
        super::dirty_memo::digest_file(&mut digest, &f);
        if f.is_file() {
            let mut b = GitignoreBuilder::new("/");
            let _ = b.add(&f);
            rules.push(b.build().unwrap_or_else(|_| Gitignore::empty()));
        }
    }
    (rules, digest.finalize().into())
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

/// A directory being walked: the subdirectories in it still to walk, the
/// length of its path (in `Walk::rel`), and the rules of its own `.gitignore`.
struct Level {
    subdirs: Vec<OsString>,
    rel_len: usize,
    rules: Option<Gitignore>,
}

struct Walk<'a> {
    repo: &'a Repository,
    root: PathBuf,
    /// The host's rules, which apply everywhere.
    ignores: Vec<Gitignore>,
    tracked: HashMap<Vec<u8>, Tracked>,
    tracked_dirs: HashSet<Vec<u8>>,
    /// Files changed at or after this time are read whatever else is known.
    since: Option<(i64, i64)>,
    /// jj mode: `.jj` is left out like `.git`.
    jj: bool,
    how: Reading,
    out: WorktreeFiles,
    /// What decided the result, when a memo of it is wanted.
    observed: Option<Observed>,
    /// The path of the directory being walked, from the top.
    rel: Vec<u8>,
    /// How many more bytes of content this walk may read.
    left: u64,
    /// Set when the walk reads a copy-on-write upper layer.
    layers: Option<Layers>,
    /// Set when what is tracked and the lower layer are trees looked up by
    /// path (`changed_layered`), not `tracked` and `layers.lower`.
    lazy: Option<LazyTrees<'a>>,
}

impl Walk<'_> {
    /// The committed file at `rel`: (mode, id); a submodule's is its commit
    /// as forage knows it.
    fn tracked_file(&self, rel: &[u8]) -> Result<Option<(u32, Oid)>> {
        match &self.lazy {
            Some(lazy) => lazy.committed.file(rel).map_err(err),
            None => Ok(self.tracked.get(rel).map(|e| (e.mode(), e.id()))),
        }
    }

    /// Whether `rel` is a directory that holds committed files, or (an upper
    /// layer) one of the lower layer's.
    fn tracked_dir(&self, rel: &[u8]) -> Result<bool> {
        match &self.lazy {
            Some(lazy) => Ok(lazy.committed.is_dir(rel).map_err(err)? || lazy.lower.is_dir(rel).map_err(err)?),
            None => Ok(self.tracked_dirs.contains(rel)),
        }
    }

    /// Walks every directory from `root`, depth first, one at a time
    /// (`untrusted::Descent`: no recursion, a bounded number of descriptors;
    /// the agent chooses the depth and the width).
    fn run(&mut self, root: Dir) -> Result<()> {
        let mut walk = Descent::new(root, Level { subdirs: Vec::new(), rel_len: 0, rules: None }).map_err(err)?;
        walk.data_mut().subdirs = self.list(&mut walk)?;
        loop {
            let Some(name) = walk.data_mut().subdirs.pop() else {
                if walk.depth() == 0 {
                    return Ok(());
                }
                if let Err(e) = walk.ascend() {
                    return self.lost_the_way(&walk, e);
                }
                self.rel.truncate(walk.data().rel_len);
                continue;
            };
            let above = self.rel.len();
            if above > 0 {
                self.rel.push(b'/');
            }
            self.rel.extend_from_slice(name.as_bytes());
            if walk.depth() + 1 > MAX_DEPTH {
                self.skip_here(format!("deeper than {MAX_DEPTH} directories"));
            } else if self.enter(&mut walk, &name)? {
                walk.data_mut().subdirs = self.list(&mut walk)?;
                continue;
            }
            self.rel.truncate(above);
        }
    }

    /// The walk cannot go back up (the agent replaced a directory above while
    /// it was walked): an archive fails, changing nothing; a look or a review
    /// lists each directory it had still to walk as skipped, saying why.
    fn lost_the_way(&mut self, walk: &Descent<Level>, e: std::io::Error) -> Result<()> {
        if self.how == Reading::TakeOver {
            return Err(err(e));
        }
        let rel = std::mem::take(&mut self.rel);
        for level in walk.chain() {
            for name in &level.subdirs {
                let mut path = rel[..level.rel_len].to_vec();
                if !path.is_empty() {
                    path.push(b'/');
                }
                path.extend_from_slice(name.as_bytes());
                self.skip(&path, format!("not read: {e}"));
            }
        }
        Ok(())
    }

    /// Goes into the directory `name` (whose path `self.rel` is already): false
    /// when it is gone or no longer a directory, or (only looking) the agent
    /// made it unreadable, which is listed as skipped.
    fn enter(&mut self, walk: &mut Descent<Level>, name: &OsStr) -> Result<bool> {
        if self.how == Reading::TakeOver {
            walk.dir().grant_owner_access(name).map_err(err)?;
        }
        let level = Level { subdirs: Vec::new(), rel_len: self.rel.len(), rules: None };
        match walk.descend(name, level) {
            Ok(true) if self.layers.is_some() => {
                let opaque = walk.dir().is_opaque().map_err(err)?;
                if let Some(layers) = &mut self.layers {
                    layers.upper.insert(self.rel.clone(), Upper::Dir { opaque });
                }
                Ok(true)
            }
            Ok(true) => Ok(true),
            // Gone, or no longer a directory, since it was listed.
            Ok(false) => {
                self.lost();
                Ok(false)
            }
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied && self.how != Reading::TakeOver => {
                self.skip_here("the agent made it unreadable".into());
                Ok(false)
            }
            Err(e) => Err(err(e)),
        }
    }

    /// Reads the entries of the directory the walk is in: reads its own
    /// `.gitignore` (if it has one), records its files, and returns its
    /// subdirectories to walk.
    fn list(&mut self, walk: &mut Descent<Level>) -> Result<Vec<OsString>> {
        let entries = match walk.dir().entries() {
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied && self.how != Reading::TakeOver => {
                self.skip_here("the agent made it unreadable".into());
                return Ok(Vec::new());
            }
            other => other.map_err(err)?,
        };
        // Looked for only where the listing has one: one made since changes
        // the directory's stamp, which a memo checks.
        let has_rules = entries.iter().any(|(name, _)| name == ".gitignore");
        if has_rules {
            walk.data_mut().rules = self.own_rules(walk.dir());
        } else if self.layers.is_some() {
            walk.data_mut().rules = self.lower_rules();
        }
        let dir = walk.dir();
        self.observe_dir(dir, has_rules);
        let rules: Vec<&Gitignore> = walk.chain().filter_map(|l| l.rules.as_ref()).collect();
        let mut dirs = Vec::new();
        for (name, kind) in entries {
            if name == ".git" || (self.jj && name == ".jj") {
                continue;
            }
            let mut rel = self.rel.clone();
            if !rel.is_empty() {
                rel.push(b'/');
            }
            rel.extend_from_slice(name.as_bytes());
            if self.layered_entry(dir, &name, kind, &rel) == Some(Upper::Whiteout) {
                continue;
            }
            let tracked = self.tracked_file(&rel)?;
            if let Some((mode, id)) = tracked.filter(|(mode, _)| *mode == MODE_GITLINK) {
                self.out.files.push(FileEntry { path: rel, mode, id });
                continue;
            }
            if let Err(why) = super::git::import::refused_name(name.as_bytes(), kind) {
                self.skip(&rel, why);
                continue;
            }
            let tracked = tracked.is_some();
            match kind {
                Kind::Dir if self.tracked_dir(&rel)? || !self.ignored(&rules, &rel, true) => dirs.push(name),
                Kind::File | Kind::Symlink if tracked || !self.ignored(&rules, &rel, false) => {
                    if let Some(entry) = self.file(dir, &name, rel, kind)? {
                        self.out.files.push(entry);
                    }
                }
                Kind::Other => self.skip(&rel, "not a file, symlink or directory".into()),
                _ => {}
            }
        }
        Ok(dirs)
    }

    /// Records (for a memo) the stat data of the directory at `self.rel`,
    /// and of its `.gitignore` if it has one: its rules decided what was
    /// ignored, whatever the file itself is.
    fn observe_dir(&mut self, dir: &Dir, has_rules: bool) {
        let Some(observed) = &mut self.observed else { return };
        match dir.stat() {
            Ok(st) => observed.dir(&self.rel, &st),
            Err(_) => observed.lost(),
        }
        match has_rules.then(|| dir.lstat(".gitignore")) {
            Some(Ok(Some(st))) => observed.file(OsStr::new(".gitignore"), &st),
            None | Some(Ok(None)) => {}
            Some(Err(_)) => observed.lost(),
        }
    }

    /// Lists the directory at `self.rel` as skipped, with why.
    fn skip_here(&mut self, why: String) {
        let rel = std::mem::take(&mut self.rel);
        self.skip(&rel, why);
        self.rel = rel;
    }

    fn skip(&mut self, rel: &[u8], why: String) {
        self.out.skipped.push((String::from_utf8_lossy(rel).into_owned(), why));
        self.out.unseen.push(rel.to_vec());
        self.lost();
    }

    /// Something the result depends on that has no stat data to record.
    fn lost(&mut self) {
        if let Some(observed) = &mut self.observed {
            observed.lost();
        }
    }

    /// The stat data a file's entry was decided by.
    fn seen(&mut self, name: &OsStr, st: &FileStat) {
        if let Some(observed) = &mut self.observed {
            observed.file(name, st);
        }
    }

    /// Walking an upper layer: records what the entry `name` (at `rel`) does
    /// to the lower layer (a directory as not opaque until it is entered).
    fn layered_entry(&mut self, dir: &Dir, name: &OsStr, kind: Kind, rel: &[u8]) -> Option<Upper> {
        let layers = self.layers.as_mut()?;
        let upper = match kind {
            Kind::Dir => Upper::Dir { opaque: false },
            Kind::Other => match dir.lstat(name) {
                Ok(Some(st))
                    if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFCHR && st.st_rdev == 0 =>
                {
                    Upper::Whiteout
                }
                _ => Upper::Other,
            },
            Kind::File | Kind::Symlink => Upper::Other,
        };
        layers.upper.insert(rel.to_vec(), upper);
        Some(upper)
    }

    /// Walking an upper layer, in a directory without a `.gitignore` of its
    /// own: the rules of the lower layer's, if it shows through (read from
    /// the base tree, which forage checked out).
    fn lower_rules(&self) -> Option<Gitignore> {
        let layers = self.layers.as_ref()?;
        let mut path = self.rel.clone();
        if !path.is_empty() {
            path.push(b'/');
        }
        path.extend_from_slice(b".gitignore");
        if !layers.shows(&path) {
            return None;
        }
        let (mode, id) = match &self.lazy {
            Some(lazy) => lazy.lower.file(&path).ok()??,
            None => *layers.lower.get(&path)?,
        };
        if mode == MODE_LINK || mode == MODE_GITLINK {
            return None;
        }
        let blob = self.repo.find_blob(id).ok()?;
        (blob.size() as u64 <= MAX_IGNORE_FILE).then(|| self.rules_of(blob.content()))?
    }

    /// The rules of `dir`'s own `.gitignore` (`dir` being at `self.rel`), read
    /// as the untrusted file it is.
    fn own_rules(&self, dir: &Dir) -> Option<Gitignore> {
        let text = dir.read(".gitignore", MAX_IGNORE_FILE).ok()??;
        self.rules_of(&text)
    }

    /// The rules of `text`, a `.gitignore` at `self.rel`.
    fn rules_of(&self, text: &[u8]) -> Option<Gitignore> {
        let mut builder = GitignoreBuilder::new(self.root.join(OsStr::from_bytes(&self.rel)));
        for line in String::from_utf8_lossy(text).lines() {
            let _ = builder.add_line(None, line);
        }
        builder.build().ok()
    }

    /// git's answer: the last rule that matches decides; the host's rules come
    /// before the worktree's (`rules`, from the top down), the deepest
    /// `.gitignore` last.
    fn ignored(&self, rules: &[&Gitignore], rel: &[u8], is_dir: bool) -> bool {
        let path = self.root.join(OsStr::from_bytes(rel));
        let mut ignored = false;
        for rule in self.ignores.iter().chain(rules.iter().copied()) {
            let matched = rule.matched_path_or_any_parents(&path, is_dir);
            if matched.is_ignore() {
                ignored = true;
            } else if matched.is_whitelist() {
                ignored = false;
            }
        }
        ignored
    }

    /// Runs `open` on `name`. If the agent took the user's permission to read it:
    /// when taking over (an archive, after the agent is gone), gives the
    /// permission back and tries again; otherwise lists it as skipped and
    /// returns `None`.
    fn readable<T>(
        &mut self,
        dir: &Dir,
        name: &OsStr,
        rel: &[u8],
        open: impl Fn(&Dir, &OsStr) -> std::io::Result<T>,
    ) -> Result<Option<T>> {
        if self.how == Reading::TakeOver {
            dir.grant_owner_access(name).map_err(err)?;
        }
        match open(dir, name) {
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied && self.how != Reading::TakeOver => {
                self.skip(rel, "the agent made it unreadable".into());
                Ok(None)
            }
            other => other.map(Some).map_err(err),
        }
    }

    fn file(&mut self, dir: &Dir, name: &OsStr, rel: Vec<u8>, kind: Kind) -> Result<Option<FileEntry>> {
        if kind == Kind::Symlink {
            if self.observed.is_some() {
                match dir.lstat(name) {
                    Ok(Some(st)) => self.seen(name, &st),
                    _ => self.lost(),
                }
            }
            let target = dir.read_link(name).map_err(err)?;
            let id = self.blob(&mut target.as_bytes(), target.len() as u64)?;
            return Ok(Some(FileEntry { path: rel, mode: MODE_LINK, id }));
        }
        // A file whose stat data says it is unchanged is not opened: one
        // fstatat (never following a symlink) instead of open, fstat and close,
        // which is most of what `list` costs per sandbox.
        if self.how != Reading::TakeOver {
            if let Ok(Some(st)) = dir.lstat(name) {
                if Kind::of(&st) == Kind::File {
                    let mode = if st.st_mode & 0o100 != 0 { MODE_EXEC } else { MODE_FILE };
                    if let Some(id) = self.unchanged(&rel, mode, &st) {
                        self.seen(name, &st);
                        return Ok(Some(FileEntry { path: rel, mode, id }));
                    }
                }
            }
        }
        // Gone or replaced since the listing: whatever it is now is not a file.
        let Some(Some((mut file, st))) = self.readable(dir, name, &rel, |d, n| d.open_file(n))? else {
            self.lost();
            return Ok(None);
        };
        self.seen(name, &st);
        let mode = if st.st_mode & 0o100 != 0 { MODE_EXEC } else { MODE_FILE };
        if let Some(id) = self.unchanged(&rel, mode, &st) {
            return Ok(Some(FileEntry { path: rel, mode, id }));
        }
        let size = st.st_size as u64;
        if let Err(why) = self.take_budget(size) {
            self.skip(&rel, why);
            self.out.unread.push(rel);
            return Ok(None);
        }
        let id = self.blob(&mut file, size)?;
        Ok(Some(FileEntry { path: rel, mode, id }))
    }

    /// Counts `size` bytes against what the walk may read, before they are
    /// read; refused, saying why, past `MAX_FILE_BYTES` for one file or the
    /// walk's budget for all.
    fn take_budget(&mut self, size: u64) -> std::result::Result<(), String> {
        if size > MAX_FILE_BYTES {
            return Err(format!("larger than {} MiB", MAX_FILE_BYTES >> 20));
        }
        if size > self.left {
            let what = if self.how == Reading::Store { "stores for a review" } else { "reads" };
            return Err(format!(
                "not read: with it, the files forage {what} would pass {} MiB in all",
                self.how.budget() >> 20
            ));
        }
        self.left -= size;
        Ok(())
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

    /// The blob id of `size` bytes from `content`, streamed (and, unless only
    /// looking, streamed into the host's object store). A file that grew or shrank while
    /// it was read is an error: it is still being written.
    fn blob(&self, content: &mut dyn Read, size: u64) -> Result<Oid> {
        if self.how.stores() {
            let odb = self.repo.odb().map_err(err)?;
            let mut writer = odb.writer(size as usize, ObjectType::Blob).map_err(err)?;
            stream(content, size, |chunk| writer.write_all(chunk).map_err(err))?;
            writer.finalize().map_err(err)
        } else {
            let mut hasher = Sha1::new();
            hasher.update(format!("blob {size}\0").as_bytes());
            stream(content, size, |chunk| {
                hasher.update(chunk);
                Ok(())
            })?;
            Oid::from_bytes(&hasher.finalize()).map_err(err)
        }
    }
}

/// Feeds exactly `size` bytes of `content` to `sink`, a chunk at a time. A
/// file that shrank while it was read is an error: it is still being written.
fn stream(content: &mut dyn Read, size: u64, mut sink: impl FnMut(&[u8]) -> Result<()>) -> Result<()> {
    let mut buf = vec![0u8; 64 << 10];
    let mut left = size;
    while left > 0 {
        let want = left.min(buf.len() as u64) as usize;
        let n = content.read(&mut buf[..want]).map_err(err)?;
        if n == 0 {
            return Err(err("a file shrank while it was read"));
        }
        sink(&buf[..n])?;
        left -= n as u64;
    }
    Ok(())
}

impl WorktreeFiles {
    /// Writes these files as a tree into `repo` (after a `read` that stored them).
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

    /// Writes these files as a tree into `repo`, keeping from `fallback` (the
    /// committed tree) every path forage could not read (skipped: too big,
    /// unreadable, not a file, too deep): what forage cannot see is taken to
    /// be as committed, never deleted.
    pub fn write_tree_keeping(&self, repo: &Repository, fallback: &Tree) -> Result<Oid> {
        if self.unseen.is_empty() {
            return self.write_tree(repo);
        }
        let unseen: Vec<&[u8]> = self.unseen.iter().map(Vec::as_slice).collect();
        let under = |path: &[u8]| {
            unseen.iter().any(|u| path == *u || (path.starts_with(u) && path.get(u.len()) == Some(&b'/')))
        };
        let have: HashSet<&[u8]> = self.files.iter().map(|f| f.path.as_slice()).collect();
        let mut all = WorktreeFiles { files: self.files.clone(), ..Default::default() };
        for (path, (mode, id)) in tree_files(repo, fallback)? {
            if !have.contains(path.as_slice()) && under(&path) {
                all.files.push(FileEntry { path, mode, id });
            }
        }
        all.files.sort_by(|a, b| a.path.cmp(&b.path));
        all.write_tree(repo)
    }

    /// The paths that differ from `tree` (added, changed or removed), sorted;
    /// a file too big to read counts as changed.
    pub fn changed_since(&self, repo: &Repository, tree: Option<&Tree>) -> Result<Vec<String>> {
        let committed: HashMap<Vec<u8>, (u32, Oid)> = match tree {
            Some(tree) => tree_files(repo, tree)?,
            None => HashMap::new(),
        };
        Ok(self.changed_against(committed))
    }

    /// `changed_since`, against the committed files by path: (mode, id).
    pub fn changed_against(&self, mut committed: HashMap<Vec<u8>, (u32, Oid)>) -> Vec<String> {
        let mut changed: Vec<String> = Vec::new();
        for f in &self.files {
            if committed.remove(&f.path) != Some((f.mode, f.id)) {
                changed.push(String::from_utf8_lossy(&f.path).into_owned());
            }
        }
        for path in &self.unread {
            committed.remove(path);
            changed.push(String::from_utf8_lossy(path).into_owned());
        }
        changed.extend(committed.into_keys().map(|p| String::from_utf8_lossy(&p).into_owned()));
        changed.sort();
        changed
    }
}

/// Every non-tree entry of `tree` by path: (mode, id). Names are bytes (git2's
/// own tree walk would panic on a name that is not UTF-8), and the walk keeps
/// its own stack (no recursion).
pub fn tree_files(repo: &Repository, tree: &Tree) -> Result<HashMap<Vec<u8>, (u32, Oid)>> {
    let mut out = HashMap::new();
    let mut stack: Vec<(Oid, Vec<u8>)> = vec![(tree.id(), Vec::new())];
    while let Some((id, prefix)) = stack.pop() {
        let tree = repo.find_tree(id).map_err(err)?;
        for entry in tree.iter() {
            let mut path = prefix.clone();
            if !path.is_empty() {
                path.push(b'/');
            }
            path.extend_from_slice(entry.name_bytes());
            if entry.kind() == Some(ObjectType::Tree) {
                stack.push((entry.id(), path));
            } else {
                out.insert(path, (entry.filemode() as u32, entry.id()));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo_with_worktree() -> (tempfile::TempDir, Repository) {
        let dir = tempfile::tempdir().unwrap();
        let repo = Repository::init(dir.path().join("repo")).unwrap();
        std::fs::create_dir(dir.path().join("wt")).unwrap();
        (dir, repo)
    }

    /// An upper layer as the overlay leaves it (ADR 0003): whiteouts are
    /// character devices 0/0 (made here with mknod, as root), an opaque
    /// directory carries `user.overlay.opaque=y`.
    #[test]
    fn a_layered_read_is_the_lower_tree_with_the_upper_layer_over_it() {
        use nix::sys::stat::{mknod, Mode, SFlag};
        let (dir, repo) = repo_with_worktree();
        let upper = dir.path().join("wt");
        let blob = |text: &str| repo.blob(text.as_bytes()).unwrap();
        let lower: HashMap<Vec<u8>, (u32, Oid)> = [
            ("a.txt", "a\n"),
            ("gone.txt", "g\n"),
            ("d/x.txt", "x\n"),
            ("d/deep/y.txt", "y\n"),
            ("o/old.txt", "old\n"),
            ("w/z.txt", "z\n"),
            (".gitignore", "*.log\n"),
        ]
        .into_iter()
        .map(|(p, t)| (p.as_bytes().to_vec(), (MODE_FILE, blob(t))))
        .collect();
        let whiteout = |path: &Path| mknod(path, SFlag::S_IFCHR, Mode::empty(), 0).unwrap();
        whiteout(&upper.join("gone.txt"));
        std::fs::create_dir_all(upper.join("d/deep")).unwrap();
        whiteout(&upper.join("d/deep/y.txt"));
        std::fs::write(upper.join("d/new.txt"), "new\n").unwrap();
        std::fs::create_dir(upper.join("o")).unwrap();
        xattr::set(upper.join("o"), "user.overlay.opaque", b"y").unwrap();
        std::fs::write(upper.join("o/fresh.txt"), "fresh\n").unwrap();
        whiteout(&upper.join("w"));
        std::fs::write(upper.join("noise.log"), "ignored by the lower layer's .gitignore\n").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", upper.join("a.txt")).unwrap();
        let files = read_layered(&repo, &HostRules::of(&repo), &upper, lower.clone(), lower, Reading::Look).unwrap();
        let names: Vec<&str> = files.files.iter().map(|f| std::str::from_utf8(&f.path).unwrap()).collect();
        assert_eq!(names, [".gitignore", "a.txt", "d/new.txt", "d/x.txt", "o/fresh.txt"]);
        let link = &files.files[1];
        assert_eq!((link.mode, link.id), (MODE_LINK, blob("/etc/passwd")), "a symlink, never followed");
        assert!(files.skipped.is_empty(), "{:?}", files.skipped);
    }

    /// A tree of `files` ((path, content)) in `repo`, and its files by path.
    fn tree_of(repo: &Repository, files: &[(&str, &str)]) -> (Oid, HashMap<Vec<u8>, (u32, Oid)>) {
        let entries: Vec<FileEntry> = files
            .iter()
            .map(|(p, t)| FileEntry {
                path: p.as_bytes().to_vec(),
                mode: MODE_FILE,
                id: repo.blob(t.as_bytes()).unwrap(),
            })
            .collect();
        let map = entries.iter().map(|f| (f.path.clone(), (f.mode, f.id))).collect();
        (WorktreeFiles { files: entries, ..Default::default() }.write_tree(repo).unwrap(), map)
    }

    /// What `agent_layer` over the base changes from the agent's HEAD.
    const CHANGED_BY_THE_AGENT_LAYER: &[&str] = &[
        "a.txt",
        "committed-only.txt",
        "d/deep/y.txt",
        "d/new.txt",
        "f",
        "f/inside.txt",
        "gone.txt",
        "o/added.txt",
        "o/fresh.txt",
        "o/old.txt",
        "o/sub/k.txt",
        "t",
        "t/u.txt",
        "untouched/m.txt",
        "untouched/n.txt",
        "w/more.txt",
        "w/z.txt",
    ];

    /// The upper layer of `the_changes_of_layers_read_in_o_changes_are_the_full_reads`.
    fn agent_layer(upper: &Path) {
        use nix::sys::stat::{mknod, Mode, SFlag};
        let whiteout = |path: &Path| mknod(path, SFlag::S_IFCHR, Mode::empty(), 0).unwrap();
        whiteout(&upper.join("gone.txt"));
        std::fs::create_dir_all(upper.join("d/deep")).unwrap();
        whiteout(&upper.join("d/deep/y.txt"));
        std::fs::write(upper.join("d/new.txt"), "new\n").unwrap();
        std::fs::write(upper.join("d/x.txt"), "x2\n").unwrap();
        std::fs::create_dir(upper.join("o")).unwrap();
        xattr::set(upper.join("o"), "user.overlay.opaque", b"y").unwrap();
        std::fs::write(upper.join("o/fresh.txt"), "fresh\n").unwrap();
        whiteout(&upper.join("w"));
        std::fs::create_dir(upper.join("f")).unwrap();
        xattr::set(upper.join("f"), "user.overlay.opaque", b"y").unwrap();
        std::fs::write(upper.join("f/inside.txt"), "i\n").unwrap();
        std::fs::write(upper.join("t"), "now a file\n").unwrap();
        std::fs::write(upper.join("same.txt"), "s\n").unwrap();
        std::fs::write(upper.join("noise.log"), "ignored by the lower layer's .gitignore\n").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", upper.join("a.txt")).unwrap();
    }

    /// `changed_layered` (O(changes)) says what a full layered read compared
    /// with the committed files says, for an upper layer that edits, adds,
    /// deletes files and directories, makes a directory opaque, replaces a
    /// file with a directory and a directory with a file, and a committed
    /// tree the agent moved on from the base (edits, additions, deletions,
    /// some under what the upper layer deletes or replaces).
    #[test]
    fn the_changes_of_layers_read_in_o_changes_are_the_full_reads() {
        let (dir, repo) = repo_with_worktree();
        let upper = dir.path().join("wt");
        let (base, lower) = tree_of(
            &repo,
            &[
                ("a.txt", "a\n"),
                ("gone.txt", "g\n"),
                ("same.txt", "s\n"),
                ("d/x.txt", "x\n"),
                ("d/deep/y.txt", "y\n"),
                ("o/old.txt", "old\n"),
                ("o/sub/k.txt", "k\n"),
                ("w/z.txt", "z\n"),
                ("f", "a file the agent makes a directory\n"),
                ("t/u.txt", "a directory the agent makes a file\n"),
                ("untouched/m.txt", "m\n"),
                ("untouched/n.txt", "n\n"),
                (".gitignore", "*.log\n"),
            ],
        );
        // The agent's HEAD: it committed some edits of its own.
        let (head, committed) = tree_of(
            &repo,
            &[
                ("a.txt", "a\n"),
                ("gone.txt", "g\n"),
                ("same.txt", "s\n"),
                ("d/x.txt", "x2\n"),
                ("d/deep/y.txt", "y\n"),
                ("o/old.txt", "old\n"),
                ("o/sub/k.txt", "k\n"),
                ("o/added.txt", "under an opaque directory\n"),
                ("w/z.txt", "z\n"),
                ("w/more.txt", "under a whiteout\n"),
                ("f", "a file the agent makes a directory\n"),
                ("t/u.txt", "a directory the agent makes a file\n"),
                ("untouched/m.txt", "m2\n"),
                // untouched/n.txt deleted, which the lower layer still shows.
                ("committed-only.txt", "c\n"),
                (".gitignore", "*.log\n"),
            ],
        );
        agent_layer(&upper);
        let rules = HostRules::of(&repo);
        let (lower_files, committed_files) = (lower.clone(), committed.clone());
        let full = read_layered(&repo, &rules, &upper, lower, committed.clone(), Reading::Look).unwrap();
        let expected = full.changed_against(committed);
        let (lower, head) = (TreeLookup::in_host(&repo, base), TreeLookup::in_host(&repo, head));
        let (changed, skipped) = changed_layered(&repo, &rules, &upper, &lower, &head).unwrap();
        assert_eq!(changed, expected);
        assert!(skipped.is_empty(), "{skipped:?}");
        // The archive's tree, stored: the same tree either way.
        let stored = read_layered(&repo, &rules, &upper, lower_files, committed_files, Reading::Store).unwrap();
        let head_tree = repo.find_tree(head.root()).unwrap();
        let changes = LayeredChanges::read(&repo, &rules, &upper, &lower, &head, Reading::Store).unwrap();
        let tree = changes.write_tree(&repo, &lower, &head_tree).unwrap();
        assert_eq!(tree, stored.write_tree_keeping(&repo, &head_tree).unwrap());
        assert_eq!(changed, CHANGED_BY_THE_AGENT_LAYER, "and what that is, for the reader");
    }

    #[test]
    fn names_git_refuses_big_files_and_fifos_are_skipped_saying_why() {
        let (dir, repo) = repo_with_worktree();
        let wt = dir.path().join("wt");
        std::fs::write(wt.join("ok.txt"), "fine\n").unwrap();
        std::fs::write(wt.join(".git."), "x").unwrap();
        std::fs::create_dir(wt.join(".GIT")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", wt.join(".gitmodules")).unwrap();
        nix::unistd::mkfifo(&wt.join("fifo"), nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let big = std::fs::File::create(wt.join("sparse")).unwrap();
        big.set_len(MAX_FILE_BYTES + 1).unwrap();
        // A FIFO where a .gitignore belongs blocks nothing.
        nix::unistd::mkfifo(&wt.join(".gitignore"), nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let files = read(&repo, &wt, Known::Snapshot { files: HashMap::new(), since: (0, 0) }, Reading::Look).unwrap();
        let names: Vec<&[u8]> = files.files.iter().map(|f| f.path.as_slice()).collect();
        assert_eq!(names, [&b"ok.txt"[..]]);
        let skipped: HashMap<&str, &str> = files.skipped.iter().map(|(p, w)| (p.as_str(), w.as_str())).collect();
        for name in [".git.", ".GIT", ".gitmodules", "fifo", ".gitignore"] {
            assert!(skipped.contains_key(name), "{name}: {skipped:?}");
        }
        assert!(skipped["sparse"].contains("larger than"), "{skipped:?}");
        assert_eq!(files.changed_since(&repo, None).unwrap(), ["ok.txt", "sparse"], "the big file counts as changed");
    }

    #[test]
    fn ignore_rules_apply_by_directory_and_deep_trees_are_cut_off() {
        let (dir, repo) = repo_with_worktree();
        let wt = dir.path().join("wt");
        std::fs::write(wt.join(".gitignore"), "*.log\n!keep.log\n").unwrap();
        std::fs::create_dir_all(wt.join("sub")).unwrap();
        std::fs::write(wt.join("sub/.gitignore"), "local\n").unwrap();
        for f in ["a.log", "keep.log", "sub/b.log", "sub/local", "sub/kept"] {
            std::fs::write(wt.join(f), "x").unwrap();
        }
        let mut deep = wt.join("d");
        for _ in 0..MAX_DEPTH + 5 {
            deep = deep.join("d");
        }
        std::fs::create_dir_all(&deep).unwrap();
        std::fs::write(deep.join("f"), "too deep").unwrap();
        let files = read(&repo, &wt, Known::Snapshot { files: HashMap::new(), since: (0, 0) }, Reading::Look).unwrap();
        let names: Vec<String> = files.files.iter().map(|f| String::from_utf8_lossy(&f.path).into_owned()).collect();
        assert_eq!(names, [".gitignore", "keep.log", "sub/.gitignore", "sub/kept"]);
        assert!(files.skipped.iter().any(|(_, why)| why.contains("deeper than")), "{:?}", files.skipped);
    }

    #[test]
    fn streamed_hashes_are_git_s() {
        let (dir, repo) = repo_with_worktree();
        let wt = dir.path().join("wt");
        std::fs::write(wt.join("a"), "hello\n").unwrap();
        let files = read(&repo, &wt, Known::Snapshot { files: HashMap::new(), since: (0, 0) }, Reading::Look).unwrap();
        assert_eq!(files.files[0].id, Oid::hash_object(ObjectType::Blob, b"hello\n").unwrap());
        let written =
            read(&repo, &wt, Known::Snapshot { files: HashMap::new(), since: (0, 0) }, Reading::Store).unwrap();
        assert_eq!(written.files[0].id, files.files[0].id);
        assert!(repo.find_blob(written.files[0].id).is_ok());
    }

    #[test]
    fn sizes_are_bounded_before_reading_one_file_and_all_together() {
        let (dir, repo) = repo_with_worktree();
        super::super::review::in_memory(&repo).unwrap();
        let wt = dir.path().join("wt");
        // Sparse: they cost the agent nothing, and count as the size they claim.
        for name in ["a", "b"] {
            std::fs::File::create(wt.join(name)).unwrap().set_len(MAX_STORED_BYTES / 2 + 1).unwrap();
        }
        std::fs::write(wt.join("c"), "small\n").unwrap();
        let none = || Known::Snapshot { files: HashMap::new(), since: (0, 0) };
        let stored = read(&repo, &wt, none(), Reading::Store).unwrap();
        let names: Vec<&[u8]> = stored.files.iter().map(|f| f.path.as_slice()).collect();
        assert_eq!(names, [&b"a"[..], b"c"], "{:?}", stored.skipped);
        assert_eq!(stored.skipped.len(), 1, "{:?}", stored.skipped);
        let (path, why) = &stored.skipped[0];
        assert_eq!(path, "b");
        assert!(why.contains("would pass 256 MiB"), "{why}");
        assert_eq!(stored.changed_since(&repo, None).unwrap(), ["a", "b", "c"], "what is not read counts as changed");
    }

    #[test]
    fn a_walk_that_cannot_go_back_up_lists_what_it_had_left_or_fails_an_archive() {
        let (dir, repo) = repo_with_worktree();
        let wt = dir.path().join("wt");
        std::fs::create_dir_all(wt.join("a/b")).unwrap();
        for how in [Reading::Look, Reading::TakeOver] {
            let mut walk = Walk {
                repo: &repo,
                root: wt.clone(),
                ignores: Vec::new(),
                tracked: HashMap::new(),
                tracked_dirs: HashSet::new(),
                since: None,
                jj: false,
                how,
                out: WorktreeFiles::default(),
                observed: None,
                rel: b"a/b".to_vec(),
                left: 0,
                layers: None,
                lazy: None,
            };
            // Walking a/b, with x and y left to walk at the top and z in a.
            let top = Level { subdirs: vec!["x".into(), "y".into()], rel_len: 0, rules: None };
            let mut descent = Descent::new(Dir::open(&wt).unwrap(), top).unwrap();
            assert!(descent
                .descend(OsStr::new("a"), Level { subdirs: vec!["z".into()], rel_len: 1, rules: None })
                .unwrap());
            let lost = std::io::Error::other("changed while forage walked it");
            let done = walk.lost_the_way(&descent, lost);
            if how == Reading::TakeOver {
                assert!(done.is_err(), "an archive must not go on without what it could not read");
                continue;
            }
            done.unwrap();
            let skipped: Vec<&str> = walk.out.skipped.iter().map(|(p, _)| p.as_str()).collect();
            assert_eq!(skipped, ["x", "y", "a/z"]);
            assert!(walk.out.skipped[0].1.contains("changed while forage walked it"), "{:?}", walk.out.skipped);
        }
    }
}
