//! `merge --conflicts`: the files a conflicting merge leaves in the user's
//! checkout, as git's own `git merge` leaves them. Each file that merged
//! cleanly is the merge's; each that conflicts holds git's conflict markers
//! (or, where a side deleted it or it is no text file, the version the
//! target has, else the work's). Those files are written as one tree, so that
//! landing them is a checkout like any other `merge` makes: rehearsed first,
//! and put back whole should it fail.

use git2::{FileMode, Index, IndexEntry, MergeFileInput, MergeFileOptions, Oid, Repository};

use crate::error::{Error, Result};
use crate::names::SandboxName;

fn err(e: impl std::fmt::Display) -> Error {
    Error::workspace(format!("leaving the conflicts marked: {e}"))
}

/// What `merge --abort` put back.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Aborted {
    pub target: String,
    pub checkout: String,
    /// The files the aborted merge had changed.
    pub files: Vec<String>,
}

/// The stage bits of an index entry's flags (0: merged; 1 to 3: the
/// ancestor's, ours and theirs of a conflict).
const STAGE_MASK: u16 = 0x3000;

/// The merge of `head` (the agent's) into `target_tip`, conflicts and all.
pub fn merged_index(repo: &Repository, target_tip: Oid, head: Oid) -> Result<Index> {
    let ours = repo.find_commit(target_tip).map_err(err)?;
    let theirs = repo.find_commit(head).map_err(err)?;
    repo.merge_commits(&ours, &theirs, None).map_err(err)
}

/// A commit (of nobody's branch) of the files the merge of `head` into
/// `target_tip` leaves, markers and all, whose parents are the two.
pub fn marked_commit(repo: &Repository, name: &SandboxName, target: &str, head: Oid, target_tip: Oid) -> Result<Oid> {
    let index = merged_index(repo, target_tip, head)?;
    let tree = repo.find_tree(marked_tree(repo, &index, target, name)?).map_err(err)?;
    let sig = repo.signature().or_else(|_| git2::Signature::now("forage", "forage@localhost")).map_err(err)?;
    let parents = [repo.find_commit(target_tip).map_err(err)?, repo.find_commit(head).map_err(err)?];
    let message = format!("forage: the conflicting merge of sandbox {name}, conflicts marked\n");
    repo.commit(None, &sig, &sig, &message, &tree, &[&parents[0], &parents[1]]).map_err(err)
}

/// The tree of the files a conflicting merge `index` leaves in a checkout.
fn marked_tree(repo: &Repository, index: &Index, target: &str, name: &SandboxName) -> Result<Oid> {
    let mut out = Index::new().map_err(err)?;
    for entry in index.iter().filter(|e| e.flags & STAGE_MASK == 0) {
        out.add(&entry).map_err(err)?;
    }
    for conflict in index.conflicts().map_err(err)? {
        let conflict = conflict.map_err(err)?;
        let marked = match (&conflict.our, &conflict.their) {
            (Some(ours), Some(theirs)) if text(repo, ours)? && text(repo, theirs)? => {
                let content = markers(repo, conflict.ancestor.as_ref(), ours, theirs, target, name)?;
                IndexEntry { id: repo.blob(&content).map_err(err)?, ..merged_entry(ours) }
            }
            (Some(ours), _) => merged_entry(ours),
            (None, Some(theirs)) => merged_entry(theirs),
            (None, None) => continue,
        };
        out.add(&marked).map_err(err)?;
    }
    out.write_tree_to(repo).map_err(err)
}

/// A copy of `e` at stage 0 (merged).
fn merged_entry(e: &IndexEntry) -> IndexEntry {
    IndexEntry {
        ctime: e.ctime,
        mtime: e.mtime,
        dev: e.dev,
        ino: e.ino,
        mode: e.mode,
        uid: e.uid,
        gid: e.gid,
        file_size: e.file_size,
        id: e.id,
        flags: e.flags & !STAGE_MASK,
        flags_extended: e.flags_extended,
        path: e.path.clone(),
    }
}

/// True when `entry` is a regular file whose content git merges as text.
fn text(repo: &Repository, entry: &IndexEntry) -> Result<bool> {
    let regular = entry.mode == u32::from(FileMode::Blob) || entry.mode == u32::from(FileMode::BlobExecutable);
    Ok(regular && !repo.find_blob(entry.id).map_err(err)?.is_binary())
}

/// `ours` and `theirs` merged line by line, with git's markers around what
/// conflicts, labelled with the target's name and the sandbox's.
fn markers(
    repo: &Repository,
    ancestor: Option<&IndexEntry>,
    ours: &IndexEntry,
    theirs: &IndexEntry,
    target: &str,
    name: &SandboxName,
) -> Result<Vec<u8>> {
    let content = |e: &IndexEntry| repo.find_blob(e.id).map(|b| b.content().to_vec()).map_err(err);
    let ancestor_content = ancestor.map(content).transpose()?.unwrap_or_default();
    let (our_content, their_content) = (content(ours)?, content(theirs)?);
    let input = |bytes| {
        let mut input = MergeFileInput::new();
        input.content(bytes);
        input
    };
    let mut opts = MergeFileOptions::new();
    opts.our_label(target).their_label(format!("sandbox {name}"));
    let merged =
        git2::merge_file(&input(&ancestor_content), &input(&our_content), &input(&their_content), Some(&mut opts))
            .map_err(err)?;
    Ok(merged.content().to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn commit(repo: &Repository, parent: Option<Oid>, files: &[(&str, &str)]) -> Oid {
        crate::workspace::review::tests::commit(repo, parent, files, "c")
    }

    fn file(repo: &Repository, commit: Oid, path: &str) -> String {
        let tree = repo.find_commit(commit).unwrap().tree().unwrap();
        let blob = tree.get_path(std::path::Path::new(path)).unwrap().to_object(repo).unwrap();
        String::from_utf8(blob.as_blob().unwrap().content().to_vec()).unwrap()
    }

    #[test]
    fn conflicts_are_marked_as_git_marks_them_and_the_rest_is_merged() {
        let dir = tempfile::tempdir().unwrap();
        let repo = Repository::init(dir.path()).unwrap();
        let name = SandboxName::parse("s").unwrap();
        let base = commit(&repo, None, &[("a", "1\n2\n3\n"), ("gone", "g\n")]);
        let main = commit(&repo, Some(base), &[("a", "1\n2\nmain\n"), ("gone", "g\n"), ("m", "m\n")]);
        let work = commit(&repo, Some(base), &[("a", "1\n2\nwork\n"), ("w", "w\n")]);
        let marked = marked_commit(&repo, &name, "main", work, main).unwrap();
        assert_eq!(file(&repo, marked, "a"), "1\n2\n<<<<<<< main\nmain\n=======\nwork\n>>>>>>> sandbox s\n");
        assert_eq!((file(&repo, marked, "m"), file(&repo, marked, "w")), ("m\n".into(), "w\n".into()));
        let tree = repo.find_commit(marked).unwrap().tree().unwrap();
        assert!(tree.get_path(std::path::Path::new("gone")).is_err(), "the work's deletion was not merged");
        let parents: Vec<Oid> = repo.find_commit(marked).unwrap().parent_ids().collect();
        assert_eq!(parents, [main, work]);
    }
}
