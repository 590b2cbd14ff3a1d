//! Files the agent can write, read on the host without trusting them (SPEC §3a).
//!
//! Inside the container the agent runs as the user's uid, so anything it can reach
//! it can replace with a symlink (resolved on the host against the host's root),
//! a FIFO (which blocks whoever opens it), a huge file, or a directory it made
//! unreadable. So every read here starts from a directory forage made, whose path
//! comes from forage's record, and walks one component at a time with
//! `O_NOFOLLOW`; only regular files and directories are read, files with a size
//! bound, and nothing is ever opened in a way that can block.
//!
//! Deleting is here too: `remove_created_dir` removes only a canonical,
//! non-symlink directory strictly under a directory forage owns.
//!
//! The agent decides how deep and how wide its trees are, so every walk here
//! is a `Descent`: depth first from an explicit chain (no recursion), entering
//! one subdirectory at a time, holding at most `OPEN_IN_CHAIN` descriptors
//! however deep it goes.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::fcntl::{openat, readlinkat, Flock, FlockArg, OFlag};
use nix::sys::stat::{fstat, fstatat, FileStat, Mode, SFlag};
use nix::unistd::linkat;

/// What a directory entry is, as `lstat` sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    Dir,
    File,
    Symlink,
    /// FIFOs, sockets, devices: never opened.
    Other,
}

impl Kind {
    pub fn of(st: &FileStat) -> Kind {
        kind_of(st)
    }
}

fn kind_of(st: &FileStat) -> Kind {
    match SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT {
        SFlag::S_IFDIR => Kind::Dir,
        SFlag::S_IFREG => Kind::File,
        SFlag::S_IFLNK => Kind::Symlink,
        _ => Kind::Other,
    }
}

/// A directory held open by descriptor; names are resolved beneath it only.
#[derive(Debug)]
pub struct Dir {
    fd: OwnedFd,
    path: PathBuf,
}

fn nofollow_dir() -> OFlag {
    OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC
}

/// True for the errors that mean "not there, or not a plain directory/file": the
/// agent may have removed it or put a symlink in its place.
fn is_absent(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOENT) | Some(libc::ENOTDIR) | Some(libc::ELOOP))
}

impl Dir {
    /// Opens a directory forage made (its path comes from forage's own record).
    pub fn open(path: &Path) -> io::Result<Dir> {
        let fd = openat(nix::fcntl::AT_FDCWD, path, nofollow_dir(), Mode::empty())?;
        Ok(Dir { fd, path: path.to_path_buf() })
    }

    /// The same directory, by a descriptor of its own.
    pub fn try_clone(&self) -> io::Result<Dir> {
        Ok(Dir { fd: self.fd.try_clone()?, path: self.path.clone() })
    }

    /// The host path this directory was reached by, for messages.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The subdirectory `name`; `None` when it is absent, or is anything but a
    /// directory (a symlink to one included).
    pub fn dir(&self, name: impl AsRef<OsStr>) -> io::Result<Option<Dir>> {
        let name = name.as_ref();
        Ok(self.open_sub(name)?.map(|fd| Dir { fd, path: self.path.join(name) }))
    }

    /// The descriptor of the subdirectory `name`, as `dir` opens it.
    fn open_sub(&self, name: &OsStr) -> io::Result<Option<OwnedFd>> {
        match openat(&self.fd, name, nofollow_dir(), Mode::empty()) {
            Ok(fd) => Ok(Some(fd)),
            Err(e) => {
                let e = io::Error::from(e);
                if is_absent(&e) {
                    Ok(None)
                } else {
                    Err(e)
                }
            }
        }
    }

    /// Follows a `/`-separated relative path of plain directories (any bytes
    /// but `/` in a name).
    pub fn dir_path(&self, rel: impl AsRef<OsStr>) -> io::Result<Option<Dir>> {
        let mut parts = rel.as_ref().as_bytes().split(|b| *b == b'/').filter(|p| !p.is_empty()).map(OsStr::from_bytes);
        let Some(first) = parts.next() else { return self.dir(".") };
        let mut at = match self.dir(first)? {
            Some(d) => d,
            None => return Ok(None),
        };
        for part in parts {
            at = match at.dir(part)? {
                Some(d) => d,
                None => return Ok(None),
            };
        }
        Ok(Some(at))
    }

    /// Whether the overlay marked this directory of an upper layer opaque: it
    /// hides what the lower layer holds below it. With the mount option
    /// `userxattr` the mark is `user.overlay.opaque`, which the directory's
    /// owner can read (docs/adr/0003); "y" is the only value meaning opaque.
    pub fn is_opaque(&self) -> io::Result<bool> {
        use xattr::FileExt;
        let file = File::from(self.fd.try_clone()?);
        Ok(file.get_xattr("user.overlay.opaque")?.is_some_and(|v| v == b"y"))
    }

    /// The entries (not `.` and `..`), each with its kind as `lstat` saw it.
    pub fn entries(&self) -> io::Result<Vec<(OsString, Kind)>> {
        let fd = nix::unistd::dup(&self.fd)?;
        let mut dir = nix::dir::Dir::from_fd(fd)?;
        let mut out = Vec::new();
        for entry in dir.iter() {
            let entry = entry?;
            let name = OsStr::from_bytes(entry.file_name().to_bytes());
            if name == "." || name == ".." {
                continue;
            }
            // The type readdir gives where the file system says it (no stat
            // per entry), else lstat's. Either is only a hint: what is done
            // with the entry later (O_NOFOLLOW, O_DIRECTORY, fstat) checks again.
            use nix::dir::Type;
            let kind = match entry.file_type() {
                Some(Type::Directory) => Some(Kind::Dir),
                Some(Type::File) => Some(Kind::File),
                Some(Type::Symlink) => Some(Kind::Symlink),
                Some(_) => Some(Kind::Other),
                None => self.kind(name)?,
            };
            match kind {
                Some(kind) => out.push((name.to_os_string(), kind)),
                None => continue, // removed while listing
            }
        }
        out.sort();
        Ok(out)
    }

    /// The directory's own stat data (of the descriptor held, not the path).
    pub fn stat(&self) -> io::Result<FileStat> {
        Ok(fstat(&self.fd)?)
    }

    /// What `name` is, without following it; `None` when absent.
    pub fn kind(&self, name: impl AsRef<OsStr>) -> io::Result<Option<Kind>> {
        self.lstat(name).map(|st| st.as_ref().map(kind_of))
    }

    pub fn lstat(&self, name: impl AsRef<OsStr>) -> io::Result<Option<FileStat>> {
        match fstatat(&self.fd, name.as_ref(), nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => Ok(Some(st)),
            Err(e) => {
                let e = io::Error::from(e);
                if is_absent(&e) {
                    Ok(None)
                } else {
                    Err(e)
                }
            }
        }
    }

    /// Opens the regular file `name` for reading; `None` when absent or not a
    /// regular file (never blocks on a FIFO, never follows a symlink).
    pub fn open_file(&self, name: impl AsRef<OsStr>) -> io::Result<Option<(File, FileStat)>> {
        let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC | OFlag::O_NOCTTY;
        let fd = match openat(&self.fd, name.as_ref(), flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(e) => {
                let e = io::Error::from(e);
                return if is_absent(&e) { Ok(None) } else { Err(e) };
            }
        };
        let file = File::from(fd);
        let st = fstat(&file)?;
        if kind_of(&st) != Kind::File {
            return Ok(None);
        }
        Ok(Some((file, st)))
    }

    /// Opens the file `name` for writing, made (mode 0600) if absent, never
    /// following a symlink, its content kept until written over.
    pub fn open_write(&self, name: impl AsRef<OsStr>) -> io::Result<File> {
        let flags = OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_NOCTTY;
        Ok(File::from(openat(&self.fd, name.as_ref(), flags, Mode::from_bits_truncate(0o600))?))
    }

    /// An exclusive `flock` of this directory, held until the guard is dropped;
    /// `None` when another holds it and `wait` is false. `remove_created_dir`
    /// takes it before deleting anything, so whoever holds it can write into
    /// the directory without racing a removal (`list`'s memos).
    pub fn lock(&self, wait: bool) -> io::Result<Option<Flock<OwnedFd>>> {
        let arg = if wait { FlockArg::LockExclusive } else { FlockArg::LockExclusiveNonblock };
        match Flock::lock(self.fd.try_clone()?, arg) {
            Ok(held) => Ok(Some(held)),
            Err((_, nix::errno::Errno::EWOULDBLOCK)) if !wait => Ok(None),
            Err((_, e)) => Err(e.into()),
        }
    }

    /// The whole regular file `name`, refused if it is larger than `limit` bytes;
    /// `None` when absent or not a regular file.
    pub fn read(&self, name: impl AsRef<OsStr>, limit: u64) -> io::Result<Option<Vec<u8>>> {
        let name = name.as_ref();
        let Some((file, _)) = self.open_file(name)? else { return Ok(None) };
        let mut bytes = Vec::new();
        file.take(limit + 1).read_to_end(&mut bytes)?;
        if bytes.len() as u64 > limit {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{} is larger than {limit} bytes", self.path.join(name).display()),
            ));
        }
        Ok(Some(bytes))
    }

    /// The target of the symlink `name`, as bytes (never followed).
    pub fn read_link(&self, name: impl AsRef<OsStr>) -> io::Result<OsString> {
        Ok(readlinkat(&self.fd, name.as_ref())?)
    }

    /// Puts the regular file `name` into `into` as `new_name`: a hard link when the
    /// filesystem allows one, else a copy. Either way `into` then holds a regular
    /// file that the agent can no longer swap for something else; its content may
    /// still change (a hard link shares it), so readers verify what they read.
    /// Returns false when `name` is absent or not a regular file.
    pub fn place_into(&self, name: &OsStr, into: &Dir, new_name: &OsStr) -> io::Result<bool> {
        let linked = linkat(&self.fd, name, &into.fd, new_name, nix::fcntl::AtFlags::empty());
        if linked.is_ok() {
            // linkat never follows a symlink, so the link may be one: check ours.
            if into.kind(new_name)? == Some(Kind::File) {
                return Ok(true);
            }
            nix::unistd::unlinkat(&into.fd, new_name, nix::unistd::UnlinkatFlags::NoRemoveDir)?;
            return Ok(false);
        }
        self.copy_into(name, into, new_name)
    }

    /// Copies the regular file `name` into `into` as `new_name`: a file of
    /// forage's own that the agent cannot change afterwards. Returns false when
    /// `name` is absent or not a regular file.
    pub fn copy_into(&self, name: &OsStr, into: &Dir, new_name: &OsStr) -> io::Result<bool> {
        let Some((mut src, _)) = self.open_file(name)? else { return Ok(false) };
        let flags = OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let fd = openat(&into.fd, new_name, flags, Mode::from_bits_truncate(0o600))?;
        let mut dst = File::from(fd);
        io::copy(&mut src, &mut dst)?;
        Ok(true)
    }

    /// Opens the regular file `name` for a bounded read: refused (an error
    /// naming it) when it is larger than `limit` bytes, or sparse (see
    /// `check_size`); `None` when absent or not a regular file.
    pub fn open_bounded(&self, name: impl AsRef<OsStr>, limit: u64) -> io::Result<Option<(File, u64)>> {
        let name = name.as_ref();
        let Some((file, st)) = self.open_file(name)? else { return Ok(None) };
        let size = check_size(&st, limit).map_err(|why| {
            io::Error::new(io::ErrorKind::InvalidData, format!("{} {why}", self.path.join(name).display()))
        })?;
        Ok(Some((file, size)))
    }

    /// Copies the regular file `name` into `into` as `new_name`, as `copy_into`
    /// does, but only when `open_bounded` allows it, and never more bytes than
    /// it had then (the agent may still be writing it). Returns the bytes
    /// copied; `None` when `name` is absent or not a regular file.
    pub fn copy_bounded_into(&self, name: &OsStr, into: &Dir, new_name: &OsStr, limit: u64) -> io::Result<Option<u64>> {
        let Some((src, size)) = self.open_bounded(name, limit)? else { return Ok(None) };
        let flags = OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let fd = openat(&into.fd, new_name, flags, Mode::from_bits_truncate(0o600))?;
        let mut dst = File::from(fd);
        Ok(Some(io::copy(&mut src.take(size), &mut dst)?))
    }

    /// Gives the user back read access (and for a directory, search and write)
    /// to `name`, which the agent, running as the user's uid, may have taken away.
    /// Never follows a symlink: `name` must be a plain file or directory.
    pub fn grant_owner_access(&self, name: impl AsRef<OsStr>) -> io::Result<()> {
        let name = name.as_ref();
        let Some(st) = self.lstat(name)? else { return Ok(()) };
        let add = match kind_of(&st) {
            Kind::Dir => 0o700,
            Kind::File => 0o600,
            _ => return Ok(()),
        };
        // The agent can change the mode of its own files only, which are
        // forage's uid's; one owned by another (a copy-on-write base's shared
        // index, say) keeps its mode.
        if st.st_mode & add == add || st.st_uid != nix::unistd::geteuid().as_raw() {
            return Ok(());
        }
        let mode = Mode::from_bits_truncate((st.st_mode & 0o7777) | add);
        nix::sys::stat::fchmodat(&self.fd, name, mode, nix::sys::stat::FchmodatFlags::FollowSymlink)?;
        Ok(())
    }

    /// Makes the directory `name` beneath this one (forage's own staging areas).
    pub fn make_dir(&self, name: impl AsRef<OsStr>) -> io::Result<Dir> {
        self.make_dir_with_mode(name, 0o700)
    }

    /// `make_dir` with permissions `mode` (less the umask).
    pub fn make_dir_with_mode(&self, name: impl AsRef<OsStr>, mode: u32) -> io::Result<Dir> {
        nix::sys::stat::mkdirat(&self.fd, name.as_ref(), Mode::from_bits_truncate(mode))?;
        self.dir(name.as_ref())?.ok_or_else(|| io::Error::other("a directory just made is gone"))
    }

    /// Removes `name`: a file, a symlink (itself, never what it points to) or
    /// an empty directory; false when it was not there.
    pub fn remove_entry(&self, name: impl AsRef<OsStr>) -> io::Result<bool> {
        use nix::unistd::{unlinkat, UnlinkatFlags};
        let name = name.as_ref();
        match unlinkat(&self.fd, name, UnlinkatFlags::NoRemoveDir) {
            Ok(()) => Ok(true),
            Err(nix::errno::Errno::ENOENT) => Ok(false),
            Err(nix::errno::Errno::EISDIR | nix::errno::Errno::EPERM) => {
                unlinkat(&self.fd, name, UnlinkatFlags::RemoveDir)?;
                Ok(true)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Creates the regular file `name` (which must not exist yet) with
    /// permissions `mode` (less the umask), for writing.
    pub fn create_file(&self, name: impl AsRef<OsStr>, mode: u32) -> io::Result<File> {
        let flags = OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        Ok(File::from(openat(&self.fd, name.as_ref(), flags, Mode::from_bits_truncate(mode))?))
    }

    /// Creates the symlink `name` (which must not exist yet) pointing to `target`.
    pub fn create_symlink(&self, target: &OsStr, name: impl AsRef<OsStr>) -> io::Result<()> {
        Ok(nix::unistd::symlinkat(target, &self.fd, name.as_ref())?)
    }
}

/// How much larger than its allocated blocks a file may be and still not
/// count as sparse: small files can live in the inode (ext4's inline data),
/// and the last block is partly used.
const SPARSE_SLACK: u64 = 1 << 20;

/// A file's size, if it is at most `limit` bytes and not sparse: a sparse
/// file costs the agent no disk, yet gigabytes of reading or copying to
/// whoever reads it whole. `Err` says which it is.
pub fn check_size(st: &FileStat, limit: u64) -> std::result::Result<u64, String> {
    let size = u64::try_from(st.st_size).unwrap_or(0);
    let allocated = u64::try_from(st.st_blocks).unwrap_or(0).saturating_mul(512);
    if size > allocated.saturating_add(SPARSE_SLACK) {
        return Err(format!("is sparse ({size} bytes, {allocated} of them on disk), which git never writes"));
    }
    if size > limit {
        return Err(format!("is {size} bytes, more than the {limit} forage reads"));
    }
    Ok(size)
}

/// How many directories of a `Descent`'s chain stay open: the deepest ones.
const OPEN_IN_CHAIN: usize = 16;

/// One directory of a `Descent`'s chain: its name in its parent, its device
/// and inode (to know it again), its descriptor while it is near the bottom,
/// and what the walk keeps for it.
struct Link<T> {
    name: OsString,
    id: (u64, u64),
    dir: Option<Dir>,
    data: T,
}

fn id_of(st: &FileStat) -> (u64, u64) {
    (st.st_dev, st.st_ino)
}

/// A depth-first walk down from a directory, one level at a time, with no
/// recursion, holding open only the `OPEN_IN_CHAIN` deepest directories of the
/// chain from the top to where it is (an agent's tree may be deeper than the
/// open-file limit). Going back up to a directory closed on the way down opens
/// it again as the `..` of its child, and goes on only if that is the same
/// directory (device and inode) as the one left; else it is looked for again
/// by name from the top, checked at every step the same way.
///
/// Each directory carries a `T` of the walk's own (what is left to visit in
/// it, say). The directories of a descent carry no path (`Dir::path` is empty):
/// a path as deep as the agent's tree would cost as much again to build.
pub struct Descent<T> {
    top: PathBuf,
    chain: Vec<Link<T>>,
}

impl<T> Descent<T> {
    /// A walk starting at `top` (reached by `top.path()`, if it must be found again).
    pub fn new(top: Dir, data: T) -> io::Result<Descent<T>> {
        let id = id_of(&top.stat()?);
        let path = top.path.clone();
        Ok(Descent { top: path, chain: vec![Link { name: OsString::new(), id, dir: Some(top), data }] })
    }

    /// How far below the top the walk is (the top is 0).
    pub fn depth(&self) -> usize {
        self.chain.len() - 1
    }

    fn bottom(&self) -> &Link<T> {
        self.chain.last().expect("a descent always holds its top")
    }

    /// The directory the walk is in.
    pub fn dir(&self) -> &Dir {
        self.bottom().dir.as_ref().expect("the bottom of a descent is always open")
    }

    /// The walk's data for the directory it is in.
    pub fn data(&self) -> &T {
        &self.bottom().data
    }

    pub fn data_mut(&mut self) -> &mut T {
        &mut self.chain.last_mut().expect("a descent always holds its top").data
    }

    /// The walk's data for every directory from the top down to where it is.
    pub fn chain(&self) -> impl Iterator<Item = &T> {
        self.chain.iter().map(|l| &l.data)
    }

    /// Goes down into the subdirectory `name` of where the walk is; false (and
    /// stays) when `name` is absent or anything but a directory.
    pub fn descend(&mut self, name: &OsStr, data: T) -> io::Result<bool> {
        let Some(fd) = self.dir().open_sub(name)? else { return Ok(false) };
        let dir = Dir { fd, path: PathBuf::new() };
        let id = id_of(&dir.stat()?);
        self.chain.push(Link { name: name.to_os_string(), id, dir: Some(dir), data });
        if let Some(far) = self.chain.len().checked_sub(OPEN_IN_CHAIN + 1) {
            self.chain[far].dir = None;
        }
        Ok(true)
    }

    /// Goes back up to the parent of where the walk is, returning the name and
    /// data of the directory left. Never above the top.
    pub fn ascend(&mut self) -> io::Result<(OsString, T)> {
        assert!(self.depth() > 0, "a descent never goes above its top");
        let left = self.chain.pop().expect("checked above");
        let at = self.chain.len() - 1;
        if self.chain[at].dir.is_none() {
            let parent = left.dir.as_ref().and_then(|d| d.open_sub(OsStr::new("..")).ok().flatten());
            let parent = parent.map(|fd| Dir { fd, path: PathBuf::new() });
            let same = match &parent {
                Some(p) => id_of(&p.stat()?) == self.chain[at].id,
                None => false,
            };
            self.chain[at].dir = if same { parent } else { Some(self.find_again(at)?) };
        }
        Ok((left.name, left.data))
    }

    /// Opens the directory at `at` of the chain again by name, from the
    /// nearest directory above it still open (or the top), checking each one
    /// on the way to be the directory the walk went through.
    fn find_again(&self, at: usize) -> io::Result<Dir> {
        let changed = || io::Error::other(format!("{} changed while forage walked it", self.top.display()));
        let from = (0..at).rev().find(|i| self.chain[*i].dir.is_some());
        let mut dir = match from {
            Some(i) => {
                Dir { fd: nix::unistd::dup(&self.chain[i].dir.as_ref().expect("open").fd)?, path: PathBuf::new() }
            }
            None => Dir::open(&self.top)?,
        };
        if id_of(&dir.stat()?) != self.chain[from.unwrap_or(0)].id {
            return Err(changed());
        }
        for link in &self.chain[from.map_or(1, |i| i + 1)..=at] {
            let fd = dir.open_sub(&link.name)?.ok_or_else(changed)?;
            dir = Dir { fd, path: PathBuf::new() };
            if id_of(&dir.stat()?) != link.id {
                return Err(changed());
            }
        }
        Ok(dir)
    }
}

/// Walks every directory under `top`, depth first (see `Descent`): `visit`
/// is given each directory once, as the walk enters it, and returns the
/// subdirectories to walk into; `enter(dir, name)` runs before the walk goes
/// into `name` of `dir`; `leave(dir, name)` after it came back from it.
fn each_dir(
    top: Dir,
    mut visit: impl FnMut(&Dir) -> io::Result<Vec<OsString>>,
    mut enter: impl FnMut(&Dir, &OsStr) -> io::Result<()>,
    mut leave: impl FnMut(&Dir, &OsStr) -> io::Result<()>,
) -> io::Result<()> {
    let mut walk = Descent::new(top, Vec::new())?;
    *walk.data_mut() = visit(walk.dir())?;
    loop {
        match walk.data_mut().pop() {
            Some(sub) => {
                enter(walk.dir(), &sub)?;
                if walk.descend(&sub, Vec::new())? {
                    *walk.data_mut() = visit(walk.dir())?;
                }
            }
            None if walk.depth() == 0 => return Ok(()),
            None => {
                let (name, _) = walk.ascend()?;
                leave(walk.dir(), &name)?;
            }
        }
    }
}

/// Deletes the directory `path` that forage made, with everything the agent put
/// in it, but only if `path` is canonical (no symlink anywhere on it, no `..`), is
/// a directory itself, and lies strictly under `owner` (a directory of
/// FORAGE_HOME). Anything else is refused with an error naming the path. Gone
/// already is fine.
///
/// Everything is deleted relative to descriptors held (never by path), never
/// following a symlink, giving back first the permissions the agent (the
/// user's uid) took; as deep and as wide as the agent made the tree, with a
/// bounded number of descriptors (`Descent`).
pub fn remove_created_dir(path: &Path, owner: &Path) -> io::Result<()> {
    remove_dir_checked(path, owner, false)
}

/// `remove_created_dir`, holding the directory's lock (`Dir::lock`), waited
/// for, while it deletes: for a directory forage writes into holding that lock
/// rather than the sandbox's (a private directory: `list`'s memo). Never for a
/// directory a container can reach, whose agent could hold the lock forever.
pub fn remove_locked_dir(path: &Path, owner: &Path) -> io::Result<()> {
    remove_dir_checked(path, owner, true)
}

fn remove_dir_checked(path: &Path, owner: &Path, locked: bool) -> io::Result<()> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    let refuse = |why: &str| {
        Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("refusing to delete {}: {why}; forage deletes only directories it made", path.display()),
        ))
    };
    if !meta.is_dir() {
        return refuse("it is not a directory (a symlink?)");
    }
    let canonical = path.canonicalize()?;
    if canonical != path {
        return refuse("its path goes through a symlink or `..`");
    }
    let owner = owner.canonicalize()?;
    if !canonical.starts_with(&owner) || canonical == owner {
        return refuse(&format!("it is not inside {}", owner.display()));
    }
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return refuse("it has no parent");
    };
    let parent = Dir::open(parent)?;
    // Swapped for something else since it was checked: that is not ours.
    if parent.kind(name)? != Some(Kind::Dir) {
        return refuse("it is not a directory (a symlink?)");
    }
    remove_tree(&parent, name, locked)
        .map_err(|e| io::Error::new(e.kind(), format!("deleting {}: {e}", path.display())))
}

/// Deletes the directory `name` of `parent` and everything in it.
/// With `locked`, holds the directory's lock (`Dir::lock`) until it is gone:
/// nothing written under that lock lands in it half way through.
fn remove_tree(parent: &Dir, name: &OsStr, locked: bool) -> io::Result<()> {
    parent.grant_owner_access(name)?;
    let Some(top) = parent.dir(name)? else { return Ok(()) };
    let _held = if locked { top.lock(true)? } else { None };
    each_dir(top, unlink_all_but_dirs, |dir, sub| dir.grant_owner_access(sub), remove_empty_dir)?;
    remove_empty_dir(parent, name)
}

/// Unlinks every entry of `dir` that is not a directory; returns the directories.
fn unlink_all_but_dirs(dir: &Dir) -> io::Result<Vec<OsString>> {
    use nix::unistd::{unlinkat, UnlinkatFlags};
    let mut subdirs = Vec::new();
    for (name, kind) in dir.entries()? {
        if kind == Kind::Dir {
            subdirs.push(name);
            continue;
        }
        match unlinkat(&dir.fd, name.as_os_str(), UnlinkatFlags::NoRemoveDir) {
            Ok(()) | Err(nix::errno::Errno::ENOENT) => {}
            // What readdir called a file was a directory after all.
            Err(nix::errno::Errno::EISDIR) => subdirs.push(name),
            Err(e) => return Err(e.into()),
        }
    }
    Ok(subdirs)
}

fn remove_empty_dir(dir: &Dir, name: &OsStr) -> io::Result<()> {
    use nix::unistd::{unlinkat, UnlinkatFlags};
    match unlinkat(&dir.fd, name, UnlinkatFlags::RemoveDir) {
        Ok(()) | Err(nix::errno::Errno::ENOENT) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Gives the user back what the agent (running as the user's uid) took from
/// them under `dir`: `u+rwx` on every directory, `u+rw` on every file, never
/// following a symlink; as deep and as wide as the agent made it (`Descent`).
pub(crate) fn restore_permissions(dir: &Dir) -> io::Result<()> {
    let top = Dir { fd: nix::unistd::dup(&dir.fd)?, path: dir.path.clone() };
    let grant_all = |dir: &Dir| -> io::Result<Vec<OsString>> {
        let mut subdirs = Vec::new();
        for (name, kind) in dir.entries().unwrap_or_default() {
            match kind {
                Kind::Dir => {
                    dir.grant_owner_access(&name)?;
                    subdirs.push(name);
                }
                Kind::File => dir.grant_owner_access(&name)?,
                _ => {}
            }
        }
        Ok(subdirs)
    };
    each_dir(top, grant_all, |_, _| Ok(()), |_, _| Ok(()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{symlink, MetadataExt};

    #[test]
    fn symlinks_fifos_and_big_files_are_never_followed_or_read() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("root");
        let outside = t.path().join("outside");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("secret"), "secret").unwrap();
        std::fs::write(root.join("sub/file"), "ok").unwrap();
        std::fs::write(root.join("big"), vec![b'x'; 100]).unwrap();
        symlink(&outside, root.join("link-dir")).unwrap();
        symlink(outside.join("secret"), root.join("link-file")).unwrap();
        nix::unistd::mkfifo(&root.join("fifo"), Mode::from_bits_truncate(0o600)).unwrap();

        let dir = Dir::open(&root).unwrap();
        assert!(dir.dir("link-dir").unwrap().is_none());
        assert!(dir.dir_path("link-dir/").unwrap().is_none());
        assert_eq!(dir.read("link-file", 100).unwrap(), None);
        assert_eq!(dir.read("fifo", 100).unwrap(), None, "a FIFO is never read (and never blocks)");
        assert_eq!(dir.read_link("link-file").unwrap(), outside.join("secret").as_os_str());
        assert!(dir.read("big", 10).is_err());
        assert_eq!(dir.dir_path("sub").unwrap().unwrap().read("file", 10).unwrap().unwrap(), b"ok");
        let kinds: Vec<Kind> = dir.entries().unwrap().into_iter().map(|(_, k)| k).collect();
        assert_eq!(kinds, [Kind::File, Kind::Other, Kind::Symlink, Kind::Symlink, Kind::Dir]);

        let staging = dir.make_dir("staging").unwrap();
        assert!(!dir.place_into(OsStr::new("link-file"), &staging, OsStr::new("x")).unwrap());
        assert_eq!(staging.kind("x").unwrap(), None, "a linked symlink is removed again");
        assert!(dir.place_into(OsStr::new("big"), &staging, OsStr::new("y")).unwrap());
        assert_eq!(staging.kind("y").unwrap(), Some(Kind::File));
    }

    #[test]
    fn bounded_reads_and_copies_refuse_big_and_sparse_files_before_reading() {
        let t = tempfile::tempdir().unwrap();
        std::fs::write(t.path().join("small"), b"0123456789").unwrap();
        std::fs::File::create(t.path().join("sparse")).unwrap().set_len(1 << 30).unwrap();
        let dir = Dir::open(t.path()).unwrap();
        let into = dir.make_dir("into").unwrap();
        assert_eq!(dir.copy_bounded_into(OsStr::new("small"), &into, OsStr::new("s"), 10).unwrap(), Some(10));
        assert_eq!(std::fs::read(t.path().join("into/s")).unwrap(), b"0123456789");
        let big = dir.copy_bounded_into(OsStr::new("small"), &into, OsStr::new("b"), 9).unwrap_err();
        assert!(big.to_string().contains("more than the 9"), "{big}");
        let sparse = dir.open_bounded("sparse", u64::MAX).unwrap_err();
        assert!(sparse.to_string().contains("sparse"), "{sparse}");
        assert!(dir.open_bounded("absent", 10).unwrap().is_none());
        assert_eq!(into.kind("b").unwrap(), None, "nothing is copied of a refused file");
    }

    #[test]
    fn only_canonical_directories_inside_the_owner_are_deleted() {
        let t = tempfile::tempdir().unwrap();
        let owner = t.path().join("owner");
        let victim = t.path().join("victim");
        std::fs::create_dir_all(owner.join("made/locked/deep")).unwrap();
        std::fs::create_dir_all(&victim).unwrap();
        std::fs::write(victim.join("keep"), "x").unwrap();
        symlink(&victim, owner.join("link")).unwrap();

        assert!(remove_created_dir(&owner.join("link"), &owner).is_err());
        assert!(remove_created_dir(&owner.join("made/../../victim"), &owner).is_err());
        assert!(remove_created_dir(&victim, &owner).is_err());
        assert!(remove_created_dir(&owner, &owner).is_err());
        assert!(victim.join("keep").exists());

        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(owner.join("made/locked"), std::fs::Permissions::from_mode(0o500)).unwrap();
        remove_created_dir(&owner.join("made"), &owner).unwrap();
        assert!(!owner.join("made").exists());
        remove_created_dir(&owner.join("made"), &owner).unwrap();
    }

    /// A chain of `depth` directories named `d` under `top`, made relative to
    /// descriptors (a path that deep is longer than the kernel takes).
    fn chain(top: &Path, depth: usize) {
        let mut at = Dir::open(top).unwrap();
        for _ in 0..depth {
            at = at.make_dir("d").unwrap();
        }
    }

    #[test]
    fn a_descent_holds_a_bounded_number_of_descriptors_however_deep() {
        let t = tempfile::tempdir().unwrap();
        chain(t.path(), 300);
        let mut walk = Descent::new(Dir::open(t.path()).unwrap(), 0usize).unwrap();
        while walk.descend(OsStr::new("d"), walk.depth() + 1).unwrap() {
            assert!(walk.chain.iter().filter(|l| l.dir.is_some()).count() <= OPEN_IN_CHAIN);
        }
        assert_eq!(walk.depth(), 300);
        while walk.depth() > 0 {
            let (name, data) = walk.ascend().unwrap();
            assert_eq!((name.to_str().unwrap(), data), ("d", walk.depth() + 1));
            assert_eq!(*walk.data(), walk.depth());
            assert!(walk.dir().kind("d").unwrap() == Some(Kind::Dir));
        }
        assert_eq!(walk.dir().stat().unwrap().st_ino, std::fs::metadata(t.path()).unwrap().ino());
    }

    #[test]
    fn going_up_to_a_directory_replaced_meanwhile_fails_rather_than_going_elsewhere() {
        let t = tempfile::tempdir().unwrap();
        chain(t.path(), OPEN_IN_CHAIN + 3);
        let mut walk = Descent::new(Dir::open(t.path()).unwrap(), ()).unwrap();
        while walk.descend(OsStr::new("d"), ()).unwrap() {}
        // The first directory of the chain (closed by now) is replaced by
        // another of the same name (made first, so that it cannot reuse the
        // inode); what was below it moves up.
        std::fs::create_dir(t.path().join("new")).unwrap();
        std::fs::rename(t.path().join("d/d"), t.path().join("x")).unwrap();
        std::fs::remove_dir(t.path().join("d")).unwrap();
        std::fs::rename(t.path().join("new"), t.path().join("d")).unwrap();
        let mut up = Ok(());
        while walk.depth() > 0 && up.is_ok() {
            up = walk.ascend().map(|_| ());
        }
        // `..` leads to the top, and the top's `d` is not the directory the walk came through.
        assert!(up.unwrap_err().to_string().contains("changed while forage walked it"));
    }

    /// Runs `f` on a thread with a small stack: a walk that recursed once per
    /// level would overflow it within a few thousand levels.
    fn on_a_small_stack(f: impl FnOnce() + Send + 'static) {
        std::thread::Builder::new().stack_size(256 << 10).spawn(f).unwrap().join().unwrap();
    }

    #[test]
    fn a_locked_directory_is_removed_only_once_its_lock_is_let_go() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("private");
        std::fs::create_dir(&dir).unwrap();
        let held = Dir::open(&dir).unwrap();
        let guard = held.lock(false).unwrap().expect("nobody holds it yet");
        assert!(Dir::open(&dir).unwrap().lock(false).unwrap().is_none(), "a second holder");
        let (path, owner) = (dir.clone(), t.path().to_path_buf());
        let removal = std::thread::spawn(move || remove_locked_dir(&path, &owner));
        std::thread::sleep(std::time::Duration::from_millis(200));
        // Written under the lock: the removal, waiting, takes it along.
        held.open_write("dirty-memo").unwrap();
        assert!(dir.join("dirty-memo").is_file(), "removed while its lock was held");
        drop(guard);
        removal.join().unwrap().unwrap();
        assert!(!dir.exists());
    }

    #[test]
    fn deep_wide_and_locked_trees_are_deleted_and_symlinks_never_followed() {
        use std::os::unix::fs::PermissionsExt;
        let t = tempfile::tempdir().unwrap();
        let owner = t.path().join("owner");
        let made = owner.join("made");
        std::fs::create_dir_all(made.join("wide")).unwrap();
        chain(&made, 5_000);
        for i in 0..2_000 {
            std::fs::create_dir(made.join("wide").join(i.to_string())).unwrap();
        }
        std::fs::write(made.join("wide/0/f"), "x").unwrap();
        std::fs::set_permissions(made.join("wide/0"), std::fs::Permissions::from_mode(0o000)).unwrap();
        std::fs::set_permissions(made.join("wide"), std::fs::Permissions::from_mode(0o500)).unwrap();
        // Outside, reached only through a symlink: never touched.
        std::fs::create_dir(t.path().join("victim")).unwrap();
        std::fs::write(t.path().join("victim/keep"), "x").unwrap();
        symlink(t.path().join("victim"), made.join("wide/1/link")).unwrap();

        let (gone, owned) = (made.clone(), owner.clone());
        on_a_small_stack(move || remove_created_dir(&gone, &owned).unwrap());
        assert!(!made.exists());
        assert!(t.path().join("victim/keep").exists());
    }

    #[test]
    fn permissions_are_given_back_as_deep_as_the_tree_goes() {
        use std::os::unix::fs::PermissionsExt;
        let t = tempfile::tempdir().unwrap();
        chain(t.path(), 5_000);
        let mut at = Dir::open(t.path()).unwrap();
        while let Some(next) = at.dir("d").unwrap() {
            at = next;
        }
        at.make_dir("locked").unwrap();
        nix::sys::stat::fchmodat(&at.fd, "locked", Mode::empty(), nix::sys::stat::FchmodatFlags::FollowSymlink)
            .unwrap();
        let top = t.path().to_path_buf();
        on_a_small_stack(move || restore_permissions(&Dir::open(&top).unwrap()).unwrap());
        let mode = at.lstat("locked").unwrap().unwrap().st_mode;
        assert_eq!(mode & 0o700, 0o700, "{:o}", std::fs::Permissions::from_mode(mode).mode());
    }
}
