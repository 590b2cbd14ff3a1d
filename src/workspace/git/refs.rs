//! The refs of the agent's private repository, read on the host as untrusted data:
//! only the files ref backend (loose refs and `packed-refs`), every file bounded
//! in size, every name checked, no symlink followed, and nothing but 40-hex object
//! ids accepted as targets. What cannot be read this way counts as absent.

use std::collections::BTreeMap;

use git2::Oid;

use super::super::untrusted::{Dir, Kind};
use crate::error::{Error, Result};

const MAX_LOOSE_REF: u64 = 4096;
const MAX_PACKED_REFS: u64 = 64 << 20;
const MAX_REFLOG: u64 = 16 << 20;
const MAX_REFS: usize = 100_000;
const MAX_DEPTH: usize = 32;

/// Where the private HEAD is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Head {
    /// On `refs/heads/<name>` (which may not exist yet).
    Branch(String),
    Detached(Oid),
    /// Missing or unreadable: the agent broke it.
    Unknown,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrivateRefs {
    pub head: Head,
    /// Local branches by short name.
    pub branches: BTreeMap<String, Oid>,
    /// Every stash entry, newest first (`refs/stash` and its reflog).
    pub stash: Vec<Oid>,
}

fn err(e: impl std::fmt::Display) -> Error {
    Error::workspace(format!("reading the agent's repository: {e}"))
}

/// A full object id: exactly 40 hex digits (git2 would also take a prefix).
pub fn parse_oid(text: &str) -> Option<Oid> {
    let text = text.strip_suffix('\n').unwrap_or(text);
    (text.len() == 40 && text.bytes().all(|b| b.is_ascii_hexdigit())).then(|| Oid::from_str(text).ok()).flatten()
}

/// Every ref of the repository `git` (packed, then loose), by full name, as
/// read by the rules above.
pub fn read_all(git: &Dir) -> Result<BTreeMap<String, Oid>> {
    let mut all: BTreeMap<String, Oid> = BTreeMap::new();
    if let Some(packed) = git.read("packed-refs", MAX_PACKED_REFS).map_err(err)? {
        for line in String::from_utf8_lossy(&packed).lines() {
            if line.starts_with('#') || line.starts_with('^') {
                continue;
            }
            if let Some((id, name)) = line.split_once(' ') {
                if let Some(id) = parse_oid(id) {
                    if git2::Reference::is_valid_name(name) && all.len() < MAX_REFS {
                        all.insert(name.to_owned(), id);
                    }
                }
            }
        }
    }
    // Loose refs win over packed ones, as in git.
    if let Some(refs) = git.dir("refs").map_err(err)? {
        read_loose(&refs, "refs", 0, &mut all)?;
    }
    Ok(all)
}

impl PrivateRefs {
    pub fn read(git: &Dir) -> Result<PrivateRefs> {
        let all = read_all(git)?;
        let head = match git.read("HEAD", MAX_LOOSE_REF).map_err(err)? {
            Some(bytes) => {
                let text = String::from_utf8_lossy(&bytes);
                match text.trim_end().strip_prefix("ref: refs/heads/") {
                    Some(b) if git2::Reference::is_valid_name(&format!("refs/heads/{b}")) => Head::Branch(b.to_owned()),
                    Some(_) => Head::Unknown,
                    None => parse_oid(text.trim_end()).map(Head::Detached).unwrap_or(Head::Unknown),
                }
            }
            None => Head::Unknown,
        };
        let mut stash: Vec<Oid> = all.get("refs/stash").copied().into_iter().collect();
        if let Some(logs) = git.dir_path("logs/refs").map_err(err)? {
            if let Some(log) = logs.read("stash", MAX_REFLOG).map_err(err)? {
                // `<old> <new> <who> <when>\t<message>`, oldest first. The
                // agent chooses how many lines: a set keeps this linear.
                let mut seen: std::collections::HashSet<Oid> = stash.iter().copied().collect();
                for line in String::from_utf8_lossy(&log).lines().rev() {
                    if stash.len() >= MAX_REFS {
                        break;
                    }
                    if let Some(id) = line.split(' ').nth(1).and_then(parse_oid) {
                        if seen.insert(id) {
                            stash.push(id);
                        }
                    }
                }
            }
        }
        let branches =
            all.iter().filter_map(|(n, id)| n.strip_prefix("refs/heads/").map(|b| (b.to_owned(), *id))).collect();
        Ok(PrivateRefs { head, branches, stash })
    }
}

fn read_loose(dir: &Dir, prefix: &str, depth: usize, out: &mut BTreeMap<String, Oid>) -> Result<()> {
    if depth > MAX_DEPTH {
        return Ok(());
    }
    for (name, kind) in dir.entries().map_err(err)? {
        let Some(name) = name.to_str() else { continue };
        let full = format!("{prefix}/{name}");
        match kind {
            Kind::Dir => {
                if let Some(sub) = dir.dir(name).map_err(err)? {
                    read_loose(&sub, &full, depth + 1, out)?;
                }
            }
            Kind::File if git2::Reference::is_valid_name(&full) && out.len() < MAX_REFS => {
                // A loose ref that is not a plain id (symbolic, or garbage) is skipped.
                let content = dir.read(name, MAX_LOOSE_REF).ok().flatten();
                match content.as_deref().and_then(|c| std::str::from_utf8(c).ok()).and_then(parse_oid) {
                    Some(id) => {
                        out.insert(full, id);
                    }
                    None => {
                        out.remove(&full);
                    }
                }
            }
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "1111111111111111111111111111111111111111";
    const B: &str = "2222222222222222222222222222222222222222";
    const C: &str = "3333333333333333333333333333333333333333";

    #[test]
    fn reads_loose_packed_head_and_stash_and_nothing_else() {
        let t = tempfile::tempdir().unwrap();
        let g = t.path();
        std::fs::create_dir_all(g.join("refs/heads/feat")).unwrap();
        std::fs::create_dir_all(g.join("logs/refs")).unwrap();
        std::fs::create_dir_all(t.path().join("outside")).unwrap();
        std::fs::write(t.path().join("outside/x"), format!("{C}\n")).unwrap();
        std::fs::write(g.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        std::fs::write(g.join("refs/heads/main"), format!("{A}\n")).unwrap();
        std::fs::write(g.join("refs/heads/feat/x"), format!("{B}\n")).unwrap();
        std::fs::write(g.join("refs/heads/short"), "1234\n").unwrap();
        std::fs::write(g.join("refs/heads/huge"), "x".repeat(10_000)).unwrap();
        std::os::unix::fs::symlink(t.path().join("outside"), g.join("refs/heads/linked")).unwrap();
        std::os::unix::fs::symlink(t.path().join("outside/x"), g.join("refs/heads/linkfile")).unwrap();
        std::fs::write(
            g.join("packed-refs"),
            format!("# pack-refs\n{C} refs/heads/packed\n{B} refs/heads/main\n{A} refs/stash\n^{B}\n"),
        )
        .unwrap();
        std::fs::write(
            g.join("logs/refs/stash"),
            format!("{} {C} x <x> 1 +0000\tone\n{C} {A} x <x> 2 +0000\ttwo\n", "0".repeat(40)),
        )
        .unwrap();

        let refs = PrivateRefs::read(&Dir::open(g).unwrap()).unwrap();
        assert_eq!(refs.head, Head::Branch("main".into()));
        let names: Vec<&str> = refs.branches.keys().map(String::as_str).collect();
        assert_eq!(names, ["feat/x", "main", "packed"]);
        assert_eq!(refs.branches["main"], Oid::from_str(A).unwrap(), "loose wins over packed");
        assert_eq!(refs.stash, [Oid::from_str(A).unwrap(), Oid::from_str(C).unwrap()]);

        std::fs::write(g.join("HEAD"), format!("{B}\n")).unwrap();
        assert_eq!(PrivateRefs::read(&Dir::open(g).unwrap()).unwrap().head, Head::Detached(Oid::from_str(B).unwrap()));
        std::fs::write(g.join("HEAD"), "ref: refs/heads/../../etc\n").unwrap();
        assert_eq!(PrivateRefs::read(&Dir::open(g).unwrap()).unwrap().head, Head::Unknown);
        assert_eq!(parse_oid("abc"), None);
    }
}
