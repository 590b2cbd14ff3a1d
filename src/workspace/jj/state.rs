//! What jj inside the container says about the agent's work, parsed on the host
//! as untrusted text: the agent's config can make jj print anything, so only
//! well-formed lines count, their number is bounded, and every id they name is
//! verified when it is imported. A lie can only misplace the agent's own work.

use std::collections::{HashMap, HashSet};

use git2::{Oid, Repository};

use super::ownership::ChangeId;
use crate::workspace::git::refs::parse_oid;

/// Lines of the state a run of jj inside may print, at most.
const MAX_COMMITS: usize = 100_000;

/// One commit of the agent's, as the state command printed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateCommit {
    pub id: Oid,
    pub parents: Vec<Oid>,
    /// The workspace's working-copy commit (`@`).
    pub working_copy: bool,
    /// Not both empty and undescribed: something the agent did.
    pub work: bool,
}

/// The agent's commits not in the host's history, and when jj snapshotted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentState {
    /// Newest first, as `jj log` prints them.
    pub commits: Vec<StateCommit>,
    /// Taken on the host just before jj ran: files changed since may be newer
    /// than the snapshot.
    pub since: (i64, i64),
}

/// The shell script run inside (in /workspace, as the user): one `jj log`,
/// which first snapshots the working copy (with no size limit), printing one
/// line per commit of the agent's. `hidden` is the revset of what the agent did
/// not make (the host's history). With `import_host_view` (for `sync`), a
/// `jj git import` first shows jj inside the host's bookmarks as last refreshed;
/// otherwise one jj process, because each costs a start-up and the first in a
/// new container also reads its binary cold.
pub fn state_script(hidden: &str, import_host_view: bool) -> String {
    let revset = format!("(all() ~ ::({hidden})) | @");
    // Methods of `self`, which the agent's template aliases cannot redefine as
    // they can the bare keywords.
    let template = r#""forage-state " ++ self.commit_id() ++ " " ++ self.parents().map(|c| c.commit_id()).join(",") ++ " " ++ if(self.current_working_copy(), "@", "-") ++ " " ++ if(self.empty() && !self.description(), "e", "w") ++ "\n""#;
    let import =
        if import_host_view { format!("jj {JJ_INSIDE_FLAGS} git import >/dev/null 2>&1\n") } else { String::new() };
    format!(
        "{import}if ! out=$(jj {JJ_INSIDE_FLAGS} --config snapshot.max-new-file-size=1099511627776 log --no-graph -r {} -T {} 2>&1); then printf 'forage-error %s\\n' \"$out\"; exit 3; fi\n\
         printf '%s\\n' \"$out\"",
        shell_quote(&revset),
        shell_quote(template)
    )
}

/// What every jj forage runs inside is told, over the agent's config: no pager
/// or colour; no signing program or file monitor to run (one that never returns
/// would hold up `sync` and `down`); and an import that abandons nothing, so
/// that another sandbox's bookmark going away never rebases the agent's work
/// built on it.
const JJ_INSIDE_FLAGS: &str = "--no-pager --color=never --config signing.behavior=drop --config fsmonitor.backend=none --config git.abandon-unreachable-commits=false";

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

impl AgentState {
    /// Parses what `state_script` printed. An error says why there is no state.
    pub fn parse(output: &str, since: (i64, i64)) -> Result<AgentState, String> {
        let mut commits = Vec::new();
        for line in output.lines() {
            if let Some(why) = line.strip_prefix("forage-error ") {
                let rest: String =
                    output.lines().skip_while(|l| *l != line).skip(1).take(5).collect::<Vec<_>>().join(" ");
                return Err(format!("jj inside the sandbox failed: {why} {rest}").trim().chars().take(800).collect());
            }
            let Some(fields) = line.strip_prefix("forage-state ") else { continue };
            let mut f = fields.split(' ');
            let (Some(id), Some(parents), Some(wc), Some(kind), None) =
                (f.next(), f.next(), f.next(), f.next(), f.next())
            else {
                continue;
            };
            let Some(id) = parse_oid(id) else { continue };
            let parents: Option<Vec<Oid>> = parents.split(',').filter(|p| !p.is_empty()).map(parse_oid).collect();
            let Some(parents) = parents else { continue };
            commits.push(StateCommit { id, parents, working_copy: wc == "@", work: kind == "w" });
            if commits.len() > MAX_COMMITS {
                return Err(format!("jj inside the sandbox printed more than {MAX_COMMITS} commits"));
            }
        }
        if !commits.iter().any(|c| c.working_copy) {
            let tail: String = output.chars().rev().take(400).collect::<String>().chars().rev().collect();
            return Err(format!("jj inside the sandbox printed no working-copy commit: {}", tail.trim()));
        }
        Ok(AgentState { commits, since })
    }

    pub fn working_copy(&self) -> Oid {
        self.commits.iter().find(|c| c.working_copy).map(|c| c.id).expect("parse makes sure there is one")
    }

    pub fn work_count(&self) -> usize {
        self.commits.iter().filter(|c| c.work).count()
    }

    /// The agent's work heads: work commits of which no other work commit
    /// descends. The first is the one the working copy sits on (or is), if any.
    /// Linear in the commits and their parent links: the agent decides how
    /// many there are.
    pub fn heads(&self) -> Vec<Oid> {
        let parents: HashMap<Oid, &[Oid]> = self.commits.iter().map(|c| (c.id, c.parents.as_slice())).collect();
        let work = self.commits.iter().filter(|c| c.work).map(|c| c.id);
        let below_work = strict_ancestors(&parents, work);
        let mut heads: Vec<Oid> =
            self.commits.iter().filter(|c| c.work && !below_work.contains(&c.id)).map(|c| c.id).collect();
        let wc = self.working_copy();
        let mut wc_line = strict_ancestors(&parents, [wc]);
        wc_line.insert(wc);
        wc_line.extend(self.descendants(wc));
        if let Some(i) = heads.iter().position(|h| wc_line.contains(h)) {
            let primary = heads.remove(i);
            heads.insert(0, primary);
        }
        heads
    }

    /// The commits of the state that descend from `from`.
    fn descendants(&self, from: Oid) -> HashSet<Oid> {
        let mut children: HashMap<Oid, Vec<Oid>> = HashMap::new();
        for c in &self.commits {
            for p in &c.parents {
                children.entry(*p).or_default().push(c.id);
            }
        }
        let mut seen = HashSet::new();
        let mut todo: Vec<Oid> = children.get(&from).cloned().unwrap_or_default();
        while let Some(id) = todo.pop() {
            if seen.insert(id) {
                todo.extend(children.get(&id).into_iter().flatten());
            }
        }
        seen
    }
}

/// The state jj inside would have printed, made from the host's copy of the
/// agent's commits (for when jj inside could not run): every commit reachable
/// from `tips` through commits `is_own` says are the sandbox's, at most
/// `MAX_COMMITS`, newest first (by committer time); each is work unless it is
/// empty (its tree its only parent's, or empty on none) and undescribed, or
/// (with `newest_versions`, for tips that include the older versions of
/// rewritten changes) a newer commit carries its change id (of two made in
/// the same second, the described one is taken for the newer). `working_copy` is
/// listed, and marked, whoever's it is. `since` is the epoch: no file of the
/// workspace can be taken to be as the working copy has it.
pub fn from_commits(
    repo: &Repository,
    tips: &[Oid],
    working_copy: Oid,
    is_own: impl Fn(&Oid) -> bool,
    newest_versions: bool,
) -> AgentState {
    let mut seen = HashSet::new();
    // (committer time, described, change id as jj reads it, the commit)
    let mut found: Vec<(i64, bool, Option<ChangeId>, StateCommit)> = Vec::new();
    let mut todo: Vec<Oid> = tips.iter().copied().filter(|t| is_own(t) || *t == working_copy).collect();
    while let Some(id) = todo.pop() {
        if found.len() >= MAX_COMMITS || !seen.insert(id) {
            continue;
        }
        let Ok(commit) = repo.find_commit(id) else { continue };
        let parents: Vec<Oid> = commit.parent_ids().collect();
        todo.extend(parents.iter().copied().filter(|p| is_own(p)));
        let empty = match parents.as_slice() {
            [parent] => repo.find_commit(*parent).is_ok_and(|p| p.tree_id() == commit.tree_id()),
            [] => commit.tree().is_ok_and(|t| t.is_empty()),
            _ => false,
        };
        let described = !commit.message_bytes().is_empty();
        let change = commit.header_field_bytes("change-id").ok().and_then(|b| ChangeId::decode(b.as_str().ok()?));
        let time = commit.committer().when().seconds();
        let work = !empty || described;
        found.push((time, described, change, StateCommit { id, parents, working_copy: id == working_copy, work }));
    }
    if !found.iter().any(|(.., c)| c.working_copy) {
        let wc = StateCommit { id: working_copy, parents: Vec::new(), working_copy: true, work: false };
        found.push((i64::MAX, false, None, wc));
    }
    // Newest first; of two made in the same second, the described one (jj
    // describes a change after snapshotting it, in one command).
    found.sort_by_key(|(time, described, _, c)| (std::cmp::Reverse(*time), !*described, c.id));
    if newest_versions {
        // The first commit seen with a change id is its newest version.
        let mut versions = HashSet::new();
        for (_, _, change, commit) in &mut found {
            if let Some(change) = change.take() {
                commit.work &= versions.insert(change);
            }
        }
    }
    AgentState { commits: found.into_iter().map(|(.., c)| c).collect(), since: (0, 0) }
}

/// Every commit reachable from the parents of `from` (through `parents`), each
/// visited once however many of `from` reach it.
fn strict_ancestors(parents: &HashMap<Oid, &[Oid]>, from: impl IntoIterator<Item = Oid>) -> HashSet<Oid> {
    let mut seen = HashSet::new();
    let mut todo: Vec<Oid> =
        from.into_iter().flat_map(|id| parents.get(&id).copied().unwrap_or_default()).copied().collect();
    while let Some(id) = todo.pop() {
        if seen.insert(id) {
            todo.extend(parents.get(&id).copied().unwrap_or_default());
        }
    }
    seen
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u8) -> String {
        format!("{n:02x}").repeat(20)
    }

    #[test]
    fn heads_skip_empty_changes_and_put_the_working_copy_first() {
        // base(host) <- a <- e(empty) <- c ; base <- b ; @ = child of c, empty.
        let out = format!(
            "noise\nforage-state {} {} @ e\nforage-state {} {} - w\nforage-state {} {} - e\nforage-state {} {} - w\nforage-state {} {} - w\nforage-state garbage\n",
            id(9), id(3), id(3), id(5), id(5), id(1), id(2), id(0), id(1), id(0)
        );
        let s = AgentState::parse(&out, (0, 0)).unwrap();
        assert_eq!(s.working_copy().to_string(), id(9));
        assert_eq!(s.work_count(), 3);
        let heads: Vec<String> = s.heads().iter().map(|h| h.to_string()).collect();
        assert_eq!(heads, [id(3), id(2)], "c (under @) first, then b; a is under c");
    }

    #[test]
    fn errors_and_missing_working_copies_are_reported() {
        assert!(AgentState::parse("forage-error boom\nmore", (0, 0)).unwrap_err().contains("boom more"));
        assert!(AgentState::parse(&format!("forage-state {} {} - w\n", id(1), id(0)), (0, 0)).is_err());
        assert!(state_script("x | y", false).contains("'(all() ~ ::(x | y)) | @'"));
        assert!(
            !state_script("x", false).contains("git import")
                && state_script("x", true).starts_with(&format!("jj {JJ_INSIDE_FLAGS} git import"))
        );
        assert!(
            JJ_INSIDE_FLAGS.contains("signing.behavior=drop")
                && JJ_INSIDE_FLAGS.contains("abandon-unreachable-commits=false")
        );
    }

    #[test]
    fn heads_of_a_long_chain_and_of_many_branches_take_linear_time() {
        // 20,000 work commits in a chain under @, then 4,000 heads on the base.
        let n = |i: u32| Oid::from_bytes(&[&i.to_be_bytes()[..], &[7; 16]].concat()).unwrap();
        let base = Oid::from_bytes(&[0; 20]).unwrap();
        let mut commits: Vec<StateCommit> = (1..=20_000)
            .rev()
            .map(|i| StateCommit {
                id: n(i),
                parents: vec![if i == 1 { base } else { n(i - 1) }],
                working_copy: false,
                work: true,
            })
            .collect();
        commits.insert(0, StateCommit { id: n(30_000), parents: vec![n(20_000)], working_copy: true, work: false });
        commits.extend((40_000..44_000).map(|i| StateCommit {
            id: n(i),
            parents: vec![base],
            working_copy: false,
            work: true,
        }));
        let state = AgentState { commits, since: (0, 0) };
        let heads = state.heads();
        assert_eq!(heads.len(), 4_001);
        assert_eq!(heads[0], n(20_000), "the working copy's line first");
    }

    #[test]
    fn a_state_read_from_the_store_keeps_the_newest_version_of_each_change() {
        let t = tempfile::tempdir().unwrap();
        let repo = Repository::init_bare(t.path()).unwrap();
        let odb = repo.odb().unwrap();
        let empty = odb.write(git2::ObjectType::Tree, b"").unwrap();
        let blob = odb.write(git2::ObjectType::Blob, b"work\n").unwrap();
        let tree =
            odb.write(git2::ObjectType::Tree, &[b"100644 w.txt\0".as_slice(), blob.as_bytes()].concat()).unwrap();
        let commit = |tree: Oid, parent: Option<Oid>, change: &str, time: u32, message: &str| {
            let parent = parent.map(|p| format!("parent {p}\n")).unwrap_or_default();
            let text = format!(
                "tree {tree}\n{parent}author a <a@x> 1 +0000\ncommitter a <a@x> {time} +0000\nchange-id {change}\n\n{message}"
            );
            odb.write(git2::ObjectType::Commit, text.as_bytes()).unwrap()
        };
        let base = commit(empty, None, &"z".repeat(32), 1, "base\n");
        // One change snapshotted, then described in the same second; then a
        // newer, empty working copy on top; and an older version of another change.
        let snapshot = commit(tree, Some(base), &"k".repeat(32), 5, "");
        let described = commit(tree, Some(base), &"k".repeat(32), 5, "agent work\n");
        let wc = commit(tree, Some(described), &"l".repeat(32), 6, "");
        let older = commit(tree, Some(base), &"m".repeat(32), 2, "old\n");
        let newer = commit(empty, Some(base), &"m".repeat(32), 3, "new\n");
        let own = [snapshot, described, wc, older, newer];
        let state = from_commits(&repo, &own, wc, |id| own.contains(id), true);
        assert_eq!(state.working_copy(), wc);
        assert_eq!(state.heads(), [described, newer]);
        assert_eq!(state.since, (0, 0));
        // Without `newest_versions` (a view's heads), every version counts.
        let state = from_commits(&repo, &own, wc, |id| own.contains(id), false);
        assert_eq!(state.heads().len(), 4);
        // A working copy that is not the sandbox's own is listed, but never work.
        let state = from_commits(&repo, &[described], base, |id| *id == described, true);
        assert_eq!((state.working_copy(), state.heads()), (base, vec![described]));
    }
}
