//! `merge`'s checkout in the user's checkout, all or nothing.
//!
//! libgit2 checks a checkout's conflicts before it writes, but refuses some
//! things only as it writes them: it reads `.gitmodules` to check out a
//! submodule after every other file was written, and a `.gitmodules` it cannot
//! parse (or naming a submodule it rejects) fails the checkout half way, with
//! files deleted, rewritten and added. So the change is first rehearsed: the
//! same checkout, by libgit2 with the repository's own configuration, of the
//! paths the change touches into an empty directory of forage's (out of any
//! agent's reach); what fails there is refused before a file of the user's is
//! touched. Should the real checkout fail anyway (a full disk, a read-only
//! directory), every path it touched is put back and the index restored byte
//! for byte, and the error says what, if anything, could not be.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use git2::build::CheckoutBuilder;
use git2::{ErrorClass, ErrorCode, ObjectType, Oid, Repository, Tree};

use super::ws_err;
use crate::error::{Error, Result};

/// libgit2 matches each path it meets against every path of a pathspec, so
/// work on many paths is done in chunks of this many: linear overall.
const PATHSPEC_CHUNK: usize = 1024;

const MODE_TREE: u32 = 0o040000;
const MODE_LINK: u32 = 0o120000;
const MODE_GITLINK: u32 = 0o160000;

fn path_of(bytes: &[u8]) -> &Path {
    Path::new(OsStr::from_bytes(bytes))
}

/// A directory as libgit2 names a working directory, without its final `/`.
fn shown_dir(dir: &Path) -> String {
    dir.display().to_string().trim_end_matches('/').to_owned()
}

fn shown(bytes: &[u8]) -> String {
    format!("{:?}", String::from_utf8_lossy(bytes))
}

/// A file (blob, symlink or submodule) the new tree has where the old one has
/// none.
struct Added {
    path: Vec<u8>,
    id: Oid,
    mode: u32,
    /// The old tree has a directory there (which the checkout replaces).
    replaces_dir: bool,
}

/// What checking out `new` over `old` touches.
pub(super) struct Change {
    /// The tree checked out now, which putting back restores.
    old_tree: Oid,
    /// Every path that differs between the two trees, either side, sorted.
    paths: Vec<Vec<u8>>,
    added: Vec<Added>,
}

impl Change {
    pub(super) fn between(repo: &Repository, old: &Tree<'_>, new: &Tree<'_>) -> Result<Change> {
        let diff = repo.diff_tree_to_tree(Some(old), Some(new), None).map_err(ws_err)?;
        let mut paths = BTreeSet::new();
        let mut added = Vec::new();
        for delta in diff.deltas() {
            paths.extend(delta.old_file().path_bytes().map(<[u8]>::to_vec));
            let new_file = delta.new_file();
            let Some(path) = new_file.path_bytes() else { continue };
            paths.insert(path.to_vec());
            let mode = u32::from(new_file.mode());
            if delta.status() == git2::Delta::Deleted || mode == MODE_TREE {
                continue;
            }
            let replaces_dir = match old.get_path(path_of(path)) {
                Ok(entry) if entry.kind() == Some(ObjectType::Tree) => true,
                Ok(_) => continue,
                Err(_) => false,
            };
            added.push(Added { path: path.to_vec(), id: new_file.id(), mode, replaces_dir });
        }
        Ok(Change { old_tree: old.id(), paths: paths.into_iter().collect(), added })
    }

    /// Every path the change touches.
    pub(super) fn paths(&self) -> impl Iterator<Item = &[u8]> {
        self.paths.iter().map(Vec::as_slice)
    }

    /// Refuses what stands in `workdir` where the change adds a file and the
    /// old tree has nothing: libgit2 would overwrite an ignored file and
    /// silently remove an empty directory there, and putting back could not
    /// tell it from what the checkout made.
    pub(super) fn refuse_in_the_way(&self, workdir: &Path, target: &str) -> Result<()> {
        let blocking: Vec<String> = self
            .added
            .iter()
            .filter(|a| !a.replaces_dir && std::fs::symlink_metadata(workdir.join(path_of(&a.path))).is_ok())
            .map(|a| shown(&a.path))
            .collect();
        if blocking.is_empty() {
            return Ok(());
        }
        let (verb, them) = if blocking.len() == 1 { ("is", "it") } else { ("are", "them") };
        Err(Error::conflict(format!(
            "landing on {target} would overwrite what stands in {} where the work adds files: {} {verb} in the way; nothing was changed",
            shown_dir(workdir),
            blocking.join(", ")
        ))
        .hint(format!("move {them} aside first (git does not track {them})")))
    }
}

/// `merge --abort`: puts the old tree's files back at every path `change`
/// touches, as `git merge --abort` does: each file the change added is
/// deleted whatever it holds now (the user may have begun resolving), with
/// each directory above it that is left empty, each other path is checked
/// out again from the old tree, and the index is pointed at the old tree.
pub(super) fn abort(checkout: &Repository, change: &Change) -> Result<()> {
    let workdir = checkout.workdir().ok_or_else(|| ws_err("the checkout has no working directory"))?.to_path_buf();
    let failed = |what: String| ws_err(format!("putting {} back failed: {what}", shown_dir(&workdir)));
    let mut dirs = BTreeSet::new();
    for a in change.added.iter().filter(|a| !a.replaces_dir) {
        let path = path_of(&a.path);
        let full = workdir.join(path);
        let removed = match std::fs::symlink_metadata(&full) {
            Ok(m) if m.is_dir() => std::fs::remove_dir(&full),
            Ok(_) => std::fs::remove_file(&full),
            Err(_) => Ok(()),
        };
        removed.map_err(|e| failed(format!("{} ({e})", shown(&a.path))))?;
        dirs.extend(path.ancestors().skip(1).filter(|d| !d.as_os_str().is_empty()).map(|d| workdir.join(d)));
    }
    let mut dirs: Vec<PathBuf> = dirs.into_iter().collect();
    dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
    for dir in dirs {
        // Only an empty one goes: what else is there is someone's.
        let _ = std::fs::remove_dir(dir);
    }
    restore_old_files(checkout, change).map_err(|e| failed(e.message().to_owned()))?;
    let old = checkout.find_tree(change.old_tree).map_err(ws_err)?;
    let mut index = checkout.index().map_err(ws_err)?;
    index.read_tree(&old).and_then(|()| index.write()).map_err(|e| failed(format!("the index: {}", e.message())))
}

/// Checks `commit` out in a copy of `checkout` whose working directory is the
/// empty directory `scratch`: every path `change` touches, with the
/// `.gitmodules` and `.gitattributes` files that decide how libgit2 writes
/// them. An error here is one the real checkout would meet half way.
pub(super) fn rehearse(checkout: &Repository, scratch: &Path, change: &Change, commit: Oid) -> Result<()> {
    let open = || -> std::result::Result<Repository, git2::Error> {
        let copy = Repository::open(checkout.path())?;
        copy.set_workdir(scratch, false)?;
        // An index of its own, in memory: the user's is neither read nor written.
        copy.set_index(&mut git2::Index::new()?)?;
        Ok(copy)
    };
    let copy = open().map_err(|e| ws_err(format!("rehearsing the checkout in {}: {e}", scratch.display())))?;
    let commit = copy.find_object(commit, None).map_err(ws_err)?;
    for chunk in change.paths.chunks(PATHSPEC_CHUNK) {
        let mut opts = CheckoutBuilder::new();
        opts.force().refresh(false).update_index(false).disable_pathspec_match(true);
        for path in chunk.iter().chain(&deciding_files(chunk)) {
            opts.path(path.clone());
        }
        copy.checkout_tree(&commit, Some(&mut opts)).map_err(|e| refused_by_git(e, scratch))?;
    }
    Ok(())
}

/// `.gitmodules`, and the `.gitattributes` of every directory above `paths`.
fn deciding_files(paths: &[Vec<u8>]) -> BTreeSet<Vec<u8>> {
    let mut out = BTreeSet::from([b".gitmodules".to_vec()]);
    for path in paths {
        for dir in path_of(path).ancestors().skip(1) {
            out.insert(dir.join(".gitattributes").as_os_str().as_bytes().to_vec());
        }
    }
    out
}

fn refused_by_git(e: git2::Error, scratch: &Path) -> Error {
    if e.class() == ErrorClass::Os {
        return ws_err(format!(
            "rehearsing the checkout in {}: {}; nothing was changed",
            scratch.display(),
            e.message()
        ));
    }
    Error::conflict(format!(
        "git's checkout refuses the work's files ({}), and would have failed half way through your checkout; nothing was changed",
        e.message()
    ))
    .hint("fix the commit that brings them (or land it with your own tools, which may refuse it too)")
}

/// What the checkout could disturb, as it was before.
struct Before {
    index_path: PathBuf,
    /// The index file's bytes (`None`: there was none).
    index: Option<Vec<u8>>,
    /// Directories that did not exist, above the files the change adds,
    /// deepest first: made by the checkout, if they exist later.
    absent_dirs: Vec<PathBuf>,
}

impl Before {
    fn take(checkout: &Repository, workdir: &Path, change: &Change) -> Result<Before> {
        let index_path = checkout.index().map_err(ws_err)?.path().map(Path::to_path_buf);
        let index_path = index_path.ok_or_else(|| ws_err("the checkout's index has no file"))?;
        let index = match std::fs::read(&index_path) {
            Ok(bytes) => Some(bytes),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(ws_err(format!("reading {}: {e}", index_path.display()))),
        };
        let mut absent: BTreeSet<PathBuf> = BTreeSet::new();
        for a in &change.added {
            let path = path_of(&a.path);
            let dirs = path.ancestors().skip(1).filter(|d| !d.as_os_str().is_empty());
            absent.extend(dirs.map(|d| workdir.join(d)).filter(|d| std::fs::symlink_metadata(d).is_err()));
            if a.mode == MODE_GITLINK {
                absent.insert(workdir.join(path));
            }
        }
        let mut absent_dirs: Vec<PathBuf> = absent.into_iter().collect();
        absent_dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
        Ok(Before { index_path, index, absent_dirs })
    }
}

/// Checks `commit` out in `checkout` (whose HEAD is the branch it lands on),
/// refusing to overwrite ignored files, then runs `then` (which moves the
/// branch). If either fails, every path the checkout touched is put back and
/// the index restored, and the error says so, or says what is left.
pub(super) fn check_out_all_or_nothing(
    checkout: &Repository,
    change: &Change,
    commit: &git2::Object<'_>,
    target: &str,
    then: impl FnOnce() -> Result<()>,
) -> Result<()> {
    let workdir = checkout.workdir().ok_or_else(|| ws_err("the checkout has no working directory"))?.to_path_buf();
    let before = Before::take(checkout, &workdir, change)?;
    let mut opts = CheckoutBuilder::new();
    opts.safe().overwrite_ignored(false);
    let failed = match checkout.checkout_tree(commit, Some(&mut opts)) {
        Ok(()) => match then() {
            Ok(()) => return Ok(()),
            Err(e) => e,
        },
        Err(e) => checkout_failed(target, &workdir, e),
    };
    let changed = changed_paths(checkout, change).unwrap_or_default();
    let left = put_back(checkout, &workdir, change, &before);
    Err(reported(failed, target, &changed, &left, &workdir))
}

fn checkout_failed(target: &str, workdir: &Path, e: git2::Error) -> Error {
    if e.code() == ErrorCode::Conflict {
        Error::conflict(format!(
            "landing on {target} would overwrite files in {} that git does not track ({})",
            shown_dir(workdir),
            e.message()
        ))
        .hint("move those files away first")
    } else {
        ws_err(format!("checking out the work in {} failed ({})", shown_dir(workdir), e.message()))
    }
}

/// The paths of `change` whose files differ from the old tree's now (what a
/// checkout changed), files it added among them.
fn changed_paths(checkout: &Repository, change: &Change) -> std::result::Result<Vec<String>, git2::Error> {
    let old = checkout.find_tree(change.old_tree)?;
    let mut changed = Vec::new();
    for chunk in change.paths.chunks(PATHSPEC_CHUNK) {
        let mut opts = git2::DiffOptions::new();
        opts.include_untracked(true).recurse_untracked_dirs(true).include_ignored(true).recurse_ignored_dirs(true);
        opts.ignore_submodules(true).disable_pathspec_match(true);
        for path in chunk {
            opts.pathspec(path.clone());
        }
        let diff = checkout.diff_tree_to_workdir(Some(&old), Some(&mut opts))?;
        let paths = diff.deltas().filter_map(|d| d.new_file().path_bytes().or(d.old_file().path_bytes()));
        changed.extend(paths.map(shown));
    }
    Ok(changed)
}

/// Undoes what a checkout from the old tree to the new one did to `workdir`
/// and the index. Returns what it could not put back, each with why.
fn put_back(checkout: &Repository, workdir: &Path, change: &Change, before: &Before) -> Vec<String> {
    let mut left = remove_added(workdir, change);
    for dir in &before.absent_dirs {
        match std::fs::remove_dir(dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                left.push(format!("{} (a directory the checkout made: {e})", dir.display()))
            }
            _ => {}
        }
    }
    if let Err(e) = restore_old_files(checkout, change) {
        left.push(format!("the files it changed (checking them out again failed: {})", e.message()));
    }
    if let Err(e) = restore_index(before) {
        left.push(format!("the index {} ({e})", before.index_path.display()));
    }
    if left.is_empty() {
        match changed_paths(checkout, change) {
            Ok(paths) => left.extend(paths.into_iter().map(|p| format!("{p} (still differs)"))),
            Err(e) => left.push(format!("the files it changed (comparing them failed: {})", e.message())),
        }
    }
    left
}

/// Deletes each file the change added that is there now and is what the
/// checkout wrote (its content the new tree's; a submodule's empty
/// directory): anything else there is someone else's, and stays.
fn remove_added(workdir: &Path, change: &Change) -> Vec<String> {
    let mut left = Vec::new();
    for a in &change.added {
        let full = workdir.join(path_of(&a.path));
        let Ok(meta) = std::fs::symlink_metadata(&full) else { continue };
        let written = match a.mode {
            MODE_GITLINK => meta.is_dir(),
            MODE_LINK => meta.file_type().is_symlink() && link_is(&full, a.id),
            _ => meta.is_file() && Oid::hash_file(ObjectType::Blob, &full).ok() == Some(a.id),
        };
        let removed = match (written, meta.is_dir()) {
            (false, _) => Err(std::io::Error::other("it is not what the checkout wrote")),
            (true, true) => std::fs::remove_dir(&full),
            (true, false) => std::fs::remove_file(&full),
        };
        if let Err(e) = removed {
            left.push(format!("{} ({e})", shown(&a.path)));
        }
    }
    left
}

fn link_is(full: &Path, id: Oid) -> bool {
    std::fs::read_link(full).ok().and_then(|t| Oid::hash_object(ObjectType::Blob, t.as_os_str().as_bytes()).ok())
        == Some(id)
}

/// Forces the old tree's files back at every path the change touches,
/// leaving the index to `restore_index`.
fn restore_old_files(checkout: &Repository, change: &Change) -> std::result::Result<(), git2::Error> {
    let old = checkout.find_object(change.old_tree, Some(ObjectType::Tree))?;
    for chunk in change.paths.chunks(PATHSPEC_CHUNK) {
        let mut opts = CheckoutBuilder::new();
        opts.force().update_index(false).disable_pathspec_match(true);
        for path in chunk {
            opts.path(path.clone());
        }
        checkout.checkout_tree(&old, Some(&mut opts))?;
    }
    Ok(())
}

/// Writes the index's old bytes back, through git's lock file, or removes
/// the index the checkout made where there was none.
fn restore_index(before: &Before) -> std::io::Result<()> {
    let Some(bytes) = &before.index else {
        return match std::fs::remove_file(&before.index_path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        };
    };
    let lock = before.index_path.with_extension("lock");
    let mut file = std::fs::OpenOptions::new().write(true).create_new(true).open(&lock)?;
    let written = std::io::Write::write_all(&mut file, bytes).and_then(|()| file.sync_all());
    match written.and_then(|()| std::fs::rename(&lock, &before.index_path)) {
        Ok(()) => Ok(()),
        Err(e) => {
            let _ = std::fs::remove_file(&lock);
            Err(e)
        }
    }
}

/// The checkout's error, saying that every file was put back, or what was not.
fn reported(failed: Error, target: &str, changed: &[String], left: &[String], workdir: &Path) -> Error {
    if left.is_empty() {
        let what = if changed.is_empty() {
            "nothing was changed".to_owned()
        } else {
            format!(
                "{target} did not move, and every file the checkout had changed was put back as it was ({})",
                changed.join(", ")
            )
        };
        return failed.with_note(what);
    }
    Error::new(
        failed.kind(),
        format!("{failed}; {target} did not move, but putting your checkout back failed for: {}", left.join(", ")),
    )
    .hint(format!("`git -C {workdir:?} status` shows what differs from {target}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tree of `files` (path, content, mode); a gitlink's content is ignored.
    fn tree(repo: &Repository, files: &[(&str, &str, u32)]) -> Oid {
        let mut index = git2::Index::new().unwrap();
        for (path, content, mode) in files {
            let id = if *mode == MODE_GITLINK {
                Oid::from_bytes(&[7; 20]).unwrap()
            } else {
                repo.blob(content.as_bytes()).unwrap()
            };
            let entry = git2::IndexEntry {
                ctime: git2::IndexTime::new(0, 0),
                mtime: git2::IndexTime::new(0, 0),
                dev: 0,
                ino: 0,
                mode: *mode,
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
        index.write_tree_to(repo).unwrap()
    }

    fn commit(repo: &Repository, tree_id: Oid, parent: Option<Oid>) -> Oid {
        let sig = git2::Signature::now("t", "t@example.com").unwrap();
        let parents: Vec<git2::Commit<'_>> = parent.map(|p| repo.find_commit(p).unwrap()).into_iter().collect();
        let parents: Vec<&git2::Commit<'_>> = parents.iter().collect();
        repo.commit(None, &sig, &sig, "c", &repo.find_tree(tree_id).unwrap(), &parents).unwrap()
    }

    const BASE: &[(&str, &str, u32)] =
        &[("a.txt", "a\n", 0o100644), ("b.txt", "b\n", 0o100644), ("d/x.txt", "x\n", 0o100644)];

    /// A checkout of BASE on `main`, with an untracked and an ignored file,
    /// and a commit on top of it with `files`.
    fn checkout_and_work(dir: &Path, files: &[(&str, &str, u32)]) -> (Repository, Oid, Oid) {
        let repo = Repository::init(dir).unwrap();
        let base = commit(&repo, tree(&repo, BASE), None);
        repo.reference("refs/heads/main", base, true, "t").unwrap();
        repo.set_head("refs/heads/main").unwrap();
        repo.checkout_head(Some(CheckoutBuilder::new().force())).unwrap();
        std::fs::write(dir.join(".git/info/exclude"), "*.env\n").unwrap();
        std::fs::write(dir.join("mine.txt"), "untracked\n").unwrap();
        std::fs::write(dir.join("secret.env"), "ignored\n").unwrap();
        let work = commit(&repo, tree(&repo, files), Some(base));
        (repo, base, work)
    }

    /// Every file under `dir` (but `.git`), and the index's bytes.
    fn state(dir: &Path) -> (Vec<(PathBuf, Vec<u8>)>, Vec<u8>) {
        let mut files = Vec::new();
        let mut todo = vec![dir.to_path_buf()];
        while let Some(d) = todo.pop() {
            for e in std::fs::read_dir(&d).unwrap().flatten() {
                let p = e.path();
                if p.ends_with(".git") {
                    continue;
                }
                if e.file_type().unwrap().is_dir() {
                    files.push((p.strip_prefix(dir).unwrap().to_path_buf(), b"<dir>".to_vec()));
                    todo.push(p);
                } else {
                    files.push((p.strip_prefix(dir).unwrap().to_path_buf(), std::fs::read(&p).unwrap_or_default()));
                }
            }
        }
        files.sort();
        (files, std::fs::read(dir.join(".git/index")).unwrap())
    }

    fn change_of(repo: &Repository, base: Oid, work: Oid) -> Change {
        let tree = |id| repo.find_commit(id).unwrap().tree().unwrap();
        Change::between(repo, &tree(base), &tree(work)).unwrap()
    }

    /// A gitlink with a `.gitmodules` libgit2 cannot parse: the real checkout
    /// writes every other file before it fails on it.
    const UNREADABLE_GITMODULES: &[(&str, &str, u32)] = &[
        ("a.txt", "A\n", 0o100644),
        ("c.txt", "c\n", 0o100644),
        ("d", "now a file\n", 0o100644),
        ("new/deep/f.txt", "f\n", 0o100644),
        (".gitmodules", "[submodule\n", 0o100644),
        ("sub", "", MODE_GITLINK),
    ];

    #[test]
    fn a_checkout_that_fails_half_way_is_rehearsed_first_and_else_put_back() {
        let dir = tempfile::tempdir().unwrap();
        let (repo, base, work) = checkout_and_work(dir.path(), UNREADABLE_GITMODULES);
        let change = change_of(&repo, base, work);
        let before = state(dir.path());
        let commit = repo.find_object(work, None).unwrap();

        // The rehearsal meets the failure, in its own directory.
        let scratch = tempfile::tempdir().unwrap();
        let e = rehearse(&repo, scratch.path(), &change, work).unwrap_err();
        assert_eq!(e.exit_code(), 4, "{e}");
        assert!(
            e.to_string().contains("failed to parse config file") && e.to_string().contains("nothing was changed"),
            "{e}"
        );
        assert_eq!(state(dir.path()), before, "the rehearsal touched the checkout");

        // The real checkout, unrehearsed: it fails half way, and all is put back.
        let e = check_out_all_or_nothing(&repo, &change, &commit, "main", || Ok(())).unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("failed to parse config file")
                && text.contains("every file the checkout had changed was put back"),
            "{text}"
        );
        assert!(
            text.contains("\"b.txt\"") && text.contains("\"c.txt\"") && text.contains("\"new/deep/f.txt\""),
            "{text}"
        );
        assert_eq!(state(dir.path()), before);
        assert_eq!(repo.refname_to_id("refs/heads/main").unwrap(), base);
    }

    #[test]
    fn a_rehearsal_passes_what_git_checks_out_and_refuses_names_git_rejects() {
        let files = &[
            ("a.txt", "A\n", 0o100644),
            ("d/x.txt", "x\n", 0o100755),
            ("link", "a.txt", MODE_LINK),
            (".gitattributes", "*.txt text\n", 0o100644),
        ];
        for (extra, refused) in [(None, None), (Some(("gitmod~1", MODE_LINK)), Some("invalid path 'gitmod~1'"))] {
            let dir = tempfile::tempdir().unwrap();
            let mut files = files.to_vec();
            files.extend(extra.map(|(path, mode)| (path, "x", mode)));
            let (repo, base, work) = checkout_and_work(dir.path(), &files);
            let before = state(dir.path());
            let scratch = tempfile::tempdir().unwrap();
            let rehearsed = rehearse(&repo, scratch.path(), &change_of(&repo, base, work), work);
            match refused {
                None => {
                    rehearsed.unwrap();
                    assert_eq!(std::fs::read_link(scratch.path().join("link")).unwrap(), Path::new("a.txt"));
                    assert!(!scratch.path().join("b.txt").exists(), "a path the change does not touch was written");
                }
                Some(why) => {
                    let e = rehearsed.unwrap_err();
                    assert!(e.to_string().contains(why) && e.exit_code() == 4, "{e}");
                }
            }
            assert_eq!(state(dir.path()), before, "the rehearsal touched the checkout");
        }
    }

    #[test]
    fn a_branch_that_cannot_move_after_the_checkout_puts_every_file_back() {
        let dir = tempfile::tempdir().unwrap();
        let files = &[("a.txt", "A\n", 0o100644), ("c.txt", "c\n", 0o100644), ("d", "../a.txt", MODE_LINK)];
        let (repo, base, work) = checkout_and_work(dir.path(), files);
        let change = change_of(&repo, base, work);
        let before = state(dir.path());
        let commit = repo.find_object(work, None).unwrap();
        let moved = std::cell::Cell::new(false);
        let e = check_out_all_or_nothing(&repo, &change, &commit, "main", || {
            moved.set(std::fs::read_link(dir.path().join("d")).is_ok());
            Err(Error::conflict("main moved meanwhile"))
        })
        .unwrap_err();
        assert!(moved.get(), "the checkout had not landed when the branch was to move");
        assert_eq!(e.exit_code(), 4);
        assert!(
            e.to_string()
                .starts_with("main moved meanwhile; main did not move, and every file the checkout had changed"),
            "{e}"
        );
        assert_eq!(state(dir.path()), before);
    }

    #[test]
    fn what_stands_where_the_work_adds_a_file_is_in_the_way_and_a_tracked_directory_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let files = &[("d", "file\n", 0o100644), ("secret.env", "agent\n", 0o100644), ("e/f", "f\n", 0o100644)];
        let (repo, base, work) = checkout_and_work(dir.path(), files);
        let change = change_of(&repo, base, work);
        let e = change.refuse_in_the_way(dir.path(), "main").unwrap_err();
        assert_eq!(e.exit_code(), 4);
        assert!(e.to_string().contains("\"secret.env\" is in the way"), "{e}");
        std::fs::remove_file(dir.path().join("secret.env")).unwrap();
        std::fs::create_dir(dir.path().join("e")).unwrap();
        assert!(
            change.refuse_in_the_way(dir.path(), "main").is_ok(),
            "an existing directory above a new file is no obstacle"
        );
        std::fs::create_dir(dir.path().join("e/f")).unwrap();
        let e = change.refuse_in_the_way(dir.path(), "main").unwrap_err();
        assert!(e.to_string().contains("\"e/f\" is in the way"), "an empty directory libgit2 would remove: {e}");
    }
}
