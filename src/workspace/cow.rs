//! `up --cow`: a git-worktree sandbox whose /workspace is an overlay the engine
//! mounts (docs/adr/0003-copy-on-write-workspaces.md). Its lower layer is one
//! checkout of the start tree shared by every sandbox on that tree, its upper
//! layer the sandbox's own directory, which holds only what the agent changed:
//!
//! ```text
//! FORAGE_HOME/bases/<tree-id>/tree     the checkout (lower layer), never mounted writable
//!                            /index    its index, whose stat data the overlay shows unchanged;
//!                                      each sandbox's private repository starts with a hard
//!                                      link to it, read-only and owned by no agent
//!                            /users/N  one file per sandbox on it; `gc` removes a base with none
//! FORAGE_HOME/workspaces/<name>/upper  the agent's changes (upper layer): hostile
//!                              /work   the overlay's scratch directory
//! ```
//!
//! A base is made into a temporary directory and renamed into place, under the
//! lock of the `bases` directory, so it is either whole or absent; a `.tmp-*`
//! directory is what a killed `up` left, which `gc` removes.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use git2::build::CheckoutBuilder;
use git2::{Oid, Repository};
use serde::{Deserialize, Serialize};

use super::untrusted::{remove_created_dir, Dir};
use crate::error::{Error, Result};
use crate::runtime::Overlay;

/// Who owns a base's index (`nobody`): never the agent, who runs as forage's
/// own uid (root, for an overlay) without capabilities, so no sandbox can
/// write the file, or chmod it, in place. Git replaces an index by renaming a
/// new file over it, which leaves the shared one alone.
pub const SHARED_INDEX_OWNER: u32 = 65534;

/// The `.git` of every base checkout: what the private repository's gitlink
/// says too, so the read-only mount over it needs no mountpoint made in the
/// upper layer.
const GITLINK: &str = "gitdir: /forage/git\n";

fn err(e: impl std::fmt::Display) -> Error {
    Error::workspace(format!("the copy-on-write base checkout: {e}"))
}

/// A copy-on-write sandbox's layers, as its record remembers them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CowLayers {
    /// FORAGE_HOME/bases/<tree-id>: the shared base.
    pub base: PathBuf,
}

impl CowLayers {
    /// The base's checkout: the overlay's lower layer.
    pub fn lower(&self) -> PathBuf {
        self.base.join("tree")
    }

    /// The base checkout's index, valid in every sandbox on it.
    pub fn index(&self) -> PathBuf {
        self.base.join("index")
    }

    /// The tree the base holds, from its directory's name.
    pub fn tree(&self) -> Result<Oid> {
        let name = self.base.file_name().map(OsStr::as_bytes).unwrap_or_default();
        Oid::from_str(&String::from_utf8_lossy(name)).map_err(err)
    }

    fn user_file(&self, name: &str) -> PathBuf {
        self.base.join("users").join(name)
    }
}

/// The sandbox's own layer under its workspace directory `dir`.
pub fn upper(dir: &Path) -> PathBuf {
    dir.join("upper")
}

fn work(dir: &Path) -> PathBuf {
    dir.join("work")
}

/// The overlay the engine mounts for the sandbox whose workspace directory is
/// `dir`; `None` when a path holds a character the mount options cannot carry
/// (`,` separates options, `:` lower layers).
pub fn overlay(layers: &CowLayers, dir: &Path) -> Option<Overlay> {
    let paths = [layers.lower(), upper(dir), work(dir)];
    let plain = |p: &Path| !p.as_os_str().as_bytes().iter().any(|b| matches!(b, b',' | b':' | b'\\' | b'\n'));
    paths.iter().all(|p| plain(p)).then(|| Overlay { lower: layers.lower(), work: work(dir) })
}

/// Why `up --cow` cannot use FORAGE_HOME at `home`, if it cannot.
pub fn unusable_home(home: &Path) -> Option<String> {
    let probe = CowLayers { base: home.join("bases").join("0".repeat(40)) };
    match overlay(&probe, &home.join("workspaces").join("probe")) {
        Some(_) => None,
        None => Some(format!(
            "FORAGE_HOME {} holds a `,` or `:`, which the overlay's mount options cannot carry",
            home.display()
        )),
    }
}

/// Why this machine's kernel cannot mount the overlay, if it cannot: the
/// overlay's `userxattr` option needs Linux 5.11 (ADR 0003, measurement 6).
/// The engine mounts it on this machine (its layers are paths of this one's
/// FORAGE_HOME), so this kernel is the engine's.
pub fn kernel_too_old() -> Option<String> {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").ok()?;
    // A release that does not read as one is left to the mount to judge.
    older_than_5_11(&release)?
        .then(|| format!("the kernel ({}) is older than 5.11, which the overlay needs", release.trim()))
}

/// `5.10.0-23-amd64` is older than 5.11; `None` for what is no release.
fn older_than_5_11(release: &str) -> Option<bool> {
    let mut parts = release.trim().split(['.', '-']).map(str::parse::<u32>);
    let (major, minor) = (parts.next()?.ok()?, parts.next()?.ok()?);
    Some((major, minor) < (5, 11))
}

/// Makes the base for `tree` under `bases` if there is none (`prepare`
/// finishing its index), and adds `user` (`forage-<name>`, the sandbox's
/// worktree id) as one of its users, all under the lock of `bases`.
pub fn take_base(
    repo: &Repository,
    bases: &Path,
    tree: Oid,
    user: &str,
    prepare: impl FnOnce(&mut git2::Index) -> Result<()>,
) -> Result<CowLayers> {
    std::fs::create_dir_all(bases).map_err(err)?;
    let dir = Dir::open(bases).map_err(err)?;
    let _held = dir.lock(true).map_err(err)?;
    let layers = CowLayers { base: bases.join(tree.to_string()) };
    if !layers.base.is_dir() {
        let temp = bases.join(format!(".tmp-{tree}-{}", std::process::id()));
        if let Err(e) = make_base(repo, &temp, tree, prepare) {
            let _ = remove_created_dir(&temp, bases);
            return Err(e);
        }
        std::fs::rename(&temp, &layers.base).map_err(err)?;
    }
    std::fs::write(layers.user_file(user), b"").map_err(err)?;
    Ok(layers)
}

/// Removes `name` from the base's users (the base itself is `gc`'s to remove).
pub fn leave_base(layers: &CowLayers, name: &str) -> Result<()> {
    let Some(bases) = layers.base.parent() else { return Ok(()) };
    let dir = Dir::open(bases).map_err(err)?;
    let _held = dir.lock(true).map_err(err)?;
    match std::fs::remove_file(layers.user_file(name)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(err(e)),
        _ => Ok(()),
    }
}

/// Checks `tree` out into the temporary directory `temp`, with its index.
fn make_base(
    repo: &Repository,
    temp: &Path,
    tree: Oid,
    prepare: impl FnOnce(&mut git2::Index) -> Result<()>,
) -> Result<()> {
    if let Some(bases) = temp.parent() {
        let _ = remove_created_dir(temp, bases);
    }
    let checkout = temp.join("tree");
    std::fs::create_dir_all(&checkout).map_err(err)?;
    std::fs::create_dir_all(temp.join("users")).map_err(err)?;
    let tree = repo.find_tree(tree).map_err(err)?;
    let mut index = git2::Index::open(&temp.join("index")).map_err(err)?;
    index.read_tree(&tree).map_err(err)?;
    let mut opts = CheckoutBuilder::new();
    // libgit2 would record the written files' stat data in the repository's
    // own index (the user's), not in `index`: the user's checkout would then
    // look changed to every status read, which hashes all its files.
    opts.target_dir(&checkout).force().recreate_missing(true).update_index(false);
    repo.checkout_index(Some(&mut index), Some(&mut opts)).map_err(err)?;
    record_stat_data(&mut index, &checkout)?;
    prepare(&mut index)?;
    index.write().map_err(err)?;
    share_read_only(&temp.join("index"))?;
    std::fs::write(checkout.join(".git"), GITLINK).map_err(err)
}

/// Makes the base's index a file every sandbox on the base may be given as a
/// hard link: read-only to all, owned by `SHARED_INDEX_OWNER`. A forage-ctl
/// that may not give it away (not root) leaves it its own, and each private
/// repository then gets a copy.
fn share_read_only(index: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(index, std::fs::Permissions::from_mode(0o444)).map_err(err)?;
    let owner = Some(nix::unistd::Uid::from_raw(SHARED_INDEX_OWNER));
    let group = Some(nix::unistd::Gid::from_raw(SHARED_INDEX_OWNER));
    let _ = nix::unistd::chown(index, owner, group);
    Ok(())
}

/// Puts each checked-out file's stat data in its index entry (libgit2's
/// checkout updates only the repository's own index, which `make_base` keeps
/// it from touching), then waits, at most a second,
/// until the clock has passed every file's mtime: git takes an entry as
/// racily clean, and hashes its file again, when the file's mtime is not
/// older than the index, in whole seconds. The files are forage's own, out
/// of any agent's reach.
fn record_stat_data(index: &mut git2::Index, checkout: &Path) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let entries: Vec<git2::IndexEntry> = index.iter().collect();
    let mut newest = 0;
    for mut entry in entries {
        let path = checkout.join(OsStr::from_bytes(&entry.path));
        let Ok(meta) = std::fs::symlink_metadata(&path) else { continue };
        // The index's fields are 32 bits wide, as git truncates them too.
        entry.ctime = git2::IndexTime::new(meta.ctime() as i32, meta.ctime_nsec() as u32);
        entry.mtime = git2::IndexTime::new(meta.mtime() as i32, meta.mtime_nsec() as u32);
        entry.dev = meta.dev() as u32;
        entry.ino = meta.ino() as u32;
        entry.uid = meta.uid();
        entry.gid = meta.gid();
        entry.file_size = meta.size() as u32;
        newest = newest.max(meta.mtime());
        index.add(&entry).map_err(err)?;
    }
    // Files get the kernel's coarse clock, a tick behind the one read here.
    let past = std::time::Duration::from_secs(newest.max(0) as u64 + 1) + std::time::Duration::from_millis(50);
    while std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default() < past {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    Ok(())
}

/// Makes the sandbox's upper and work directories under `dir` (its
/// workspace directory, which must not exist yet).
pub fn make_layers(dir: &Path) -> Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true).mode(0o755);
    builder.create(upper(dir)).map_err(err)?;
    builder.mode(0o700).create(work(dir)).map_err(err)
}

/// The bases under `bases` no sandbox uses (`live` says whether a user file's
/// sandbox still exists), and the temporary directories a killed `up` left.
pub fn unused_bases(bases: &Path, live: impl Fn(&str) -> bool) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(bases) else { return Vec::new() };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        if name.as_bytes().starts_with(b".tmp-") {
            out.push(path);
            continue;
        }
        let users = std::fs::read_dir(path.join("users")).map(|u| u.flatten().collect::<Vec<_>>()).unwrap_or_default();
        if !users.iter().any(|u| live(&u.file_name().to_string_lossy())) {
            out.push(path);
        }
    }
    out.sort();
    out
}

/// Removes an unused base (or a temporary one) under the lock of `bases`,
/// after looking again that no live sandbox took it meanwhile.
pub fn remove_base(bases: &Path, base: &Path, live: impl Fn(&str) -> bool) -> Result<()> {
    let dir = Dir::open(bases).map_err(err)?;
    let _held = dir.lock(true).map_err(err)?;
    if unused_bases(bases, live).iter().any(|b| b == base) {
        remove_created_dir(base, bases).map_err(err)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    use super::*;

    fn repo_with_files(dir: &Path) -> (Repository, Oid) {
        let repo = Repository::init(dir.join("repo")).unwrap();
        let mut index = repo.index().unwrap();
        for (path, content) in [("a.txt", "a\n"), ("d/b.txt", "b\n"), ("d/e/c.sh", "#!/bin/sh\n")] {
            let id = repo.blob(content.as_bytes()).unwrap();
            let mode = if path.ends_with(".sh") { 0o100755 } else { 0o100644 };
            let t = git2::IndexTime::new(0, 0);
            let entry = git2::IndexEntry {
                ctime: t,
                mtime: t,
                dev: 0,
                ino: 0,
                mode,
                uid: 0,
                gid: 0,
                file_size: 0,
                id,
                flags: path.len() as u16,
                flags_extended: 0,
                path: path.as_bytes().to_vec(),
            };
            index.add(&entry).unwrap();
        }
        let tree = index.write_tree().unwrap();
        (repo, tree)
    }

    #[test]
    fn a_base_is_the_whole_tree_with_an_index_whose_stat_data_matches_its_files() {
        let dir = tempfile::tempdir().unwrap();
        let (repo, tree) = repo_with_files(dir.path());
        let bases = dir.path().join("bases");
        let layers = take_base(&repo, &bases, tree, "forage-one", |_| Ok(())).unwrap();
        assert_eq!(layers.tree().unwrap(), tree);
        let checkout = layers.lower();
        assert_eq!(std::fs::read_to_string(checkout.join("d/b.txt")).unwrap(), "b\n");
        assert_eq!(std::fs::read_to_string(checkout.join(".git")).unwrap(), GITLINK);
        assert_eq!(std::fs::metadata(checkout.join("d/e/c.sh")).unwrap().mode() & 0o111, 0o111);
        let index = git2::Index::open(&layers.index()).unwrap();
        assert_eq!(index.len(), 3);
        let index_time = std::fs::metadata(layers.index()).unwrap().mtime();
        for entry in index.iter() {
            let meta =
                std::fs::symlink_metadata(checkout.join(String::from_utf8(entry.path.clone()).unwrap())).unwrap();
            assert_eq!(entry.file_size as u64, meta.size());
            assert_eq!(entry.ino as u64, meta.ino() & 0xffff_ffff);
            assert_eq!(i64::from(entry.mtime.seconds()), meta.mtime());
            assert!(
                meta.mtime() < index_time,
                "no entry is racily clean: git would hash it again ({} {index_time})",
                meta.mtime()
            );
        }

        // A second sandbox shares it; the base goes once neither uses it.
        let again = take_base(&repo, &bases, tree, "forage-two", |_| Ok(())).unwrap();
        assert_eq!(again, layers);
        let live = |u: &str| ["forage-one", "forage-two"].contains(&u);
        assert!(unused_bases(&bases, live).is_empty());
        leave_base(&layers, "forage-one").unwrap();
        leave_base(&layers, "forage-two").unwrap();
        assert_eq!(unused_bases(&bases, |_| true), vec![layers.base.clone()]);
        remove_base(&bases, &layers.base, |_| true).unwrap();
        assert!(!layers.base.exists());

        // What a killed `up` left half made is unused whoever it was for.
        let half = bases.join(format!(".tmp-{tree}-1"));
        std::fs::create_dir_all(half.join("users")).unwrap();
        std::fs::write(half.join("users/forage-one"), b"").unwrap();
        assert_eq!(unused_bases(&bases, |_| true), vec![half.clone()]);
        remove_base(&bases, &half, |_| true).unwrap();
        assert!(!half.exists());
    }

    /// Making a base writes its own index only: libgit2's checkout would
    /// otherwise put the base's stat data in the user's index, after which
    /// every status read of the user's checkout (`up`'s) hashes every file.
    #[test]
    fn making_a_base_leaves_the_user_s_index_as_it_was() {
        let dir = tempfile::tempdir().unwrap();
        let top = dir.path().join("user");
        let repo = Repository::init(&top).unwrap();
        std::fs::create_dir_all(top.join("d")).unwrap();
        let mut index = repo.index().unwrap();
        for (path, content) in [("a.txt", "a\n"), ("d/b.txt", "b\n")] {
            std::fs::write(top.join(path), content).unwrap();
            index.add_path(Path::new(path)).unwrap();
        }
        index.write().unwrap();
        let tree = index.write_tree().unwrap();
        let before = std::fs::read(top.join(".git/index")).unwrap();

        take_base(&repo, &dir.path().join("bases"), tree, "forage-one", |_| Ok(())).unwrap();
        assert_eq!(std::fs::read(top.join(".git/index")).unwrap(), before, "the user's index was rewritten");
    }

    #[test]
    fn kernels_older_than_5_11_are_told_apart() {
        assert_eq!(older_than_5_11("5.10.0-23-amd64\n"), Some(true));
        assert_eq!(older_than_5_11("4.19.0"), Some(true));
        assert_eq!(older_than_5_11("5.11.0"), Some(false));
        assert_eq!(older_than_5_11("6.18.0-rc1"), Some(false));
        assert_eq!(older_than_5_11("linux"), None);
    }

    #[test]
    fn paths_the_mount_options_cannot_carry_are_refused() {
        assert!(unusable_home(Path::new("/home/u/.local/share/forage")).is_none());
        assert!(unusable_home(Path::new("/home/u/a,b")).is_some());
        assert!(unusable_home(Path::new("/home/u/a:b")).is_some());
    }
}
