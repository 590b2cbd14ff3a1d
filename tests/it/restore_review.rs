//! Restored work keeps its review, and jj sandboxes speak jj: a sandbox
//! `restore --up` made shows, lists and lands the restored work (not an empty
//! change from the archive's tip); `down` and `restore` name every archive
//! they made or left; `diff` and `log` say when the agent's git HEAD is
//! detached; jj sandboxes' messages use jj's words, counts agree between
//! `down --dry-run` and `down`, a landed change edited again is warned of, and
//! `restore` names bookmarks as live sandboxes do. Real git, jj and engine.

use std::collections::BTreeSet;

use crate::git::{archive_refs, git, repo};
use crate::jj::{bookmarks, jj, jj_repo};
use crate::support::*;

fn inside(env: &Env, name: &str, script: &str) -> String {
    env.ok(&["exec", name, "--", "sh", "-c", script])
}

fn lines(text: &str) -> BTreeSet<String> {
    text.lines().filter(|l| !l.is_empty()).map(str::to_owned).collect()
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

/// stdout and stderr of a command that succeeded.
fn both(env: &Env, args: &[&str]) -> (String, String) {
    let out = env.run(args);
    assert!(out.status.success(), "forage-ctl {args:?}: {}", describe(&out));
    (String::from_utf8(out.stdout).unwrap(), String::from_utf8(out.stderr).unwrap())
}

fn row(env: &Env, name: &str) -> serde_json::Value {
    let list = env.json(&["list", "--json"]);
    list.as_array().unwrap().iter().find(|r| r["name"] == name).cloned().unwrap_or_else(|| panic!("{list}"))
}

#[test]
fn a_git_sandbox_restored_with_up_diffs_logs_lists_and_merges_the_restored_work() {
    let env = Env::new();
    let repo = repo(&env, "repo");
    let name = env.unique("rr-git");
    env.ok(&["up", &name, "--git-worktree", repo.to_str().unwrap()]);
    inside(
        &env,
        &name,
        "cd /workspace && echo w > w.txt && git add w.txt && git commit -qm 'agent work' && echo more >> a.txt",
    );
    env.ok(&["down", &name]);

    env.ok(&["restore", &name, "--up"]);
    // The committed file and the edit that was uncommitted at `down`.
    assert_eq!(lines(&env.ok(&["diff", &name, "--name-only"])), set(&["a.txt", "w.txt"]));
    let log = env.ok(&["log", &name]);
    assert!(log.contains("agent work"), "{log}");
    assert!(row(&env, &name)["ahead"].as_u64().unwrap() >= 1, "{}", row(&env, &name));
    let status = env.ok(&["status", &name]);
    assert!(status.contains("base:       main ("), "{status}");
    // It lands where the archived sandbox would have: on main.
    let merged = env.ok(&["merge", &name, "--yes"]);
    assert!(merged.contains("on main"), "{merged}");
    assert_eq!(git(&repo, &["show", "main:w.txt"]), "w\n");
    assert_eq!(git(&repo, &["show", "main:a.txt"]), "original\nmore\n");
    env.ok(&["down", &name]);
    env.assert_nothing_left_but_archives();
}

#[test]
fn down_and_restore_name_every_archive_and_review_says_the_head_is_detached() {
    let env = Env::new();
    let repo = repo(&env, "repo");
    let name = env.unique("rr-head");
    env.ok(&["up", &name, "--git-worktree", repo.to_str().unwrap()]);
    inside(
        &env,
        &name,
        "cd /workspace && echo b > b.txt && git add b.txt && git commit -qm 'on the branch' \
         && git checkout -q --detach && echo d > d.txt && git add d.txt && git commit -qm 'detached work'",
    );
    let detached = inside(&env, &name, "git -C /workspace rev-parse HEAD").trim().to_owned();

    // log and diff show the branch, and say where HEAD is, naming its commit.
    for command in ["log", "diff"] {
        let (out, err) = both(&env, &[command, &name]);
        assert!(
            err.contains(&format!("the agent's HEAD is detached at {} detached work", &detached[..12])),
            "{command}: {err}"
        );
        assert!(err.contains("1 commit there on no branch of yours") && err.contains("`down` archives it"), "{err}");
        if command == "log" {
            assert!(out.contains("on the branch") && !out.contains("detached work"), "{out}");
        }
    }
    let json = env.json(&["log", &name, "--json"]);
    assert_eq!(json["agent_head"]["commit"], detached.as_str(), "{json}");

    // down names each archive, with the command that restores that one.
    let (out, hints) = both(&env, &["down", &name]);
    let refs = archive_refs(&repo);
    assert_eq!(refs.len(), 2, "{refs:?}\n{out}");
    for r in &refs {
        let id = r.rsplit('/').next().unwrap();
        assert!(hints.contains(&format!("`forage-ctl restore {name} --archive {id}`")), "{id}: {hints}");
    }
    assert!(hints.contains("restore the agent's detached HEAD with"), "{hints}");

    // restore brings the sandbox's branch back and names the detached HEAD's
    // archive, whose own restore makes a branch of its own beside it.
    let (out, hints) = both(&env, &["restore", &name]);
    let head_ref = refs.iter().find(|r| r.ends_with("-head")).unwrap();
    let head_id = head_ref.rsplit('/').next().unwrap();
    assert!(out.contains(&format!("as branch forage-{name}")), "{out}");
    assert!(
        hints.contains(&format!("also archived the agent's detached HEAD as {head_ref}"))
            && hints.contains(&format!("`forage-ctl restore {name} --archive {head_id}`")),
        "{hints}"
    );
    env.ok(&["restore", &name, "--archive", head_id]);
    assert_eq!(git(&repo, &["rev-parse", &format!("forage-{name}-head")]).trim(), detached);
    assert!(git(&repo, &["log", "--format=%s", &format!("forage-{name}")]).contains("on the branch\n"));
    env.assert_nothing_left_but_archives();
}
