//! The import against real repositories: the host's made by libgit2, the
//! agent's objects written raw (libgit2's object database checks no content),
//! as an agent with `git hash-object --literally` would.

use std::io::Write;
use std::path::{Path, PathBuf};

use git2::{ObjectType, Oid, Repository};

use super::walk::{MAX_PATH_BYTES, MAX_TREE_DEPTH};
use super::*;

const WHO: &str = "A <a@example.com> 1700000000 +0000";

struct World {
    _dir: tempfile::TempDir,
    host: Repository,
    agent: Repository,
    staging: PathBuf,
}

impl World {
    fn new() -> World {
        let dir = tempfile::tempdir().unwrap();
        let host = Repository::init(dir.path().join("host")).unwrap();
        let agent = Repository::init_bare(dir.path().join("agent")).unwrap();
        std::fs::create_dir(dir.path().join("private")).unwrap();
        let staging = dir.path().join("private/staging");
        World { _dir: dir, host, agent, staging }
    }

    fn put(&self, kind: ObjectType, data: &[u8]) -> Oid {
        self.agent.odb().unwrap().write(kind, data).unwrap()
    }

    fn blob(&self, content: &str) -> Oid {
        self.put(ObjectType::Blob, content.as_bytes())
    }

    fn tree(&self, entries: &[(&str, &[u8], Oid)]) -> Oid {
        self.put(ObjectType::Tree, &tree_bytes(entries))
    }

    fn commit(&self, tree: Oid, extra: &str) -> Oid {
        self.put(ObjectType::Commit, format!("tree {tree}\nauthor {WHO}\ncommitter {WHO}\n{extra}\nwork\n").as_bytes())
    }

    fn objects(&self) -> Dir {
        Dir::open(&self.agent.path().join("objects")).unwrap()
    }

    fn import(&self, tip: Oid) -> Result<Imported> {
        Staged::new(Some(&self.objects()), &self.staging)?.import(&self.host, &[tip])
    }

    fn host_has(&self, id: Oid) -> bool {
        self.host.odb().unwrap().exists(id)
    }

    /// The files of the host's object store.
    fn host_files(&self) -> Vec<PathBuf> {
        files(&self.host.path().join("objects"))
    }
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        match entry.file_type().unwrap().is_dir() {
            true => out.extend(files(&entry.path())),
            false => out.push(entry.path()),
        }
    }
    out.sort();
    out
}

fn tree_bytes(entries: &[(&str, &[u8], Oid)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (mode, name, id) in entries {
        out.extend_from_slice(mode.as_bytes());
        out.push(b' ');
        out.extend_from_slice(name);
        out.push(0);
        out.extend_from_slice(id.as_bytes());
    }
    out
}

#[test]
fn a_good_tip_lands_as_one_pack_and_a_refused_one_writes_nothing() {
    let w = World::new();
    let blob = w.blob("hello\n");
    let sub = w.tree(&[("100644", b"f", blob)]);
    let good = w.commit(w.tree(&[("100644", b"a.txt", blob), ("40000", b"dir", sub)]), "");
    let before = w.host_files();
    let imported = w.import(good).unwrap();
    assert_eq!((imported.objects, imported.commits.len()), (4, 1));
    assert!(w.host_has(good) && w.host_has(sub) && w.host_has(blob));
    let added: Vec<PathBuf> = w.host_files().into_iter().filter(|f| !before.contains(f)).collect();
    assert!(added.iter().all(|f| f.starts_with(w.host.path().join("objects/pack"))), "{added:?}");
    assert_eq!(added.len(), 2, "one pack and its index: {added:?}");
    assert!(!w.staging.exists(), "the staging directory is removed");

    // A symlink and a directory of one name, far apart in the tree.
    let bad_tree = w.tree(&[("120000", b"x", blob), ("100644", b"x.1", blob), ("40000", b"x", sub)]);
    let bad = w.put(
        ObjectType::Commit,
        format!("tree {bad_tree}\nparent {good}\nauthor {WHO}\ncommitter {WHO}\n\nbad\n").as_bytes(),
    );
    let before = w.host_files();
    let e = w.import(bad).unwrap_err().to_string();
    assert!(
        e.contains(&bad_tree.to_string()) && e.contains("two entries") && e.contains("nothing was imported"),
        "{e}"
    );
    assert_eq!(w.host_files(), before, "a refused tip writes nothing");
    assert!(!w.host_has(bad));
}

#[test]
fn headers_names_and_gitmodules_git_or_jj_refuse_are_refused() {
    let w = World::new();
    let blob = w.blob("x\n");
    let fine = w.tree(&[("100644", b"a", blob)]);
    let modules = w.blob("[submodule \"s\"]\n\tpath = s\n\turl = -oProxyCommand=touch${IFS}/tmp/x\n");
    let cases = [
        (w.commit(fine, "x-agent evil\n"), "x-agent"),
        (w.commit(fine, "change-id KKKKZZZZKKKKZZZZKKKKZZZZKKKKZZZZ\n"), "change id"),
        (w.commit(w.tree(&[("40000", b".git::$INDEX_ALLOCATION", fine)]), ""), "git directory"),
        (w.commit(w.tree(&[("40000", ".g\u{200c}it".as_bytes(), fine)]), ""), "git directory"),
        (w.commit(w.tree(&[("100644", b"GITMOD~1", modules)]), ""), "url"),
        (w.commit(w.tree(&[("100644", b"a", fine)]), ""), "is a tree, where a blob belongs"),
        (fine, "points at a tree"),
    ];
    for (tip, why) in cases {
        let e = w.import(tip).unwrap_err().to_string();
        assert!(e.contains(why), "{why}: {e}");
        assert!(!w.host_has(blob), "{why}: something was written");
    }
}

/// A chain of `depth` trees, each holding the next as `d`, the last `leaf`.
fn chain(put: impl Fn(&[u8]) -> Oid, depth: u32, leaf: Oid) -> Oid {
    (0..depth).fold(leaf, |inner, _| put(&tree_bytes(&[("40000", b"d", inner)])))
}

#[test]
fn trees_deeper_or_paths_longer_than_git_handles_are_refused_also_through_the_hosts_trees() {
    let w = World::new();
    let file = w.tree(&[("100644", b"f", w.blob("deep\n"))]);
    let put = |data: &[u8]| w.put(ObjectType::Tree, data);
    // Trees 2048 levels below the root tree pass, 2049 do not (an empty one
    // at the bottom: its path, 2048 names of one byte, is within PATH_MAX).
    let empty = put(b"");
    assert!(w.import(w.commit(chain(put, MAX_TREE_DEPTH, empty), "")).is_ok());
    let e = w.import(w.commit(chain(put, MAX_TREE_DEPTH + 1, empty), "")).unwrap_err().to_string();
    assert!(e.contains("core.maxTreeDepth"), "{e}");

    // A tree the host already has counts with its own depth.
    let host_odb = w.host.odb().unwrap();
    let host_leaf = host_odb.write(ObjectType::Tree, b"").unwrap();
    let host_deep = chain(|d: &[u8]| host_odb.write(ObjectType::Tree, d).unwrap(), 1500, host_leaf);
    let e = w.import(w.commit(chain(put, 600, host_deep), "")).unwrap_err().to_string();
    assert!(e.contains("core.maxTreeDepth"), "{e}");

    // A path longer than PATH_MAX, in short names.
    let name = vec![b'n'; 200];
    let long = (0..=MAX_PATH_BYTES / 201).fold(file, |inner, _| put(&tree_bytes(&[("40000", &name, inner)])));
    let e = w.import(w.commit(long, "")).unwrap_err().to_string();
    assert!(e.contains("longer than"), "{e}");
}

/// Replaces the agent's loose object `id` with `content` (as its file).
fn overwrite_loose(w: &World, id: Oid, content: &[u8]) {
    let hex = id.to_string();
    let path = w.agent.path().join("objects").join(&hex[..2]).join(&hex[2..]);
    let mut perms = std::fs::metadata(&path).unwrap().permissions();
    #[allow(clippy::permissions_set_readonly_false)]
    perms.set_readonly(false);
    std::fs::set_permissions(&path, perms).unwrap();
    std::fs::write(path, content).unwrap();
}

#[test]
fn forged_padded_and_sparse_loose_objects_are_refused_before_they_are_read_whole() {
    let w = World::new();
    let blob = w.blob("real\n");
    let tip = w.commit(w.tree(&[("100644", b"f", blob)]), "");
    let compressed = |content: &[u8]| {
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        z.write_all(content).unwrap();
        z.finish().unwrap()
    };
    overwrite_loose(&w, blob, &compressed(b"blob 6\0forged"));
    assert!(w.import(tip).unwrap_err().to_string().contains("does not match its id"));
    let mut padded = compressed(b"blob 5\0real\n");
    padded.extend_from_slice(&[0; 4096]);
    overwrite_loose(&w, blob, &padded);
    assert!(w.import(tip).unwrap_err().to_string().contains("garbage"));
    // Sparse: 1 GiB that costs no disk, refused from its size and blocks alone.
    overwrite_loose(&w, blob, &compressed(b"blob 5\0real\n"));
    let hex = blob.to_string();
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(w.agent.path().join("objects").join(&hex[..2]).join(&hex[2..]))
        .unwrap();
    file.set_len(1 << 30).unwrap();
    let e = w.import(tip).unwrap_err().to_string();
    assert!(e.contains("more than") || e.contains("sparse"), "{e}");
    assert!(!w.host_has(tip));
}
