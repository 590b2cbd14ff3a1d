//! A git tree read one level at a time, as a path asks for it: what a
//! copy-on-write sandbox's DIRTY count needs of its base tree and of the
//! agent's HEAD, in O(changed files) instead of O(repository)
//! (`worktree_files::changed_layered`).
//!
//! The trees come through a reader (`TreeReader`): the host's repository, or
//! `Peek`, which reads the agent's loose objects as the hostile data they are.
//! Every tree read counts against `MAX_TREE_ENTRIES`, however the agent
//! shaped its trees.

use std::cell::RefCell;
use std::collections::HashMap;

use git2::{Oid, Repository};

/// A tree's mode in its parent's entry.
pub const MODE_TREE: u32 = 0o040000;

/// The most tree entries one lookup reads in all.
const MAX_TREE_ENTRIES: usize = 2_000_000;

/// A tree's entries: (mode, name, id).
pub type Entries = Vec<(u32, Vec<u8>, Oid)>;

/// An entry of one side of a difference, if that side has one: (mode, id).
type Side = Option<(u32, Oid)>;

/// Reads one tree's entries by id.
pub type TreeReader<'r> = Box<dyn Fn(Oid) -> Result<Entries, String> + 'r>;

/// A tree, read lazily and each level once.
pub struct TreeLookup<'r> {
    root: Oid,
    read: TreeReader<'r>,
    trees: RefCell<HashMap<Oid, std::rc::Rc<Entries>>>,
    entries_read: std::cell::Cell<usize>,
}

impl<'r> TreeLookup<'r> {
    pub fn new(root: Oid, read: TreeReader<'r>) -> TreeLookup<'r> {
        TreeLookup { root, read, trees: RefCell::default(), entries_read: std::cell::Cell::new(0) }
    }

    /// A tree of the host's repository.
    pub fn in_host(repo: &'r Repository, root: Oid) -> TreeLookup<'r> {
        let read = move |id: Oid| -> Result<Entries, String> {
            let tree = repo.find_tree(id).map_err(|e| e.message().to_owned())?;
            Ok(tree.iter().map(|e| (e.filemode() as u32, e.name_bytes().to_vec(), e.id())).collect())
        };
        TreeLookup::new(root, Box::new(read))
    }

    #[cfg(test)]
    pub fn root(&self) -> Oid {
        self.root
    }

    /// The entries of tree `id`.
    pub fn entries(&self, id: Oid) -> Result<std::rc::Rc<Entries>, String> {
        if let Some(entries) = self.trees.borrow().get(&id) {
            return Ok(entries.clone());
        }
        let entries = std::rc::Rc::new((self.read)(id)?);
        let read = self.entries_read.get() + entries.len();
        if read > MAX_TREE_ENTRIES {
            return Err(format!("its trees have more than {MAX_TREE_ENTRIES} entries"));
        }
        self.entries_read.set(read);
        self.trees.borrow_mut().insert(id, entries.clone());
        Ok(entries)
    }

    /// The entry at `path` (`a/b/c`): (mode, id); `MODE_TREE` for a directory.
    pub fn get(&self, path: &[u8]) -> Result<Option<(u32, Oid)>, String> {
        let mut at = (MODE_TREE, self.root);
        for name in path.split(|b| *b == b'/') {
            if at.0 != MODE_TREE {
                return Ok(None);
            }
            let entries = self.entries(at.1)?;
            match entries.iter().find(|(_, n, _)| n == name) {
                Some((mode, _, id)) => at = (*mode, *id),
                None => return Ok(None),
            }
        }
        Ok(Some(at))
    }

    /// The file (not tree) at `path`, if there is one.
    pub fn file(&self, path: &[u8]) -> Result<Option<(u32, Oid)>, String> {
        Ok(self.get(path)?.filter(|(mode, _)| *mode != MODE_TREE))
    }

    pub fn is_dir(&self, path: &[u8]) -> Result<bool, String> {
        Ok(self.get(path)?.is_some_and(|(mode, _)| mode == MODE_TREE))
    }

    /// Every file at or below `path`: the file itself, or a directory's.
    pub fn files_under(&self, path: &[u8]) -> Result<Vec<(Vec<u8>, u32, Oid)>, String> {
        let mut out = Vec::new();
        match self.get(path)? {
            None => {}
            Some((MODE_TREE, id)) => self.walk(id, path.to_vec(), &mut |p, mode, id| out.push((p, mode, id)))?,
            Some((mode, id)) => out.push((path.to_vec(), mode, id)),
        }
        Ok(out)
    }

    /// Calls `each` for every file below tree `id`, whose path is `prefix`.
    fn walk(&self, id: Oid, prefix: Vec<u8>, each: &mut dyn FnMut(Vec<u8>, u32, Oid)) -> Result<(), String> {
        let mut stack = vec![(id, prefix)];
        while let Some((id, prefix)) = stack.pop() {
            for (mode, name, child) in self.entries(id)?.iter() {
                let path = join(&prefix, name);
                if *mode == MODE_TREE {
                    stack.push((*child, path));
                } else {
                    each(path, *mode, *child);
                }
            }
        }
        Ok(())
    }
}

/// The paths of files that differ between the trees of `a` and `b` (in one,
/// not the other, or with another mode or id): O(the difference), since a
/// subtree with the same id on both sides is not read.
pub fn differing_files(a: &TreeLookup<'_>, b: &TreeLookup<'_>) -> Result<Vec<Vec<u8>>, String> {
    let mut out = Vec::new();
    let mut stack: Vec<(Option<Oid>, Option<Oid>, Vec<u8>)> = vec![(Some(a.root), Some(b.root), Vec::new())];
    while let Some((ta, tb, prefix)) = stack.pop() {
        if ta == tb {
            continue;
        }
        let level = |side: &TreeLookup<'_>, tree: Option<Oid>| -> Result<HashMap<Vec<u8>, (u32, Oid)>, String> {
            Ok(match tree {
                Some(id) => side.entries(id)?.iter().map(|(m, n, i)| (n.clone(), (*m, *i))).collect(),
                None => HashMap::new(),
            })
        };
        let (ea, mut eb) = (level(a, ta)?, level(b, tb)?);
        let mut both: Vec<(Vec<u8>, Side, Side)> = ea
            .into_iter()
            .map(|(name, e)| {
                let other = eb.remove(&name);
                (name, Some(e), other)
            })
            .collect();
        both.extend(eb.into_iter().map(|(name, e)| (name, None, Some(e))));
        for (name, ea, eb) in both {
            if ea == eb {
                continue;
            }
            let path = join(&prefix, &name);
            let tree_of = |e: Side| e.filter(|(m, _)| *m == MODE_TREE).map(|(_, id)| id);
            let file_of = |e: Side| e.filter(|(m, _)| *m != MODE_TREE);
            if file_of(ea) != file_of(eb) {
                out.push(path.clone());
            }
            // A tree on one side only: every file below it differs.
            if tree_of(ea).is_some() || tree_of(eb).is_some() {
                stack.push((tree_of(ea), tree_of(eb), path));
            }
        }
    }
    Ok(out)
}

fn join(prefix: &[u8], name: &[u8]) -> Vec<u8> {
    let mut path = prefix.to_vec();
    if !path.is_empty() {
        path.push(b'/');
    }
    path.extend_from_slice(name);
    path
}
