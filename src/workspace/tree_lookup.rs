//! A git tree read one level at a time, as a path asks for it: what a
//! copy-on-write sandbox's DIRTY count needs of its base tree and of the
//! agent's HEAD, in O(changed files) instead of O(repository)
//! (`worktree_files::changed_layered`).
//!
//! The trees come through a reader (`TreeReader`): the host's repository, or
//! `Peek`, which reads the agent's loose objects as the hostile data they are.
//! So, however the agent shaped its trees: every tree read counts against
//! `MAX_TREE_ENTRIES`; so does every entry a walk or a diff visits (a tree
//! whose entries all name one subtree, nested, is read once but would be
//! visited without end); and a lookup by name is a hash lookup, never a scan
//! of a tree the agent made as wide as it could.

use std::cell::RefCell;
use std::collections::HashMap;

use git2::{Oid, Repository};

/// A tree's mode in its parent's entry.
pub const MODE_TREE: u32 = 0o040000;

/// The most tree entries one lookup reads, and visits in its walks and
/// diffs, in all.
const MAX_TREE_ENTRIES: usize = 2_000_000;

/// A tree's entries: (mode, name, id).
pub type Entries = Vec<(u32, Vec<u8>, Oid)>;

/// An entry of one side of a difference, if that side has one: (mode, id).
type Side = Option<(u32, Oid)>;

/// Reads one tree's entries by id.
pub type TreeReader<'r> = Box<dyn Fn(Oid) -> Result<Entries, String> + 'r>;

/// One tree as read: its entries, and where each name is among them.
pub struct Level {
    pub entries: Entries,
    by_name: HashMap<Vec<u8>, usize>,
}

/// A tree, read lazily and each level once.
pub struct TreeLookup<'r> {
    root: Oid,
    read: TreeReader<'r>,
    trees: RefCell<HashMap<Oid, std::rc::Rc<Level>>>,
    entries_read: std::cell::Cell<usize>,
    entries_visited: std::cell::Cell<usize>,
}

impl<'r> TreeLookup<'r> {
    pub fn new(root: Oid, read: TreeReader<'r>) -> TreeLookup<'r> {
        TreeLookup {
            root,
            read,
            trees: RefCell::default(),
            entries_read: std::cell::Cell::new(0),
            entries_visited: std::cell::Cell::new(0),
        }
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

    /// Tree `id`, read once.
    fn level(&self, id: Oid) -> Result<std::rc::Rc<Level>, String> {
        if let Some(level) = self.trees.borrow().get(&id) {
            return Ok(level.clone());
        }
        let entries = (self.read)(id)?;
        let read = self.entries_read.get() + entries.len();
        if read > MAX_TREE_ENTRIES {
            return Err(format!("its trees have more than {MAX_TREE_ENTRIES} entries"));
        }
        self.entries_read.set(read);
        let by_name = entries.iter().enumerate().map(|(i, (_, name, _))| (name.clone(), i)).collect();
        let level = std::rc::Rc::new(Level { entries, by_name });
        self.trees.borrow_mut().insert(id, level.clone());
        Ok(level)
    }

    /// Tree `id`, to visit all its entries (a walk, a diff): counted.
    pub fn visit(&self, id: Oid) -> Result<std::rc::Rc<Level>, String> {
        let level = self.level(id)?;
        let visited = self.entries_visited.get() + level.entries.len();
        if visited > MAX_TREE_ENTRIES {
            return Err(format!("walking its trees visits more than {MAX_TREE_ENTRIES} entries"));
        }
        self.entries_visited.set(visited);
        Ok(level)
    }

    /// The entry at `path` (`a/b/c`): (mode, id); `MODE_TREE` for a directory.
    /// The empty path is the root.
    pub fn get(&self, path: &[u8]) -> Result<Option<(u32, Oid)>, String> {
        let mut at = (MODE_TREE, self.root);
        for name in path.split(|b| *b == b'/').filter(|_| !path.is_empty()) {
            if at.0 != MODE_TREE {
                return Ok(None);
            }
            let level = self.level(at.1)?;
            match level.by_name.get(name) {
                Some(i) => at = (level.entries[*i].0, level.entries[*i].2),
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
            for (mode, name, child) in &self.visit(id)?.entries {
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
                Some(id) => side.visit(id)?.entries.iter().map(|(m, n, i)| (n.clone(), (*m, *i))).collect(),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// An agent's trees: `depth` levels, each a tree of `width` entries that
    /// all name the one tree below, over one file.
    fn nested(depth: usize, width: usize) -> (Oid, HashMap<Oid, Entries>) {
        let mut trees = HashMap::new();
        let mut below = (0o100644, Oid::from_bytes(&[1; 20]).unwrap());
        for level in 0..depth {
            let id = Oid::from_bytes(&[level as u8 + 2; 20]).unwrap();
            let entries = (0..width).map(|i| (below.0, format!("e{i}").into_bytes(), below.1)).collect();
            trees.insert(id, entries);
            below = (MODE_TREE, id);
        }
        (below.1, trees)
    }

    #[test]
    fn trees_that_name_one_subtree_again_and_again_are_visited_only_so_far() {
        // 1000^4 paths from four trees of 1000 entries.
        let (root, trees) = nested(4, 1000);
        let reader = |id: Oid| trees.get(&id).cloned().ok_or_else(|| format!("no tree {id}"));
        let lookup = TreeLookup::new(root, Box::new(reader));
        assert_eq!(lookup.get(b"e7/e8/e9/e999").unwrap(), Some((0o100644, Oid::from_bytes(&[1; 20]).unwrap())));
        assert_eq!(lookup.get(b"e7/nothing").unwrap(), None);
        assert!(lookup.files_under(b"").unwrap_err().contains("visits more than"));
        let (empty, none) = nested(1, 0);
        let empty_reader = |id: Oid| none.get(&id).cloned().ok_or_else(|| format!("no tree {id}"));
        let empty = TreeLookup::new(empty, Box::new(empty_reader));
        assert!(differing_files(&lookup, &empty).unwrap_err().contains("visits more than"));
    }
}
