//! The check pass: everything the tips reach that the host lacks, read once,
//! checked against its id and by git's fsck rules (`super::super::fsck`),
//! with the bounds on size, count, tree depth and path length; the host's
//! own objects only typed (and its trees measured where an agent's tree holds
//! them). Iterative, each object visited once: linear in what it reads.

use std::collections::{HashMap, HashSet};

use git2::{ObjectType, Odb, OdbLookupFlags, Oid};

use super::super::fsck::{self, EntryKind, Special};
use super::pack::Spool;
use super::store::{AgentObjects, MAX_OBJECT_BYTES};

/// The most objects one import brings: a hundred thousand commits with a
/// tree and a blob each fit, and so does a large project's whole tree; the
/// check pass keeps about a hundred bytes for each.
pub const MAX_IMPORT_OBJECTS: usize = 500_000;
/// The most one import reads of the agent's objects.
const MAX_IMPORT_BYTES: usize = 4 << 30;
/// git's `core.maxTreeDepth` default (git-compat-util.h): git refuses to
/// walk a tree nested deeper (`ls-tree -r`, `archive`, `rev-list --objects`).
pub const MAX_TREE_DEPTH: u32 = 2048;
/// The longest path git can check out (Linux's PATH_MAX, with its NUL).
pub const MAX_PATH_BYTES: u32 = 4095;

/// What the check pass found.
#[derive(Debug, Default)]
pub struct Found {
    /// How many of the agent's objects the host lacks.
    pub objects: usize,
    /// The commits among them, each with the first line of its message.
    pub commits: Vec<(Oid, String)>,
    /// The jj change id each such commit carries.
    pub change_ids: Vec<(Oid, String)>,
}

/// How deep a tree goes and its longest path.
#[derive(Debug, Clone, Copy)]
struct Shape {
    height: u32,
    longest: u32,
}

#[derive(Debug, Clone, Copy)]
struct Node {
    kind: ObjectType,
    /// For trees whose shape is known (every tree of the agent's, and the
    /// host's trees an agent's tree holds).
    shape: Option<Shape>,
}

enum Frame {
    /// Object `id` must be of kind `want`; `shaped`: a tree whose shape is needed.
    Visit { id: Oid, want: ObjectType, shaped: bool },
    /// The tree `id` once its subtrees are measured: `leaves` its longest
    /// entry that is no tree, `subtrees` each with its name's length.
    Close { id: Oid, agent: bool, leaves: u32, subtrees: Vec<(Oid, u32)> },
}

pub struct Walk<'a> {
    agent: &'a AgentObjects,
    host: &'a Odb<'a>,
    nodes: HashMap<Oid, Node>,
    /// Trees being walked (an ancestor of what is visited).
    open: HashSet<Oid>,
    stack: Vec<Frame>,
    bytes: usize,
    gitmodules: HashSet<Oid>,
    gitattributes: HashSet<Oid>,
    /// Where each new object goes once checked, when importing.
    spool: Option<&'a mut Spool>,
    found: Found,
}

impl<'a> Walk<'a> {
    /// A walk that checks only, or (with `spool`) also spools what passed.
    pub fn new(agent: &'a AgentObjects, host: &'a Odb<'a>, spool: Option<&'a mut Spool>) -> Walk<'a> {
        let (nodes, open, stack) = (HashMap::new(), HashSet::new(), Vec::new());
        let (gitmodules, gitattributes) = (HashSet::new(), HashSet::new());
        let found = Found::default();
        Walk { agent, host, nodes, open, stack, bytes: 0, gitmodules, gitattributes, spool, found }
    }

    /// Checks everything `tips` (commits) reach that the host lacks.
    pub fn run(mut self, tips: &[Oid]) -> Result<Found, String> {
        for tip in tips {
            self.check_tip(*tip)?;
            self.stack.push(Frame::Visit { id: *tip, want: ObjectType::Commit, shaped: false });
            while let Some(frame) = self.stack.pop() {
                match frame {
                    Frame::Visit { id, want, shaped } => self.visit(id, want, shaped)?,
                    Frame::Close { id, agent, leaves, subtrees } => self.close(id, agent, leaves, &subtrees)?,
                }
            }
        }
        self.check_special_blobs()?;
        Ok(self.found)
    }

    /// A tip must be a commit: a ref of the agent's naming anything else is
    /// refused with what it names.
    fn check_tip(&self, tip: Oid) -> Result<(), String> {
        let kind = match self.host.exists_ext(tip, OdbLookupFlags::NO_REFRESH) {
            true => self.host.read_header(tip).map(|(_, kind)| kind).ok(),
            false => self.agent.read(tip)?.map(|(kind, _)| kind),
        };
        match kind {
            Some(ObjectType::Commit) | None => Ok(()),
            Some(kind) => Err(format!("the agent's ref points at a {kind} ({tip}), not a commit")),
        }
    }

    fn visit(&mut self, id: Oid, want: ObjectType, shaped: bool) -> Result<(), String> {
        if let Some(node) = self.nodes.get(&id) {
            expect_kind(id, node.kind, want)?;
            if !(shaped && node.shape.is_none()) {
                return Ok(());
            }
        }
        if self.open.contains(&id) {
            return Err(format!("tree {id} contains itself"));
        }
        if self.host.exists_ext(id, OdbLookupFlags::NO_REFRESH) {
            return match want == ObjectType::Tree && shaped {
                true => self.open_host_tree(id),
                false => self.type_host_object(id, want),
            };
        }
        let (kind, data) = self.agent.read(id)?.ok_or_else(|| {
            format!("{id} is in neither the agent's repository nor the host's (a {want} belongs there)")
        })?;
        expect_kind(id, kind, want)?;
        self.count(data.len())?;
        let refused = |why: String| format!("object {id} refused: {why}");
        match kind {
            ObjectType::Commit => self.open_commit(id, &data).map_err(refused)?,
            ObjectType::Tree => self.open_agent_tree(id, &data).map_err(refused)?,
            _ => {
                self.nodes.insert(id, Node { kind, shape: None });
            }
        }
        match &mut self.spool {
            Some(spool) => spool.add(kind, &data).map_err(|e| format!("spooling the pack: {e}")),
            None => Ok(()),
        }
    }

    /// Counts an object of the agent's the host lacks, within the bounds.
    fn count(&mut self, size: usize) -> Result<(), String> {
        self.bytes += size;
        if self.bytes > MAX_IMPORT_BYTES {
            return Err(format!(
                "the agent's new objects come to more than {} GiB, the most one import brings",
                MAX_IMPORT_BYTES >> 30
            ));
        }
        if self.found.objects >= MAX_IMPORT_OBJECTS {
            return Err(format!(
                "the agent's new objects are more than {MAX_IMPORT_OBJECTS}, the most one import brings"
            ));
        }
        self.found.objects += 1;
        Ok(())
    }

    fn type_host_object(&mut self, id: Oid, want: ObjectType) -> Result<(), String> {
        let (_, kind) = self.host.read_header(id).map_err(|e| format!("reading {id}: {}", e.message()))?;
        expect_kind(id, kind, want)?;
        self.nodes.insert(id, Node { kind, shape: None });
        Ok(())
    }

    fn open_commit(&mut self, id: Oid, data: &[u8]) -> Result<(), String> {
        let commit = fsck::check_commit(data)?;
        self.found.commits.push((id, summary(data)));
        if let Some(change) = commit.change_id {
            self.found.change_ids.push((id, change));
        }
        self.nodes.insert(id, Node { kind: ObjectType::Commit, shape: None });
        for tree in std::iter::once(commit.tree).chain(commit.jj_trees) {
            self.stack.push(Frame::Visit { id: tree, want: ObjectType::Tree, shaped: false });
        }
        for parent in commit.parents {
            self.stack.push(Frame::Visit { id: parent, want: ObjectType::Commit, shaped: false });
        }
        Ok(())
    }

    fn open_agent_tree(&mut self, id: Oid, data: &[u8]) -> Result<(), String> {
        let entries = fsck::check_tree(data)?;
        let mut leaves = 0;
        let mut subtrees = Vec::new();
        let mut visits = Vec::new();
        for entry in entries {
            let name_len = entry.name.len() as u32;
            match entry.special {
                Special::Gitmodules => self.gitmodules.insert(entry.id),
                Special::Gitattributes => self.gitattributes.insert(entry.id),
                Special::None => false,
            };
            match entry.kind {
                EntryKind::Dir => {
                    subtrees.push((entry.id, name_len));
                    visits.push(Frame::Visit { id: entry.id, want: ObjectType::Tree, shaped: true });
                }
                EntryKind::File | EntryKind::Symlink => {
                    leaves = leaves.max(name_len);
                    visits.push(Frame::Visit { id: entry.id, want: ObjectType::Blob, shaped: false });
                }
                // A submodule's commit lives in another repository.
                EntryKind::Submodule => leaves = leaves.max(name_len),
            }
        }
        self.open.insert(id);
        self.stack.push(Frame::Close { id, agent: true, leaves, subtrees });
        self.stack.extend(visits);
        Ok(())
    }

    /// Measures a tree of the host's that an agent's tree holds: its shape
    /// adds to the agent's tree's (its names are the host's own business).
    fn open_host_tree(&mut self, id: Oid) -> Result<(), String> {
        let object = self.host.read(id).map_err(|e| format!("reading {id}: {}", e.message()))?;
        expect_kind(id, object.kind(), ObjectType::Tree)?;
        let (mut leaves, mut subtrees) = (0, Vec::new());
        for (is_dir, name_len, child) in host_tree_entries(object.data()).ok_or(format!("tree {id} is malformed"))? {
            match is_dir {
                true => subtrees.push((child, name_len)),
                false => leaves = leaves.max(name_len),
            }
        }
        self.open.insert(id);
        let visits: Vec<Frame> = subtrees
            .iter()
            .map(|(child, _)| Frame::Visit { id: *child, want: ObjectType::Tree, shaped: true })
            .collect();
        self.stack.push(Frame::Close { id, agent: false, leaves, subtrees });
        self.stack.extend(visits);
        Ok(())
    }

    /// A tree's shape from its subtrees'; an agent's tree within git's bounds.
    fn close(&mut self, id: Oid, agent: bool, leaves: u32, subtrees: &[(Oid, u32)]) -> Result<(), String> {
        let mut shape = Shape { height: 0, longest: leaves };
        for (child, name_len) in subtrees {
            let child = self.nodes.get(child).and_then(|n| n.shape).ok_or(format!("tree {child} was not measured"))?;
            shape.height = shape.height.max(child.height + 1);
            let below = if child.longest > 0 { child.longest + 1 } else { 0 };
            shape.longest = shape.longest.max(name_len + below);
        }
        self.open.remove(&id);
        self.nodes.insert(id, Node { kind: ObjectType::Tree, shape: Some(shape) });
        if agent && shape.height > MAX_TREE_DEPTH {
            return Err(format!(
                "object {id} refused: trees nested {} deep, deeper than git's core.maxTreeDepth ({MAX_TREE_DEPTH})",
                shape.height
            ));
        }
        if agent && shape.longest > MAX_PATH_BYTES {
            return Err(format!(
                "object {id} refused: a path of {} bytes, longer than the {MAX_PATH_BYTES} git can check out",
                shape.longest
            ));
        }
        Ok(())
    }

    /// Checks the content of every blob an agent's tree names `.gitmodules`
    /// or `.gitattributes` (in any spelling), wherever it lives (git's
    /// `fsck_finish`).
    fn check_special_blobs(&self) -> Result<(), String> {
        let checks: [(&HashSet<Oid>, BlobCheck); 2] =
            [(&self.gitmodules, fsck::check_gitmodules), (&self.gitattributes, fsck::check_gitattributes)];
        for (blobs, check) in checks {
            for id in blobs {
                let data = self.blob(*id)?;
                check(&data).map_err(|why| format!("object {id} refused: {why}"))?;
            }
        }
        Ok(())
    }

    /// The blob `id`, the agent's or the host's, bounded in size.
    fn blob(&self, id: Oid) -> Result<Vec<u8>, String> {
        if let Some((kind, data)) = self.agent.read(id)? {
            expect_kind(id, kind, ObjectType::Blob)?;
            return Ok(data);
        }
        let (size, kind) = self.host.read_header(id).map_err(|e| format!("reading {id}: {}", e.message()))?;
        expect_kind(id, kind, ObjectType::Blob)?;
        if size > MAX_OBJECT_BYTES {
            return Err(format!(
                "object {id} is {} MiB, more than the {} MiB forage reads",
                size >> 20,
                MAX_OBJECT_BYTES >> 20
            ));
        }
        Ok(self.host.read(id).map_err(|e| format!("reading {id}: {}", e.message()))?.data().to_vec())
    }
}

/// A check of a blob's content.
type BlobCheck = fn(&[u8]) -> Result<(), String>;

fn expect_kind(id: Oid, kind: ObjectType, want: ObjectType) -> Result<(), String> {
    match kind == want {
        true => Ok(()),
        false => Err(format!("object {id} refused: it is a {kind}, where a {want} belongs")),
    }
}

/// A host tree's entries, read leniently (the host's trees are the user's):
/// whether each is a tree, its name's length, its id.
fn host_tree_entries(mut data: &[u8]) -> Option<Vec<(bool, u32, Oid)>> {
    let mut out = Vec::new();
    while !data.is_empty() {
        let space = data.iter().position(|b| *b == b' ')?;
        let is_dir = matches!(&data[..space], b"40000" | b"040000");
        let rest = &data[space + 1..];
        let nul = rest.iter().position(|b| *b == 0)?;
        let id = Oid::from_bytes(rest.get(nul + 1..nul + 21)?).ok()?;
        out.push((is_dir, nul as u32, id));
        data = &rest[nul + 21..];
    }
    Some(out)
}

/// The first line of a commit's message.
fn summary(commit: &[u8]) -> String {
    let text = String::from_utf8_lossy(commit);
    text.split_once("\n\n").map(|(_, m)| m.lines().next().unwrap_or("").to_owned()).unwrap_or_default()
}
