//! Reading a project's files from the user's checkout without trusting them:
//! an agent may have written them (a direct-mode directory), or a cloned
//! repository may be hostile. Every name is opened beneath the checkout's
//! root one component at a time, never following a symlink; a file is read
//! only when it is a regular one, at most `MAX_FILE_BYTES`; a path given in
//! the files (a build context, a Dockerfile) must stay inside the checkout,
//! with no `..` beyond its root and no symlink on the way.

use std::path::{Component, Path, PathBuf};

use crate::error::{Error, Result};
use crate::workspace::untrusted::{Dir, Kind};

/// The most a project file (devcontainer.json, template.yaml) may hold.
pub const MAX_FILE_BYTES: u64 = 1 << 20;

/// The user's checkout, held open by descriptor.
pub struct Checkout {
    pub root: PathBuf,
    dir: Dir,
}

/// What is at a project file's place.
pub enum Found {
    Absent,
    /// A regular file's text.
    Text(String),
    /// Something forage does not read there (a symlink, a FIFO…), in words.
    Refused(String),
}

impl Checkout {
    pub fn open(root: &Path) -> Result<Checkout> {
        let dir = Dir::open(root)
            .map_err(|e| Error::workspace(format!("cannot read the project's files in {}: {e}", root.display())))?;
        Ok(Checkout { root: root.to_path_buf(), dir })
    }

    /// The file at `rel` (`.devcontainer/devcontainer.json`): its text, or
    /// why it is not read. A symlink anywhere on the way is not followed.
    pub fn read(&self, rel: &str) -> Result<Found> {
        let (parent, name) = rel.rsplit_once('/').unwrap_or(("", rel));
        let dir = match self.walk(parent)? {
            Walk::Dir(d) => d,
            Walk::Absent => return Ok(Found::Absent),
            Walk::Symlink(at) => return Ok(Found::Refused(format!("{at} is a symlink"))),
        };
        let kind = dir.kind(name).map_err(|e| self.unreadable(rel, e))?;
        match kind {
            None => return Ok(Found::Absent),
            Some(Kind::File) => {}
            Some(Kind::Symlink) => return Ok(Found::Refused(format!("{rel} is a symlink"))),
            Some(_) => return Ok(Found::Refused(format!("{rel} is not a regular file"))),
        }
        match dir.read(name, MAX_FILE_BYTES) {
            Ok(Some(bytes)) => String::from_utf8(bytes)
                .map(Found::Text)
                .map_err(|_| Error::usage(format!("{rel} in {} is not UTF-8 text", self.root.display()))),
            // Swapped for something else since it was looked at.
            Ok(None) => Ok(Found::Refused(format!("{rel} is not a regular file"))),
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => Err(Error::usage(format!(
                "{rel} in {} is larger than {} KiB, more than a project file holds; shorten it, or pass --no-project-toolchain",
                self.root.display(),
                MAX_FILE_BYTES >> 10
            ))),
            Err(e) => Err(self.unreadable(rel, e)),
        }
    }

    fn unreadable(&self, rel: &str, e: std::io::Error) -> Error {
        Error::workspace(format!("cannot read {rel} in {}: {e}", self.root.display()))
    }

    /// Follows `rel` (a `/`-separated path of directories) from the root,
    /// never through a symlink.
    fn walk(&self, rel: &str) -> Result<Walk> {
        let mut at = self.dir.try_clone().map_err(|e| self.unreadable(rel, e))?;
        let mut so_far = String::new();
        for part in rel.split('/').filter(|p| !p.is_empty()) {
            so_far = if so_far.is_empty() { part.to_owned() } else { format!("{so_far}/{part}") };
            match at.kind(part).map_err(|e| self.unreadable(rel, e))? {
                None => return Ok(Walk::Absent),
                Some(Kind::Symlink) => return Ok(Walk::Symlink(so_far)),
                Some(Kind::Dir) => {}
                Some(_) => return Ok(Walk::Absent),
            }
            at = match at.dir(part).map_err(|e| self.unreadable(rel, e))? {
                Some(d) => d,
                None => return Ok(Walk::Symlink(so_far)),
            };
        }
        Ok(Walk::Dir(at))
    }

    /// `path` (relative to `from`, both inside the checkout) as a path
    /// relative to the root, refused when it leads outside the checkout
    /// (`..` beyond the root, an absolute path, a symlink on the way) or is
    /// not there. `field` and `fix` make the error: the bad value and the way out.
    pub fn inside(&self, from: &str, path: &str, field: &str, fix: &str, want_file: bool) -> Result<String> {
        let refuse = |why: String| {
            Error::usage(format!(
                "{field} {path:?} {why}: a repository's files may only build from inside the repository {}; {fix}",
                self.root.display()
            ))
        };
        let joined = Path::new(from).join(path);
        let mut parts: Vec<String> = Vec::new();
        for c in joined.components() {
            match c {
                Component::Normal(p) => parts.push(p.to_string_lossy().into_owned()),
                Component::CurDir => {}
                Component::ParentDir => {
                    if parts.pop().is_none() {
                        return Err(refuse("leads outside it".into()));
                    }
                }
                Component::RootDir | Component::Prefix(_) => return Err(refuse("is an absolute path".into())),
            }
        }
        let rel = parts.join("/");
        let (dirs, file) = match (want_file, parts.split_last()) {
            (true, Some((file, dirs))) => (dirs.join("/"), Some(file.clone())),
            (true, None) => return Err(refuse("is no file".into())),
            (false, _) => (rel.clone(), None),
        };
        let dir = match self.walk(&dirs)? {
            Walk::Dir(d) => d,
            Walk::Absent => return Err(refuse("is not there".into())),
            Walk::Symlink(at) => return Err(refuse(format!("goes through the symlink {at}"))),
        };
        if let Some(file) = file {
            match dir.kind(&file).map_err(|e| self.unreadable(&rel, e))? {
                Some(Kind::File) => {}
                Some(Kind::Symlink) => return Err(refuse("is a symlink".into())),
                None => return Err(refuse("is not there".into())),
                Some(_) => return Err(refuse("is not a regular file".into())),
            }
        }
        Ok(rel)
    }
}

enum Walk {
    Dir(Dir),
    Absent,
    /// The path (from the root) of the symlink met on the way.
    Symlink(String),
}
