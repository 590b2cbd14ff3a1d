//! What the agent committed since the last sync, read for `list` without a
//! sync: its HEAD and its branch, and the commits and trees they reach that
//! the host lacks, from its loose objects alone (`AgentObjects::loose_only`).
//! Nothing is copied, imported or run: every file is read bounded and without
//! following a symlink, every object checked against its id, every commit by
//! the rules an import applies. The walk stops after `MAX_UNSYNCED` commits
//! (the count is then a lower bound). What cannot be read this way (a commit
//! only in the agent's packs, a ref that is no commit id, a symlink where a
//! ref belongs) leaves the count unknown, saying why, until a sync reads it.

use std::collections::{HashMap, HashSet};

use git2::{ObjectType, Odb, OdbLookupFlags, Oid, Repository};

use super::import::AgentObjects;
use super::refs::parse_oid;
use crate::workspace::untrusted::{Dir, Kind};

/// The most unsynced commits `list` reads for one sandbox: past it, AHEAD
/// shows `N+` until a sync.
pub const MAX_UNSYNCED: usize = 1000;
/// The largest object `list` reads of the agent's (a commit or a tree).
const MAX_OBJECT: usize = 16 << 20;
/// The most `list` reads of the agent's objects for one sandbox, in all
/// (a thousand commits with long messages, or a large tree, fit).
const MAX_READ: usize = 64 << 20;
/// The most tree entries read to know the agent's HEAD's files (a tree that
/// names one subtree many times counts each time).
const MAX_TREE_ENTRIES: usize = 2_000_000;
const MAX_LOOSE_REF: u64 = 4096;
const MAX_PACKED_REFS: u64 = 64 << 20;

/// One of the agent's refs, as `list` reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AgentRef {
    Commit(Oid),
    /// No such ref (HEAD on a branch with no commit yet).
    Absent,
    /// Why it cannot be read (the agent broke it).
    Unreadable(String),
}

/// The agent's HEAD (the commit its uncommitted files are counted against) and
/// the sandbox's branch in its repository (what a sync brings).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentTips {
    pub head: AgentRef,
    pub branch: AgentRef,
}

impl AgentTips {
    /// The tips in the agent's git directory `git`, for the branch `branch`.
    pub fn read(git: &Dir, branch: &str) -> AgentTips {
        let branch_ref = read_branch(git, branch);
        let head = match read_file(git, "HEAD", MAX_LOOSE_REF) {
            Err(why) => AgentRef::Unreadable(why),
            Ok(None) => AgentRef::Unreadable("its HEAD is missing".into()),
            Ok(Some(bytes)) => {
                let text = String::from_utf8_lossy(&bytes);
                let text = text.trim_end();
                match text.strip_prefix("ref: refs/heads/") {
                    Some(b) if b == branch => branch_ref.clone(),
                    Some(b) if git2::Reference::is_valid_name(&format!("refs/heads/{b}")) => read_branch(git, b),
                    Some(_) => AgentRef::Unreadable("its HEAD names no valid branch".into()),
                    None => match parse_oid(text) {
                        Some(id) => AgentRef::Commit(id),
                        None => AgentRef::Unreadable("its HEAD is neither a branch nor a commit id".into()),
                    },
                }
            }
        };
        AgentTips { head, branch: branch_ref }
    }
}

/// The regular file `rel` (a `/`-separated path) of `git`, refused when
/// larger than `limit` bytes; a symlink or
/// anything else but a file or a directory on the way is an error saying so.
fn read_file(git: &Dir, rel: &str, limit: u64) -> Result<Option<Vec<u8>>, String> {
    let (parents, name) = match rel.rsplit_once('/') {
        Some((parents, name)) => (Some(parents), name),
        None => (None, rel),
    };
    let mut at = git.try_clone().map_err(|e| e.to_string())?;
    for (i, part) in parents.into_iter().flat_map(|p| p.split('/')).enumerate() {
        // Opened first (the usual case); only when that fails, told apart:
        // absent, or something else (a symlink) in the way.
        at = match at.dir(part).map_err(|e| e.to_string())? {
            Some(dir) => dir,
            None if at.kind(part).map_err(|e| e.to_string())?.is_none() => return Ok(None),
            None => {
                let shown = rel.split('/').take(i + 1).collect::<Vec<_>>().join("/");
                return Err(format!("{shown} is not a directory (a symlink?)"));
            }
        };
    }
    match at.read(name, limit).map_err(|e| e.to_string())? {
        Some(bytes) => Ok(Some(bytes)),
        None => match at.kind(name).map_err(|e| e.to_string())? {
            None => Ok(None),
            Some(Kind::Symlink) => Err(format!("{rel} is a symlink")),
            Some(_) => Err(format!("{rel} is not a file")),
        },
    }
}

/// `refs/heads/<branch>`: the loose ref, else its line in `packed-refs`.
fn read_branch(git: &Dir, branch: &str) -> AgentRef {
    let full = format!("refs/heads/{branch}");
    match read_file(git, &full, MAX_LOOSE_REF) {
        Err(why) => AgentRef::Unreadable(why),
        Ok(Some(bytes)) => match std::str::from_utf8(&bytes).ok().and_then(parse_oid) {
            Some(id) => AgentRef::Commit(id),
            None => AgentRef::Unreadable(format!("{full} is not a commit id")),
        },
        Ok(None) => match read_file(git, "packed-refs", MAX_PACKED_REFS) {
            Err(why) => AgentRef::Unreadable(why),
            Ok(None) => AgentRef::Absent,
            Ok(Some(packed)) => {
                let line = String::from_utf8_lossy(&packed)
                    .lines()
                    .find_map(|l| l.strip_suffix(full.as_str()).and_then(|l| l.strip_suffix(' ')).map(str::to_owned));
                match line {
                    None => AgentRef::Absent,
                    Some(id) => parse_oid(&id)
                        .map(AgentRef::Commit)
                        .unwrap_or_else(|| AgentRef::Unreadable(format!("{full} in packed-refs is not a commit id"))),
                }
            }
        },
    }
}

/// The agent's commits a tip has that the host lacks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unsynced {
    /// All of them: how many, and the host's commits they sit on.
    Counted { commits: usize, joins: Vec<Oid> },
    /// More than `MAX_UNSYNCED`: the walk stopped there.
    More,
}

/// The host's objects, then the agent's loose ones.
pub struct Peek<'a> {
    host: &'a Repository,
    odb: Odb<'a>,
    agent: AgentObjects,
    /// How many more bytes of the agent's objects may be read (`MAX_READ`).
    left: std::cell::Cell<usize>,
}

impl<'a> Peek<'a> {
    /// `objects` is the agent's `objects/` directory, if it has one.
    pub fn new(host: &'a Repository, objects: Option<Dir>) -> Result<Peek<'a>, String> {
        let odb = host.odb().map_err(|e| e.message().to_owned())?;
        let agent = AgentObjects::loose_only(objects, MAX_OBJECT);
        Ok(Peek { host, odb, agent, left: std::cell::Cell::new(MAX_READ) })
    }

    fn in_host(&self, id: Oid) -> bool {
        self.odb.exists_ext(id, OdbLookupFlags::NO_REFRESH)
    }

    /// The agent's object `id`, which must be a `want`.
    fn agent_object(&self, id: Oid, want: ObjectType) -> Result<Vec<u8>, String> {
        let object = self.agent.read(id)?;
        let size = object.as_ref().map_or(0, |(_, data)| data.len());
        if size > self.left.get() {
            return Err(format!("more than {} MiB of the agent's objects to read", MAX_READ >> 20));
        }
        self.left.set(self.left.get() - size);
        match object {
            Some((kind, data)) if kind == want => Ok(data),
            Some((kind, _)) => Err(format!("{id} is a {kind}, where a {want} belongs")),
            None => Err(format!("{want} {id} is not among the agent's loose objects (packed, or missing)")),
        }
    }

    /// The commits `tip` reaches that the host lacks, walked until the host's
    /// own commits (at most `MAX_UNSYNCED` of them).
    pub fn unsynced(&self, tip: Oid) -> Result<Unsynced, String> {
        let (mut seen, mut stack, mut joins, mut commits) = (HashSet::new(), vec![tip], Vec::new(), 0);
        while let Some(id) = stack.pop() {
            if !seen.insert(id) {
                continue;
            }
            if self.in_host(id) {
                joins.push(id);
                continue;
            }
            if commits == MAX_UNSYNCED {
                return Ok(Unsynced::More);
            }
            let data = self.agent_object(id, ObjectType::Commit)?;
            let commit = super::fsck::check_commit(&data).map_err(|why| format!("commit {id}: {why}"))?;
            commits += 1;
            stack.extend(commit.parents);
        }
        Ok(Unsynced::Counted { commits, joins })
    }

    /// The files of commit `id`'s tree, by path: (mode, id).
    pub fn commit_files(&self, id: Oid) -> Result<HashMap<Vec<u8>, (u32, Oid)>, String> {
        self.tree_files(self.commit_tree(id)?)
    }

    /// Commit `id`'s tree.
    pub fn commit_tree(&self, id: Oid) -> Result<Oid, String> {
        Ok(if self.in_host(id) {
            self.host.find_commit(id).map_err(|e| e.message().to_owned())?.tree_id()
        } else {
            let data = self.agent_object(id, ObjectType::Commit)?;
            super::fsck::check_commit(&data).map_err(|why| format!("commit {id}: {why}"))?.tree
        })
    }

    /// Commit `id`'s tree, looked up by path as it is asked for (each tree
    /// from the host if it has it, else from the agent's loose objects).
    pub fn commit_lookup(&self, id: Oid) -> Result<crate::workspace::tree_lookup::TreeLookup<'_>, String> {
        let tree = self.commit_tree(id)?;
        Ok(crate::workspace::tree_lookup::TreeLookup::new(tree, Box::new(move |id| self.tree_entries(id))))
    }

    /// Every entry of `tree` but its trees, by path, reading each tree from
    /// the host if it has it and from the agent's loose objects if not.
    fn tree_files(&self, tree: Oid) -> Result<HashMap<Vec<u8>, (u32, Oid)>, String> {
        let mut out = HashMap::new();
        let mut stack: Vec<(Oid, Vec<u8>)> = vec![(tree, Vec::new())];
        let mut read = 0usize;
        while let Some((id, prefix)) = stack.pop() {
            let entries = self.tree_entries(id)?;
            read += entries.len();
            if read > MAX_TREE_ENTRIES {
                return Err(format!("its tree has more than {MAX_TREE_ENTRIES} entries"));
            }
            for (mode, name, child) in entries {
                let mut path = prefix.clone();
                if !path.is_empty() {
                    path.push(b'/');
                }
                path.extend_from_slice(&name);
                if mode == 0o040000 {
                    stack.push((child, path));
                } else {
                    out.insert(path, (mode, child));
                }
            }
        }
        Ok(out)
    }

    /// A tree's entries: (mode, name, id).
    fn tree_entries(&self, id: Oid) -> Result<Vec<(u32, Vec<u8>, Oid)>, String> {
        if self.in_host(id) {
            let tree = self.host.find_tree(id).map_err(|e| e.message().to_owned())?;
            return Ok(tree.iter().map(|e| (e.filemode() as u32, e.name_bytes().to_vec(), e.id())).collect());
        }
        let data = self.agent_object(id, ObjectType::Tree)?;
        parse_tree(&data).ok_or_else(|| format!("tree {id} is malformed"))
    }
}

/// A tree's entries, read only to be compared with the worktree's files
/// (nothing is written or checked out from them).
fn parse_tree(mut data: &[u8]) -> Option<Vec<(u32, Vec<u8>, Oid)>> {
    let mut out = Vec::new();
    while !data.is_empty() {
        let space = data.iter().position(|b| *b == b' ')?;
        let mode = u32::from_str_radix(std::str::from_utf8(&data[..space]).ok()?, 8).ok()?;
        let rest = &data[space + 1..];
        let nul = rest.iter().position(|b| *b == 0)?;
        let id = Oid::from_bytes(rest.get(nul + 1..nul + 21)?).ok()?;
        out.push((mode, rest[..nul].to_vec(), id));
        data = &rest[nul + 21..];
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "1111111111111111111111111111111111111111";
    const B: &str = "2222222222222222222222222222222222222222";

    fn tips(setup: impl Fn(&std::path::Path)) -> AgentTips {
        let t = tempfile::tempdir().unwrap();
        let g = t.path().join("git");
        std::fs::create_dir_all(g.join("refs/heads")).unwrap();
        std::fs::write(g.join("HEAD"), "ref: refs/heads/forage-x\n").unwrap();
        setup(&g);
        AgentTips::read(&Dir::open(&g).unwrap(), "forage-x")
    }

    fn unreadable(r: &AgentRef, says: &str) {
        match r {
            AgentRef::Unreadable(why) => assert!(why.contains(says), "{why:?} does not say {says:?}"),
            other => panic!("{other:?} is not unreadable"),
        }
    }

    #[test]
    fn refs_are_read_loose_then_packed_and_anything_odd_is_unreadable_saying_why() {
        let a = Oid::from_str(A).unwrap();
        let loose = tips(|g| std::fs::write(g.join("refs/heads/forage-x"), format!("{A}\n")).unwrap());
        assert_eq!(loose, AgentTips { head: AgentRef::Commit(a), branch: AgentRef::Commit(a) });
        let packed = tips(|g| std::fs::write(g.join("packed-refs"), format!("{B} refs/heads/forage-x\n")).unwrap());
        assert_eq!(packed.branch, AgentRef::Commit(Oid::from_str(B).unwrap()));
        assert_eq!(tips(|_| {}).head, AgentRef::Absent, "a branch with no commit yet");
        let detached = tips(|g| std::fs::write(g.join("HEAD"), format!("{B}\n")).unwrap());
        assert_eq!(detached.head, AgentRef::Commit(Oid::from_str(B).unwrap()));

        unreadable(
            &tips(|g| std::fs::write(g.join("refs/heads/forage-x"), "garbage\n").unwrap()).branch,
            "not a commit id",
        );
        let linked = tips(|g| {
            std::fs::write(g.join("target"), format!("{A}\n")).unwrap();
            std::os::unix::fs::symlink(g.join("target"), g.join("refs/heads/forage-x")).unwrap();
        });
        unreadable(&linked.branch, "symlink");
        unreadable(&linked.head, "symlink");
        let linked_dir = tips(|g| {
            std::fs::rename(g.join("refs/heads"), g.join("elsewhere")).unwrap();
            std::os::unix::fs::symlink(g.join("elsewhere"), g.join("refs/heads")).unwrap();
        });
        unreadable(&linked_dir.branch, "refs/heads is not a directory");
        unreadable(&tips(|g| std::fs::remove_file(g.join("HEAD")).unwrap()).head, "missing");
        unreadable(&tips(|g| std::fs::write(g.join("HEAD"), "ref: refs/tags/x\n").unwrap()).head, "neither");
        unreadable(
            &tips(|g| std::fs::write(g.join("refs/heads/forage-x"), "x".repeat(5000)).unwrap()).branch,
            "larger",
        );
    }

    /// A host repository with one commit, and an agent's objects directory
    /// borrowing from it, as the private repository does.
    fn host_and_agent() -> (tempfile::TempDir, Repository, git2::Repository) {
        let t = tempfile::tempdir().unwrap();
        let host = Repository::init(t.path().join("host")).unwrap();
        let sig = git2::Signature::now("t", "t@t").unwrap();
        let tree = {
            let mut b = host.treebuilder(None).unwrap();
            b.insert("a.txt", host.blob(b"a\n").unwrap(), 0o100644).unwrap();
            b.write().unwrap()
        };
        host.commit(Some("HEAD"), &sig, &sig, "base", &host.find_tree(tree).unwrap(), &[]).unwrap();
        let agent = Repository::init_bare(t.path().join("agent")).unwrap();
        std::fs::write(
            t.path().join("agent/objects/info/alternates"),
            format!("{}\n", t.path().join("host/.git/objects").display()),
        )
        .unwrap();
        (t, host, agent)
    }

    /// `n` commits in the agent's repository on the host's HEAD, each adding a file.
    fn agent_commits(host: &Repository, agent: &Repository, n: usize) -> Oid {
        let sig = git2::Signature::now("t", "t@t").unwrap();
        let mut parent = agent.find_commit(host.head().unwrap().target().unwrap()).unwrap();
        for i in 0..n {
            let mut b = agent.treebuilder(Some(&parent.tree().unwrap())).unwrap();
            b.insert(format!("f{i}"), agent.blob(format!("{i}\n").as_bytes()).unwrap(), 0o100755).unwrap();
            let tree = agent.find_tree(b.write().unwrap()).unwrap();
            let id = agent.commit(None, &sig, &sig, &format!("c{i}"), &tree, &[&parent]).unwrap();
            parent = agent.find_commit(id).unwrap();
        }
        parent.id()
    }

    #[test]
    fn the_agent_s_new_commits_are_counted_down_to_the_host_s_and_their_files_read() {
        let (t, host, agent) = host_and_agent();
        let tip = agent_commits(&host, &agent, 3);
        let peek = Peek::new(&host, Some(Dir::open(&t.path().join("agent/objects")).unwrap())).unwrap();
        let base = host.head().unwrap().target().unwrap();
        assert_eq!(peek.unsynced(tip).unwrap(), Unsynced::Counted { commits: 3, joins: vec![base] });
        assert_eq!(peek.unsynced(base).unwrap(), Unsynced::Counted { commits: 0, joins: vec![base] });
        let files = peek.commit_files(tip).unwrap();
        let mut names: Vec<&[u8]> = files.keys().map(Vec::as_slice).collect();
        names.sort();
        assert_eq!(names, [&b"a.txt"[..], b"f0", b"f1", b"f2"]);
        assert_eq!(files[&b"f1"[..]].0, 0o100755);
    }

    #[test]
    fn a_long_history_stops_the_walk_and_a_packed_or_missing_commit_is_unreadable() {
        let (t, host, agent) = host_and_agent();
        let tip = agent_commits(&host, &agent, MAX_UNSYNCED + 1);
        let objects = || Some(Dir::open(&t.path().join("agent/objects")).unwrap());
        assert_eq!(Peek::new(&host, objects()).unwrap().unsynced(tip).unwrap(), Unsynced::More);
        let missing = Oid::from_str(B).unwrap();
        let e = Peek::new(&host, objects()).unwrap().unsynced(missing).unwrap_err();
        assert!(e.contains("not among the agent's loose objects"), "{e}");
        // A ref naming a blob of the agent's.
        let blob = agent.blob(b"not a commit").unwrap();
        let e = Peek::new(&host, objects()).unwrap().unsynced(blob).unwrap_err();
        assert!(e.contains("is a blob"), "{e}");
    }
}
