//! What `list` remembers of a git sandbox's DIRTY count between runs, so that a
//! worktree nobody touched is not walked, its index not read and its branch's
//! tree not compared again.
//!
//! A memo holds the count with the stat data of everything that decided it:
//! every directory walked (its entries change only with its mtime and ctime),
//! every file and symlink compared, every `.gitignore` read; and, as its key,
//! the branch's tip and the host's own ignore files. It is used only while all
//! of these are exactly as recorded, checked with one `fstatat` per file and an
//! `fstat` per directory, never following a symlink (`untrusted::Dir`), as the
//! full walk does. So an agent can make a memo wrong only by making a file's
//! stat data identical while changing its content, which needs a ctime the
//! kernel sets itself.
//!
//! A memo is written only when every time it records is older than
//! `SETTLED`: a change in the same clock tick as the walk could leave a stat
//! unchanged (git's "racily clean" files). A walk that skipped anything (a
//! FIFO, an unreadable file, a name git refuses) is not remembered at all.
//!
//! The memo lives in FORAGE_HOME/private/NAME, which no container mounts, and
//! is written holding that directory's lock (see `query::save_memo`), which
//! its removal waits for, so it never appears in a directory being removed.
//! It is rewritten in place, with a digest that a half-written memo fails.

use std::ffi::{OsStr, OsString};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::{Duration, SystemTime};

use nix::sys::stat::FileStat;

use super::untrusted::{Descent, Dir};

/// The memo's file in the sandbox's private directory.
pub const FILE: &str = "dirty-memo";
const MAGIC: &[u8] = b"forage dirty-memo 2\n";
/// How old every recorded time must be for the memo to be written.
const SETTLED: Duration = Duration::from_secs(1);

/// The stat data that changes whenever a file's content, mode, or a
/// directory's entries do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    mtime: (i64, i64),
    ctime: (i64, i64),
    size: i64,
    ino: u64,
    mode: u32,
}

impl Stamp {
    pub fn of(st: &FileStat) -> Stamp {
        Stamp {
            mtime: (st.st_mtime, st.st_mtime_nsec),
            ctime: (st.st_ctime, st.st_ctime_nsec),
            size: st.st_size,
            ino: st.st_ino,
            mode: st.st_mode,
        }
    }

    fn newest(&self) -> (i64, i64) {
        self.mtime.max(self.ctime)
    }
}

/// One directory of the worktree: its path from the top (`/`-separated, empty
/// for the top), its stamp, and the files in it that were read.
#[derive(Debug, Clone, PartialEq, Eq)]
struct DirSeen {
    rel: Vec<u8>,
    stamp: Stamp,
    files: Vec<(OsString, Stamp)>,
}

/// What a walk of the worktree saw, recorded as it went (`worktree_files`).
#[derive(Debug, Default)]
pub struct Observed {
    dirs: Vec<DirSeen>,
    /// False once the walk skipped or lost something it cannot stamp.
    incomplete: bool,
    newest: (i64, i64),
}

impl Observed {
    /// A directory, as its walk begins (parents always before children).
    pub fn dir(&mut self, rel: &[u8], st: &FileStat) {
        let stamp = Stamp::of(st);
        self.newest = self.newest.max(stamp.newest());
        self.dirs.push(DirSeen { rel: rel.to_vec(), stamp, files: Vec::new() });
    }

    /// A file of the directory last begun.
    pub fn file(&mut self, name: &OsStr, st: &FileStat) {
        let stamp = Stamp::of(st);
        self.newest = self.newest.max(stamp.newest());
        match self.dirs.last_mut() {
            Some(dir) => dir.files.push((name.to_os_string(), stamp)),
            None => self.incomplete = true,
        }
    }

    /// Something the walk could not stamp: the memo would not cover it.
    pub fn lost(&mut self) {
        self.incomplete = true;
    }

    /// The memo of a walk that began at `began` and counted `dirty` files, if it
    /// can be trusted later (see the module's comment).
    pub fn into_memo(self, key: MemoKey, dirty: usize, began: SystemTime) -> Option<Memo> {
        let began = began.checked_sub(SETTLED)?.duration_since(SystemTime::UNIX_EPOCH).ok()?;
        let settled = (began.as_secs() as i64, i64::from(began.subsec_nanos()));
        (!self.incomplete && self.newest < settled).then_some(Memo { key, dirty, dirs: self.dirs })
    }
}

/// A digest of what else the count depends on (see `GitWorkspace::memo_key`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoKey(pub [u8; 20]);

/// Adds `path` and its stat data (or its absence) to `digest`: it changes
/// whenever the file's content may have.
pub fn digest_file(digest: &mut sha1::Sha1, path: &Path) {
    use sha1::Digest;
    use std::os::unix::fs::MetadataExt;
    digest.update(path.as_os_str().as_bytes());
    match std::fs::metadata(path) {
        Ok(m) => {
            for n in [m.mtime(), m.mtime_nsec(), m.ctime(), m.ctime_nsec(), m.size() as i64, m.ino() as i64] {
                digest.update(n.to_le_bytes());
            }
        }
        Err(_) => digest.update(b"\0absent\0"),
    }
}

#[derive(Debug, PartialEq, Eq)]
pub struct Memo {
    key: MemoKey,
    pub dirty: usize,
    dirs: Vec<DirSeen>,
}

impl Memo {
    /// The memo in `private` (a sandbox's private directory), if there is a
    /// readable one.
    pub fn load(private: &Path) -> Option<Memo> {
        let bytes = std::fs::read(private.join(FILE)).ok()?;
        decode(&bytes)
    }

    /// Writes the memo into `private` (the sandbox's private directory, held
    /// open) over the last one, in place: no file is made and none deleted,
    /// which ext4 makes costly when done for every sandbox at every `list` (it
    /// looks further for a free inode the more were deleted lately). A reader
    /// that catches it half written finds its digest wrong and walks instead.
    pub fn save(&self, private: &Dir) -> std::io::Result<()> {
        let bytes = encode(self);
        let mut file = private.open_write(FILE)?;
        file.write_all(&bytes)?;
        file.set_len(bytes.len() as u64)
    }

    /// The count, if the memo is for `key` and the worktree at `root` is still
    /// exactly as it records.
    pub fn dirty_if_unchanged(&self, key: &MemoKey, root: &Path) -> Option<usize> {
        (self.key == *key && self.unchanged(root).unwrap_or(false)).then_some(self.dirty)
    }

    fn unchanged(&self, root: &Path) -> std::io::Result<bool> {
        // The directories are in walk order, each after its parent: the walk
        // goes back up to the parent of the next one, then down to it. Each
        // directory's data in the walk is its path from the top.
        let mut dirs = self.dirs.iter();
        let Some(top) = dirs.next().filter(|d| d.rel.is_empty()) else { return Ok(false) };
        let mut walk = Descent::new(Dir::open(root)?, Vec::new())?;
        if !top.matches(walk.dir())? {
            return Ok(false);
        }
        for seen in dirs {
            while !is_inside(&seen.rel, walk.data()) {
                walk.ascend()?;
            }
            let above = walk.data().len();
            let rest = if above == 0 { &seen.rel[..] } else { &seen.rel[above + 1..] };
            for part in rest.split(|b| *b == b'/').filter(|p| !p.is_empty()) {
                let mut rel = walk.data().clone();
                if !rel.is_empty() {
                    rel.push(b'/');
                }
                rel.extend_from_slice(part);
                if !walk.descend(OsStr::from_bytes(part), rel)? {
                    return Ok(false);
                }
            }
            if !seen.matches(walk.dir())? {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

impl DirSeen {
    /// Whether `dir` (this directory, reached again) and the files in it are
    /// exactly as recorded.
    fn matches(&self, dir: &Dir) -> std::io::Result<bool> {
        if Stamp::of(&dir.stat()?) != self.stamp {
            return Ok(false);
        }
        for (name, stamp) in &self.files {
            match dir.lstat(name)? {
                Some(st) if Stamp::of(&st) == *stamp => {}
                _ => return Ok(false),
            }
        }
        Ok(true)
    }
}

/// Whether `rel` is strictly below `above` (the top, `""`, holds everything).
fn is_inside(rel: &[u8], above: &[u8]) -> bool {
    above.is_empty() || (rel.len() > above.len() && rel.starts_with(above) && rel[above.len()] == b'/')
}

/// `MAGIC`, the SHA-1 of the rest, the rest.
fn encode(memo: &Memo) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&memo.key.0);
    put_u64(&mut out, memo.dirty as u64);
    put_u64(&mut out, memo.dirs.len() as u64);
    for dir in &memo.dirs {
        put_bytes(&mut out, &dir.rel);
        put_stamp(&mut out, &dir.stamp);
        put_u64(&mut out, dir.files.len() as u64);
        for (name, stamp) in &dir.files {
            put_bytes(&mut out, name.as_bytes());
            put_stamp(&mut out, stamp);
        }
    }
    use sha1::Digest;
    [MAGIC, &sha1::Sha1::digest(&out)[..], &out].concat()
}

fn decode(bytes: &[u8]) -> Option<Memo> {
    use sha1::Digest;
    let rest = bytes.strip_prefix(MAGIC)?;
    let (digest, body) = (rest.get(..20)?, rest.get(20..)?);
    if sha1::Sha1::digest(body)[..] != *digest {
        return None;
    }
    let mut r = Reader(body);
    let key = MemoKey(r.array()?);
    let dirty = usize::try_from(r.u64()?).ok()?;
    let mut dirs = Vec::new();
    for _ in 0..r.u64()? {
        let rel = r.bytes()?.to_vec();
        let stamp = r.stamp()?;
        let mut files = Vec::new();
        for _ in 0..r.u64()? {
            let name = OsStr::from_bytes(r.bytes()?).to_os_string();
            files.push((name, r.stamp()?));
        }
        dirs.push(DirSeen { rel, stamp, files });
    }
    r.0.is_empty().then_some(Memo { key, dirty, dirs })
}

fn put_u64(out: &mut Vec<u8>, n: u64) {
    out.extend_from_slice(&n.to_le_bytes());
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_u64(out, b.len() as u64);
    out.extend_from_slice(b);
}

fn put_stamp(out: &mut Vec<u8>, s: &Stamp) {
    for n in [s.mtime.0, s.mtime.1, s.ctime.0, s.ctime.1, s.size] {
        out.extend_from_slice(&n.to_le_bytes());
    }
    put_u64(out, s.ino);
    put_u64(out, u64::from(s.mode));
}

/// Reads what `encode` wrote; `None` at the first thing out of place.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Some(head)
    }

    fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.take(N)?.try_into().ok()
    }

    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.array()?))
    }

    fn i64(&mut self) -> Option<i64> {
        Some(i64::from_le_bytes(self.array()?))
    }

    fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = usize::try_from(self.u64()?).ok()?;
        self.take(n)
    }

    fn stamp(&mut self) -> Option<Stamp> {
        Some(Stamp {
            mtime: (self.i64()?, self.i64()?),
            ctime: (self.i64()?, self.i64()?),
            size: self.i64()?,
            ino: self.u64()?,
            mode: u32::try_from(self.u64()?).ok()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records `root` as a walk would: every directory, then its files.
    fn observe(root: &Path) -> Observed {
        let mut observed = Observed::default();
        let mut stack = vec![(Vec::new(), Dir::open(root).unwrap())];
        while let Some((rel, dir)) = stack.pop() {
            observed.dir(&rel, &dir.stat().unwrap());
            for (name, kind) in dir.entries().unwrap() {
                match kind {
                    super::super::untrusted::Kind::Dir => {
                        let mut sub = rel.clone();
                        if !sub.is_empty() {
                            sub.push(b'/');
                        }
                        sub.extend_from_slice(name.as_bytes());
                        stack.push((sub, dir.dir(&name).unwrap().unwrap()));
                    }
                    _ => observed.file(&name, &dir.lstat(&name).unwrap().unwrap()),
                }
            }
        }
        observed
    }

    /// A memo of `root` as it is now, as if it were taken two seconds from now
    /// (so every time in it counts as settled).
    fn memo_of(root: &Path, key: MemoKey) -> Memo {
        let later = SystemTime::now() + Duration::from_secs(2);
        observe(root).into_memo(key, 3, later).expect("a settled, complete walk makes a memo")
    }

    fn tree() -> tempfile::TempDir {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("src/deep")).unwrap();
        std::fs::write(t.path().join("a.txt"), "alpha\n").unwrap();
        std::fs::write(t.path().join("src/b.txt"), "bravo\n").unwrap();
        std::fs::write(t.path().join("src/deep/c.txt"), "charlie\n").unwrap();
        std::fs::create_dir(t.path().join("empty")).unwrap();
        t
    }

    const KEY: MemoKey = MemoKey([7; 20]);

    #[test]
    fn a_memo_survives_its_file_and_holds_while_nothing_changes() {
        let t = tree();
        let memo = memo_of(t.path(), KEY);
        memo.save(&Dir::open(t.path()).unwrap()).unwrap();
        let loaded = Memo::load(t.path()).expect("the memo reads back");
        assert_eq!(loaded, memo);
        // The memo's own file is new in the top directory: stamp it after saving.
        let memo = memo_of(t.path(), KEY);
        assert_eq!(memo.dirty_if_unchanged(&KEY, t.path()), Some(3));
        assert_eq!(memo.dirty_if_unchanged(&MemoKey([8; 20]), t.path()), None, "another key");
    }

    #[test]
    fn any_change_to_what_was_walked_makes_it_stale() {
        type Change = fn(&Path);
        let changes: [(&str, Change); 8] = [
            ("same size, new content", |r| std::fs::write(r.join("src/deep/c.txt"), "CHARLIE\n").unwrap()),
            ("a new file", |r| std::fs::write(r.join("src/new.txt"), "").unwrap()),
            ("a removed file", |r| std::fs::remove_file(r.join("a.txt")).unwrap()),
            ("a file in an empty directory", |r| std::fs::write(r.join("empty/x"), "").unwrap()),
            ("a mode", |r| {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(r.join("src/b.txt"), std::fs::Permissions::from_mode(0o755)).unwrap()
            }),
            ("a directory replaced by a symlink", |r| {
                std::fs::rename(r.join("src/deep"), r.join("elsewhere")).unwrap();
                std::os::unix::fs::symlink(r.join("elsewhere"), r.join("src/deep")).unwrap();
            }),
            ("a file replaced by another with the same content", |r| {
                std::fs::write(r.join("a.tmp"), "alpha\n").unwrap();
                std::fs::rename(r.join("a.tmp"), r.join("a.txt")).unwrap();
            }),
            ("the whole tree moved away", |r| std::fs::rename(r.join("src"), r.join("src2")).unwrap()),
        ];
        for (what, change) in changes {
            let t = tree();
            let memo = memo_of(t.path(), KEY);
            assert_eq!(memo.dirty_if_unchanged(&KEY, t.path()), Some(3), "{what}: before");
            // A clock tick, so that even a coarse file system stamps the change anew.
            std::thread::sleep(Duration::from_millis(20));
            change(t.path());
            assert_eq!(memo.dirty_if_unchanged(&KEY, t.path()), None, "{what}: not noticed");
        }
    }

    #[test]
    fn no_memo_of_a_walk_that_lost_something_or_saw_fresh_times() {
        let t = tree();
        assert!(observe(t.path()).into_memo(KEY, 0, SystemTime::now()).is_none(), "files written just now");
        let mut lost = observe(t.path());
        lost.lost();
        assert!(lost.into_memo(KEY, 0, SystemTime::now() + Duration::from_secs(2)).is_none(), "a lost entry");
    }

    #[test]
    fn a_damaged_memo_file_is_no_memo() {
        let t = tree();
        let memo = memo_of(t.path(), KEY);
        memo.save(&Dir::open(t.path()).unwrap()).unwrap();
        let bytes = std::fs::read(t.path().join(FILE)).unwrap();
        for cut in [0, MAGIC.len(), bytes.len() / 2, bytes.len() - 1] {
            std::fs::write(t.path().join(FILE), &bytes[..cut]).unwrap();
            assert!(Memo::load(t.path()).is_none(), "cut at {cut}");
        }
        std::fs::write(t.path().join(FILE), [&bytes[..], b"x"].concat()).unwrap();
        assert!(Memo::load(t.path()).is_none(), "trailing bytes");
        let mut flipped = bytes.clone();
        *flipped.last_mut().unwrap() ^= 1;
        std::fs::write(t.path().join(FILE), flipped).unwrap();
        assert!(Memo::load(t.path()).is_none(), "a byte changed (a memo caught half rewritten)");
    }

    #[test]
    fn a_memo_is_rewritten_in_place_over_a_longer_one() {
        let t = tree();
        let long = memo_of(t.path(), KEY);
        long.save(&Dir::open(t.path()).unwrap()).unwrap();
        let inode = std::fs::metadata(t.path().join(FILE)).map(|m| std::os::unix::fs::MetadataExt::ino(&m)).unwrap();
        let short = Memo { key: KEY, dirty: 1, dirs: Vec::new() };
        short.save(&Dir::open(t.path()).unwrap()).unwrap();
        assert_eq!(Memo::load(t.path()), Some(short));
        let now = std::fs::metadata(t.path().join(FILE)).map(|m| std::os::unix::fs::MetadataExt::ino(&m)).unwrap();
        assert_eq!(now, inode, "no new file");
    }
}
