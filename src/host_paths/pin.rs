//! Pinned host paths: a bind mount's source is resolved by the engine again at
//! every start of the container, so a path checked once at `up` would be trusted
//! forever. A `Pin` remembers the object the path was when forage checked it
//! (device and inode), and `Pin::verify` proves, before every start, that the
//! path still reaches that same object with no symlink on the way.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use nix::fcntl::{openat, OFlag};
use nix::sys::stat::{fstat, Mode, SFlag};
use serde::{Deserialize, Serialize};

/// A host path handed to the engine, as the object it was when checked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pin {
    pub path: PathBuf,
    pub dev: u64,
    pub ino: u64,
    /// Mounted writable: the sandbox's agent can change what lies beneath it.
    pub writable: bool,
}

/// Why a path is no longer what was pinned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Moved {
    /// A component of the path is now a symlink (the engine would follow it).
    Symlink(PathBuf),
    /// The path reaches another object than the one pinned.
    Replaced,
    /// The path cannot be reached (gone, or no permission): why.
    Unreachable(String),
}

impl std::fmt::Display for Moved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Moved::Symlink(at) => write!(f, "{} is now a symlink", at.display()),
            Moved::Replaced => f.write_str("it was replaced by another file or directory"),
            Moved::Unreachable(why) => write!(f, "it cannot be reached ({why})"),
        }
    }
}

impl Pin {
    /// Pins `path` (absolute) as it is now; refused when any component of it is
    /// a symlink.
    pub fn take(path: &Path, writable: bool) -> Result<Pin, Moved> {
        let fd = open_without_symlinks(path)?;
        let st = fstat(fd.as_fd()).map_err(|e| Moved::Unreachable(e.to_string()))?;
        Ok(Pin { path: path.to_path_buf(), dev: st.st_dev, ino: st.st_ino, writable })
    }

    /// Proves that the path still reaches the pinned object, through no symlink.
    pub fn verify(&self) -> Result<(), Moved> {
        let now = Pin::take(&self.path, self.writable)?;
        if (now.dev, now.ino) != (self.dev, self.ino) {
            return Err(Moved::Replaced);
        }
        Ok(())
    }

    /// True when this pin's path is `other`, holds it, or lies inside it.
    pub fn overlaps(&self, other: &Path) -> bool {
        self.path.starts_with(other) || other.starts_with(&self.path)
    }
}

/// Opens `path` one component at a time from `/`, never following a symlink
/// (`O_PATH | O_NOFOLLOW` at each step, checked with `fstat`), so that what is
/// opened is what the path names with no link on the way.
fn open_without_symlinks(path: &Path) -> Result<OwnedFd, Moved> {
    let unreachable = |e: nix::Error| Moved::Unreachable(io::Error::from(e).to_string());
    if !path.is_absolute() {
        return Err(Moved::Unreachable(format!("{} is not absolute", path.display())));
    }
    let flags = OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let mut at = openat(nix::fcntl::AT_FDCWD, "/", flags | OFlag::O_DIRECTORY, Mode::empty()).map_err(unreachable)?;
    let mut walked = PathBuf::from("/");
    for component in path.components() {
        let name = match component {
            Component::RootDir => continue,
            Component::Normal(name) => name,
            // A pinned path is canonical: `.` and `..` never appear in one.
            _ => return Err(Moved::Unreachable(format!("{} is not canonical", path.display()))),
        };
        walked.push(name);
        let next = openat(at.as_fd(), name, flags, Mode::empty()).map_err(unreachable)?;
        let st = fstat(next.as_fd()).map_err(unreachable)?;
        if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFLNK {
            return Err(Moved::Symlink(walked));
        }
        at = next;
    }
    Ok(at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn a_pin_breaks_when_its_path_is_swapped_or_goes_through_a_symlink() {
        let t = tempfile::tempdir().unwrap();
        let t = t.path().canonicalize().unwrap();
        let ws = t.join("parent/ws");
        std::fs::create_dir_all(&ws).unwrap();
        let pin = Pin::take(&ws, true).unwrap();
        assert_eq!(pin.verify(), Ok(()));

        // The workspace swapped for a symlink to somewhere else.
        std::fs::rename(&ws, t.join("parent/ws-real")).unwrap();
        std::fs::create_dir(t.join("elsewhere")).unwrap();
        symlink(t.join("elsewhere"), &ws).unwrap();
        assert_eq!(pin.verify(), Err(Moved::Symlink(ws.clone())));
        assert!(Pin::take(&ws, true).is_err(), "never pinned through a symlink");

        // A parent swapped for a symlink to a copy.
        std::fs::remove_file(&ws).unwrap();
        std::fs::rename(t.join("parent/ws-real"), &ws).unwrap();
        std::fs::rename(t.join("parent"), t.join("parent-real")).unwrap();
        symlink(t.join("parent-real"), t.join("parent")).unwrap();
        assert_eq!(pin.verify(), Err(Moved::Symlink(t.join("parent"))));

        // Replaced by another directory of the same name.
        std::fs::remove_file(t.join("parent")).unwrap();
        std::fs::rename(t.join("parent-real"), t.join("parent")).unwrap();
        assert_eq!(pin.verify(), Ok(()));
        std::fs::rename(&ws, t.join("parent/old")).unwrap();
        std::fs::create_dir(&ws).unwrap();
        assert_eq!(pin.verify(), Err(Moved::Replaced));

        std::fs::remove_dir(&ws).unwrap();
        assert!(matches!(pin.verify(), Err(Moved::Unreachable(_))));
        assert!(pin.overlaps(&t) && pin.overlaps(&ws.join("x")) && !pin.overlaps(&t.join("parentx")));
    }
}
