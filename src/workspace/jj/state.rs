//! What jj inside the container says about the agent's work, parsed on the host
//! as untrusted text: the agent's config can make jj print anything, so only
//! well-formed lines count, their number is bounded, and every id they name is
//! verified when it is imported. A lie can only misplace the agent's own work.

use std::collections::{HashMap, HashSet};

use git2::Oid;

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
    pub fn heads(&self) -> Vec<Oid> {
        let parents: HashMap<Oid, &[Oid]> = self.commits.iter().map(|c| (c.id, c.parents.as_slice())).collect();
        let ancestors = |start: Oid| {
            let mut seen = HashSet::new();
            let mut todo: Vec<Oid> = parents.get(&start).map(|p| p.to_vec()).unwrap_or_default();
            while let Some(id) = todo.pop() {
                if seen.insert(id) {
                    todo.extend(parents.get(&id).map(|p| p.to_vec()).unwrap_or_default());
                }
            }
            seen
        };
        let mut below_work: HashSet<Oid> = HashSet::new();
        for c in self.commits.iter().filter(|c| c.work) {
            below_work.extend(ancestors(c.id));
        }
        let mut heads: Vec<Oid> =
            self.commits.iter().filter(|c| c.work && !below_work.contains(&c.id)).map(|c| c.id).collect();
        let wc = self.working_copy();
        let wc_line: HashSet<Oid> = ancestors(wc).into_iter().chain([wc]).collect();
        if let Some(i) = heads.iter().position(|h| wc_line.contains(h) || ancestors(*h).contains(&wc)) {
            let primary = heads.remove(i);
            heads.insert(0, primary);
        }
        heads
    }
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
}
