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

#[test]
fn a_jj_sandbox_restored_with_up_shows_its_work_and_restore_names_bookmarks_as_live_sandboxes_do() {
    let env = Env::new();
    let repo = jj_repo(&env, "repo", true);
    // A trunk of another name than main, master or trunk: only the record says where to land.
    jj(&repo, &["bookmark", "rename", "main", "dev"]);
    let name = env.unique("rr-jj");
    env.ok(&["up", &name, "--jj", repo.to_str().unwrap()]);
    inside(&env, &name, "cd /workspace && echo w > w.txt && jj describe -m 'agent work' && jj new && echo wip > c.txt");
    env.ok(&["sync", &name]);
    let live = bookmarks(&repo);
    let live_bookmark = format!("forage/{name}@ ");
    assert!(live.contains(&live_bookmark), "{live}");
    env.ok(&["down", &name]);

    // restore makes the bookmark a live sandbox has.
    let out = env.ok(&["restore", &name]);
    assert!(out.contains(&format!("as bookmark forage/{name} ")), "{out}");
    assert!(bookmarks(&repo).contains(&live_bookmark), "{}", bookmarks(&repo));
    jj(&repo, &["bookmark", "delete", &format!("forage/{name}")]);

    env.ok(&["restore", &name, "--up"]);
    assert_eq!(lines(&env.ok(&["diff", &name, "--name-only"])), set(&["c.txt", "w.txt"]));
    let log = env.ok(&["log", &name]);
    assert!(log.contains("agent work"), "{log}");
    assert!(row(&env, &name)["ahead"].as_u64().unwrap() >= 1, "{}", row(&env, &name));
    let merged = env.ok(&["merge", &name, "--yes"]);
    assert!(merged.contains("on dev"), "{merged}");
    assert_eq!(jj(&repo, &["file", "show", "-r", "dev", "root:w.txt"]), "w\n");
    assert_eq!(jj(&repo, &["file", "show", "-r", "dev", "root:c.txt"]), "wip\n");
    env.ok(&["down", &name]);
    env.assert_nothing_left_but_archives();
}

#[test]
fn jj_sandboxes_speak_jj_and_down_counts_what_its_dry_run_counted() {
    let env = Env::new();
    let repo = jj_repo(&env, "repo", true);
    let name = env.unique("rr-words");
    env.ok(&["up", &name, "--jj", repo.to_str().unwrap()]);
    inside(&env, &name, "cd /workspace && echo a > a1.txt && jj describe -m first && jj new");
    let (out, hints) = both(&env, &["merge", &name, "--yes"]);
    assert!(out.contains("landed 1 change of sandbox") && out.contains("on main"), "{out}");
    assert!(hints.contains("`jj new main` starts your next change"), "{hints}");
    // The agent's working-copy change, in jj's words.
    inside(&env, &name, "cd /workspace && echo b > b.txt");
    let (out, _) = both(&env, &["merge", &name, "--dry-run"]);
    assert!(out.contains("would land the working-copy change (1 file)"), "{out}");
    assert!(!out.contains("uncommitted"), "{out}");
    let err = env.fails(&["merge", &name], 2);
    assert!(err.contains("a working-copy change (1 file: b.txt)") && !err.contains("uncommitted"), "{err}");

    // down counts the changes its dry run listed, on the same state.
    inside(&env, &name, "cd /workspace && jj describe -m second");
    let plan = env.ok(&["down", &name, "--dry-run"]);
    assert!(plan.contains("would archive 1 change ("), "{plan}");
    let out = env.ok(&["down", &name]);
    assert!(out.contains("archived 1 change as bookmark"), "{out}");
    env.assert_nothing_left_but_archives();
}

/// Sandbox `name` on `repo` lands its working-copy change, then edits that
/// change again; returns (its change id, the edited commit).
fn land_then_edit(env: &Env, repo: &std::path::Path, name: &str) -> (String, String) {
    env.ok(&["up", name, "--jj", repo.to_str().unwrap()]);
    let script = format!("cd /workspace && echo {name} > {name}.txt && jj describe -m 'landed change' && jj log -r @ --no-graph -T change_id");
    let change = inside(env, name, &script);
    let (out, hints) = both(env, &["merge", name, "--yes"]);
    assert!(out.contains("landed the working-copy change (1 file) of sandbox"), "{out}");
    assert!(hints.contains(&format!("`forage-ctl exec {name} -- jj -R /workspace new`")), "{hints}");
    // The agent edits the landed change instead: two commits of one change.
    let script = format!("cd /workspace && echo more >> {name}.txt && jj log -r @ --no-graph -T commit_id");
    (change, inside(env, name, &script))
}

fn divergent_changes(repo: &std::path::Path) -> String {
    jj(repo, &["log", "--no-graph", "-r", "divergent()", "-T", "change_id ++ \"\\n\""])
}

#[test]
fn a_landed_jj_change_the_agent_edits_again_is_named_as_divergent_with_the_way_out() {
    let env = Env::new();
    let repo = jj_repo(&env, "repo", true);

    // While the sandbox is up: sync and merge say so, and the fix is made inside.
    let name = env.unique("rr-div");
    let (change, edited) = land_then_edit(&env, &repo, &name);
    let warned = format!("change {} landed on main as", &change[..12]);
    let (_, err) = both(&env, &["sync", &name]);
    assert!(
        err.contains(&warned) && err.contains(&format!("your jj shows change {} as divergent", &change[..12])),
        "{err}"
    );
    assert!(divergent_changes(&repo).contains(&change), "jj agrees: {}", divergent_changes(&repo));
    let fix = format!("`forage-ctl exec {name} -- jj -R /workspace metaedit --update-change-id -r {edited}`");
    assert!(err.contains(&fix), "{err}");
    let err = env.fails(&["merge", &name, "--dry-run"], 4);
    assert!(err.contains(&warned) && err.contains(&fix), "merge: {err}");
    // The hint's command gives the edit a change of its own: no more divergence.
    env.ok(&["exec", &name, "--", "jj", "-R", "/workspace", "metaedit", "--update-change-id", "-r", &edited]);
    let (_, err) = both(&env, &["sync", &name]);
    assert!(!err.contains("divergent"), "{err}");
    assert_eq!(divergent_changes(&repo), "");
    env.ok(&["down", &name]);

    // Taken down so: down says so, with the fix in the user's repository.
    let name = env.unique("rr-div2");
    let (change, edited) = land_then_edit(&env, &repo, &name);
    let (_, err) = both(&env, &["down", &name]);
    assert!(err.contains(&format!("change {} landed on main as", &change[..12])), "down: {err}");
    let short = &edited[..12];
    assert!(err.contains(&format!("`jj metaedit --update-change-id -r {short}`")), "{err}");
    jj(&repo, &["metaedit", "--update-change-id", "-r", short]);
    assert_eq!(divergent_changes(&repo), "");
    env.assert_nothing_left_but_archives();
}
