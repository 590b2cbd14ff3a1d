//! The tar archives the Engine API moves state in: the one forage uploads into
//! a new container's home, and reading the ones it downloads back, as hostile
//! input. Only regular files and directories are taken; symlinks, hard links,
//! devices and FIFOs are skipped and named (a symlink is never followed: its
//! target is never read). Every name must stay under the state path asked for,
//! and every size and count is checked against the budget from the entry's
//! header, before its body is read.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::{Component, Path};

use super::{StatePath, MAX_BYTES, MAX_DEPTH, MAX_FILES};

/// How much more one write-back may take: shared by all the state paths of a
/// sandbox.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    pub bytes: u64,
    pub files: usize,
}

impl Default for Budget {
    fn default() -> Self {
        Budget { bytes: MAX_BYTES, files: MAX_FILES }
    }
}

/// The most of one download forage reads from the engine: the files' budget
/// plus room for the headers of that many entries (names up to a few KiB).
pub fn download_limit(budget: &Budget) -> u64 {
    budget.bytes + (budget.files as u64 + 16) * 8192
}

/// A state file as found in a container.
#[derive(Debug, Clone, PartialEq)]
pub struct SeenFile {
    pub bytes: Vec<u8>,
    /// Its modification time as the archive says (the agent's to set: it is
    /// clamped before use).
    pub mtime: u64,
}

/// What the container holds of one state path.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Seen {
    /// Each regular file, by its path relative to the agent's home. A file
    /// of the state path not here (nor in `skipped`) is absent.
    pub files: BTreeMap<String, SeenFile>,
    /// Paths that are there but not regular files (or under such a thing):
    /// neither taken nor taken as deleted.
    pub skipped: BTreeSet<String>,
    /// What was skipped, and why, for the user.
    pub warnings: Vec<String>,
}

impl Seen {
    fn skip(&mut self, rel: String, why: &str) {
        self.warnings.push(format!("~/{rel} {why}: skipped"));
        self.skipped.insert(rel);
    }

    /// Whether `file` lies under a path skipped as a whole (a directory
    /// replaced by a symlink).
    pub fn is_skipped(&self, file: &str) -> bool {
        self.skipped.iter().any(|s| file == s || file.strip_prefix(s.as_str()).is_some_and(|r| r.starts_with('/')))
    }
}

/// Reads the engine's archive of `state` (as downloaded from its path inside),
/// within `budget` (reduced by what was taken). `Err` says why nothing of the
/// path may be taken (a bound passed, a malformed archive); the budget is
/// then unchanged.
pub fn read(state: &StatePath, tar: &[u8], budget: &mut Budget) -> Result<Seen, String> {
    let mut left = *budget;
    let root_name = Path::new(state.rel()).file_name().and_then(|n| n.to_str()).unwrap_or_default().to_owned();
    let parent = Path::new(state.rel()).parent().and_then(|p| p.to_str()).unwrap_or_default().to_owned();
    let mut seen = Seen::default();
    let mut archive = tar::Archive::new(tar);
    let entries = archive.entries().map_err(|e| format!("its archive cannot be read ({e})"))?;
    for entry in entries {
        let mut entry = entry.map_err(|e| format!("its archive cannot be read ({e})"))?;
        let kind = entry.header().entry_type();
        if matches!(kind, tar::EntryType::XGlobalHeader) {
            continue;
        }
        let raw_name = entry.path_bytes().into_owned();
        let Some(rel) = name_under(&raw_name, &root_name, &parent) else {
            return Err(format!("its archive holds a name outside it ({:?})", String::from_utf8_lossy(&raw_name)));
        };
        if Path::new(&rel).components().count() > MAX_DEPTH {
            return Err(format!("it is deeper than {MAX_DEPTH} directories"));
        }
        // A path under one already skipped (a symlinked directory's entries
        // never come, but be sure) is skipped with it.
        if seen.is_skipped(&rel) {
            continue;
        }
        let is_root = rel == state.rel();
        match kind {
            tar::EntryType::Directory if state.is_dir() => {}
            tar::EntryType::Directory => {
                seen.skip(rel, "is a directory where the template names a file");
            }
            tar::EntryType::Regular if is_root && state.is_dir() => {
                seen.skip(rel, "is a file where the template names a directory");
            }
            tar::EntryType::Regular => {
                // Bounded from the header, before the body is read.
                let size = entry.header().size().map_err(|e| format!("its archive cannot be read ({e})"))?;
                if left.files == 0 {
                    return Err(over_files());
                }
                if size > left.bytes {
                    return Err(over_bytes());
                }
                let mtime = entry.header().mtime().unwrap_or(0);
                let mut bytes = Vec::with_capacity(size as usize);
                (&mut entry)
                    .take(size)
                    .read_to_end(&mut bytes)
                    .map_err(|e| format!("its archive cannot be read ({e})"))?;
                left.files -= 1;
                left.bytes -= bytes.len() as u64;
                seen.files.insert(rel, SeenFile { bytes, mtime });
            }
            tar::EntryType::Symlink => seen.skip(rel, "is a symbolic link (never followed)"),
            tar::EntryType::Link => seen.skip(rel, "is a hard link"),
            tar::EntryType::Fifo => seen.skip(rel, "is a FIFO"),
            tar::EntryType::Char | tar::EntryType::Block => seen.skip(rel, "is a device"),
            _ => seen.skip(rel, "is not a regular file"),
        }
    }
    *budget = left;
    Ok(seen)
}

/// Why a state path that passes the bytes bound is not taken.
pub fn over_bytes() -> String {
    format!("with it, the state passes the {} MiB forage takes back from one sandbox", MAX_BYTES >> 20)
}

/// Why a state path that passes the files bound is not taken.
pub fn over_files() -> String {
    format!("with it, the state passes the {MAX_FILES} files forage takes back from one sandbox")
}

/// The path (relative to the agent's home) of an archive entry named `raw`,
/// which must be `root` or under it, in plain UTF-8 components.
fn name_under(raw: &[u8], root: &str, parent: &str) -> Option<String> {
    let name = std::str::from_utf8(raw).ok()?;
    let name = name.trim_end_matches('/');
    let path = Path::new(name);
    let mut parts = Vec::new();
    for c in path.components() {
        match c {
            Component::Normal(p) => parts.push(p.to_str()?),
            Component::CurDir if parts.is_empty() => {}
            _ => return None,
        }
    }
    if parts.first() != Some(&root) {
        return None;
    }
    let rel = parts.join("/");
    let rel = if parent.is_empty() { rel } else { format!("{parent}/{rel}") };
    super::rel_ok(&rel).then_some(rel)
}

/// The archive that gives a sandbox its state: each of `files` (path relative
/// to the agent's home, content, time), with every directory above it, owned
/// by the agent (`owner`), files 0600 and directories 0700, to be extracted
/// in its home.
pub fn upload(files: &BTreeMap<String, (Vec<u8>, u64)>, owner: (u32, u32)) -> std::io::Result<Vec<u8>> {
    let mut tar = tar::Builder::new(Vec::new());
    let mut dirs = BTreeSet::new();
    let header = |kind, mode, size, mtime| {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_mode(mode);
        h.set_size(size);
        h.set_uid(owner.0.into());
        h.set_gid(owner.1.into());
        h.set_mtime(mtime);
        h
    };
    for (rel, (bytes, mtime)) in files {
        let mut above = Path::new(rel).parent();
        let mut chain = Vec::new();
        while let Some(dir) = above.filter(|d| !d.as_os_str().is_empty()) {
            chain.push(dir.to_path_buf());
            above = dir.parent();
        }
        for dir in chain.into_iter().rev() {
            if dirs.insert(dir.clone()) {
                let mut h = header(tar::EntryType::Directory, 0o700, 0, *mtime);
                tar.append_data(&mut h, &dir, std::io::empty())?;
            }
        }
        let mut h = header(tar::EntryType::Regular, 0o600, bytes.len() as u64, *mtime);
        tar.append_data(&mut h, rel, bytes.as_slice())?;
    }
    tar.into_inner()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(tar: &mut tar::Builder<Vec<u8>>, kind: tar::EntryType, name: &str, body: &[u8], link: Option<&str>) {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_mode(0o600);
        h.set_size(body.len() as u64);
        h.set_mtime(7);
        match link {
            Some(target) => tar.append_link(&mut h, name, target).unwrap(),
            None => tar.append_data(&mut h, name, body).unwrap(),
        }
    }

    #[test]
    fn only_regular_files_under_the_path_are_taken() {
        let state = StatePath::parse(".config/opencode/").unwrap();
        let mut t = tar::Builder::new(Vec::new());
        entry(&mut t, tar::EntryType::Directory, "opencode", b"", None);
        entry(&mut t, tar::EntryType::Regular, "opencode/a.json", b"{}", None);
        entry(&mut t, tar::EntryType::Symlink, "opencode/link", b"", Some("/run/secrets/key"));
        entry(&mut t, tar::EntryType::Fifo, "opencode/fifo", b"", None);
        let tar = t.into_inner().unwrap();
        let mut budget = Budget::default();
        let seen = read(&state, &tar, &mut budget).unwrap();
        assert_eq!(seen.files.keys().collect::<Vec<_>>(), [".config/opencode/a.json"]);
        assert_eq!(seen.files[".config/opencode/a.json"].mtime, 7);
        assert!(seen.skipped.contains(".config/opencode/link") && seen.skipped.contains(".config/opencode/fifo"));
        assert_eq!(budget.files, MAX_FILES - 1);
    }

    #[test]
    fn names_outside_and_bounds_refuse_the_whole_path() {
        let state = StatePath::parse(".codex/").unwrap();
        let mut t = tar::Builder::new(Vec::new());
        entry(&mut t, tar::EntryType::Regular, "other/x", b"x", None);
        let tar = t.into_inner().unwrap();
        assert!(read(&state, &tar, &mut Budget::default()).is_err());

        // The tar crate refuses to write `..`: the header is written by hand.
        let mut t = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_old();
        let name = b"codex/../../etc/x";
        h.as_old_mut().name[..name.len()].copy_from_slice(name);
        h.set_size(1);
        h.set_mode(0o600);
        h.set_cksum();
        t.append(&h, &b"x"[..]).unwrap();
        let tar = t.into_inner().unwrap();
        assert!(read(&StatePath::parse("codex/").unwrap(), &tar, &mut Budget::default()).is_err());

        let mut t = tar::Builder::new(Vec::new());
        entry(&mut t, tar::EntryType::Regular, ".codex/a", b"12345", None);
        entry(&mut t, tar::EntryType::Regular, ".codex/b", b"12345", None);
        let tar = t.into_inner().unwrap();
        let mut small = Budget { bytes: 8, files: 10 };
        assert_eq!(read(&state, &tar, &mut small).unwrap_err(), over_bytes());
        assert_eq!(small.bytes, 8, "a refused path takes nothing of the budget");
        let mut few = Budget { bytes: 100, files: 1 };
        assert_eq!(read(&state, &tar, &mut few).unwrap_err(), over_files());
    }

    #[test]
    fn a_file_path_replaced_by_a_symlink_is_skipped_not_deleted() {
        let state = StatePath::parse(".claude/.credentials.json").unwrap();
        let mut t = tar::Builder::new(Vec::new());
        entry(&mut t, tar::EntryType::Symlink, ".credentials.json", b"", Some("/run/secrets/anthropic"));
        let seen = read(&state, &t.into_inner().unwrap(), &mut Budget::default()).unwrap();
        assert!(seen.files.is_empty() && seen.is_skipped(".claude/.credentials.json"));
    }

    #[test]
    fn the_upload_makes_each_directory_above_a_file() {
        let files = BTreeMap::from([(".local/share/x/auth.json".to_owned(), (b"k".to_vec(), 5))]);
        let tar = upload(&files, (1000, 1000)).unwrap();
        let mut a = tar::Archive::new(tar.as_slice());
        let names: Vec<(String, u32)> = a
            .entries()
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (e.path().unwrap().display().to_string(), e.header().mode().unwrap())
            })
            .collect();
        assert_eq!(
            names,
            [
                (".local".into(), 0o700),
                (".local/share".into(), 0o700),
                (".local/share/x".into(), 0o700),
                (".local/share/x/auth.json".into(), 0o600)
            ]
        );
    }
}
