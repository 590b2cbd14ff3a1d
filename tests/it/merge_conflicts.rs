//! `merge` where the work conflicts with the target, and `merge` of work the
//! target already has: the conflict named (branch, files, committed or not)
//! with the commands that resolve it, each of which is followed here to the
//! end: `update` inside the sandbox, `merge --conflicts` in the user's
//! checkout (and `--abort`, or git's own), against real git, jj and engine.

use std::path::Path;

use crate::git::{git, repo};
use crate::jj::{jj, jj_repo};
use crate::support::*;

fn inside(env: &Env, name: &str, script: &str) -> String {
    env.ok(&["exec", name, "--", "sh", "-c", script])
}

/// Everything of the user's checkout a merge could change, but the index's
/// bytes (git refreshes its stat data): the files, as git says they are
/// (untracked and ignored ones too, asked without refreshing the index),
/// and where the branch is.
fn checkout_state(repo: &Path) -> (Snapshot, String, String) {
    let status = git(repo, &["--no-optional-locks", "status", "--porcelain", "--ignored", "-uall"]);
    let files = snapshot(repo).into_iter().filter(|(p, ..)| !p.starts_with(".git")).collect();
    (files, status, git(repo, &["rev-parse", "main"]))
}

/// The user changes a.txt and b.txt on main; the agent commits its own
/// change of a.txt and leaves b.txt changed, uncommitted.
fn conflicting_work(env: &Env, repo: &Path, name: &str) {
    std::fs::write(repo.join("b.txt"), "b\n").unwrap();
    git(repo, &["add", "b.txt"]);
    git(repo, &["commit", "-qm", "add b.txt"]);
    env.ok(&["up", name, "--git-worktree", repo.to_str().unwrap()]);
    inside(
        env,
        name,
        "cd /workspace && echo agent > a.txt && git commit -qam 'agent: a.txt' && echo agent > b.txt && echo new > new.txt && git add new.txt && git commit -qm 'agent: new.txt'",
    );
    std::fs::write(repo.join("a.txt"), "user\n").unwrap();
    std::fs::write(repo.join("b.txt"), "user\n").unwrap();
    git(repo, &["commit", "-qam", "user: a.txt and b.txt"]);
}

#[test]
fn a_conflict_names_the_branch_the_files_and_the_commands_and_update_resolves_it() {
    let env = Env::new();
    let repo = repo(&env, "repo");
    let name = env.unique("mc-update");
    conflicting_work(&env, &repo, &name);
    let before = checkout_state(&repo);

    let err = env.fails(&["merge", &name, "--yes"], 4);
    assert!(
        err.contains(&format!(
            "the work of sandbox {name} conflicts with branch \"main\" in 2 files: \"a.txt\" (committed), \"b.txt\" (uncommitted); nothing was changed"
        )),
        "{err}"
    );
    assert!(err.contains(&format!("forage-ctl update {name}")), "{err}");
    assert!(err.contains(&format!("forage-ctl merge {name} --conflicts")), "{err}");
    assert!(!err.contains("your own tools"), "{err}");
    assert_eq!(checkout_state(&repo), before);
    let json: serde_json::Value = serde_json::from_str(&env.fails(&["merge", &name, "--yes", "--json"], 4)).unwrap();
    let hints: Vec<&serde_json::Value> = json["error"]["hints"].as_array().unwrap().iter().collect();
    assert_eq!(hints[0]["command"], serde_json::json!(["update", name.as_str()]), "{json}");

    // The first named command: main brought in inside, where git leaves the
    // conflicts (the committed one, then the uncommitted one) for the agent.
    let err = env.fails(&["update", &name], 4);
    assert!(err.contains("CONFLICT") && err.contains("a.txt") && err.contains("left conflicts"), "{err}");
    assert_eq!(checkout_state(&repo), before, "update touched the user's checkout");
    inside(
        &env,
        &name,
        "cd /workspace && echo resolved > a.txt && git add a.txt && git commit -q --no-edit 2>&1 || true",
    );
    let status = inside(&env, &name, "cd /workspace && git status --porcelain");
    assert!(status.contains("UU b.txt"), "the uncommitted b.txt was put back, conflicting: {status}");
    inside(
        &env,
        &name,
        "cd /workspace && echo 'agent and user' > b.txt && git add b.txt && git reset -q && git stash drop -q",
    );
    env.ok(&["merge", &name, "--yes"]);
    assert_eq!(std::fs::read_to_string(repo.join("a.txt")).unwrap(), "resolved\n");
    assert_eq!(std::fs::read_to_string(repo.join("b.txt")).unwrap(), "agent and user\n");
    assert_eq!(std::fs::read_to_string(repo.join("new.txt")).unwrap(), "new\n");
    assert_eq!(git(&repo, &["status", "--porcelain"]), "");
    env.ok(&["down", &name]);
    env.assert_nothing_left_but_archives();
}

#[test]
fn merge_conflicts_leaves_markers_and_merge_head_and_abort_puts_all_back() {
    let env = Env::new();
    let repo = repo(&env, "repo");
    let name = env.unique("mc-marks");
    conflicting_work(&env, &repo, &name);
    inside(&env, &name, "cd /workspace && git checkout -q b.txt");
    std::fs::write(repo.join("untracked.txt"), "mine\n").unwrap();
    std::fs::write(repo.join("x.log"), "ignored\n").unwrap();
    let before = checkout_state(&repo);

    // A dirty checkout is refused, and nothing changes.
    std::fs::write(repo.join("a.txt"), "editing\n").unwrap();
    let dirty = checkout_state(&repo);
    let err = env.fails(&["merge", &name, "--conflicts"], 4);
    assert!(err.contains("changes not committed (a.txt)"), "{err}");
    assert_eq!(checkout_state(&repo), dirty);
    assert!(!repo.join(".git/MERGE_HEAD").exists());
    git(&repo, &["checkout", "-q", "a.txt"]);

    // The conflicts, marked as git marks them, and the merge in progress.
    let out = env.ok(&["merge", &name, "--conflicts"]);
    assert!(out.contains("left 1 conflicting file") && out.contains("a.txt"), "{out}");
    assert_eq!(
        std::fs::read_to_string(repo.join("a.txt")).unwrap(),
        format!("<<<<<<< main\nuser\n=======\nagent\n>>>>>>> sandbox {name}\n")
    );
    assert_eq!(std::fs::read_to_string(repo.join("new.txt")).unwrap(), "new\n");
    let agent = git(&repo, &["rev-parse", &format!("forage-{name}")]);
    assert_eq!(std::fs::read_to_string(repo.join(".git/MERGE_HEAD")).unwrap(), agent);
    assert_eq!(git(&repo, &["rev-parse", "main"]), before.2, "the branch moved");
    let status = git(&repo, &["status", "--porcelain"]);
    assert!(status.contains("UU a.txt") && status.contains("A  new.txt"), "{status}");

    // --abort: everything as it was, the user's half-done resolution too.
    std::fs::write(repo.join("a.txt"), "half resolved\n").unwrap();
    let out = env.ok(&["merge", &name, "--abort"]);
    assert!(out.contains("aborted the merge"), "{out}");
    assert_eq!(checkout_state(&repo), before);
    assert!(!repo.join(".git/MERGE_HEAD").exists());
    env.fails(&["merge", &name, "--abort"], 3);

    // git's own `git merge --abort` undoes it as well.
    env.ok(&["merge", &name, "--conflicts"]);
    git(&repo, &["merge", "--abort"]);
    assert_eq!(checkout_state(&repo), before);
    let err = env.fails(&["merge", &name, "--abort"], 4);
    assert!(err.contains("is over"), "{err}");

    // Never where an agent writes: --abort is refused while a direct
    // sandbox works inside the checkout, and changes nothing.
    env.ok(&["merge", &name, "--conflicts"]);
    let direct = env.unique("mc-direct");
    std::fs::create_dir(repo.join("sub")).unwrap();
    env.ok(&["up", &direct, "--workspace", repo.join("sub").to_str().unwrap()]);
    let left = checkout_state(&repo);
    let err = env.fails(&["merge", &name, "--abort"], 4);
    assert!(err.contains(&format!("which holds the workspace of sandbox {direct}")), "{err}");
    assert_eq!(checkout_state(&repo), left);
    env.ok(&["down", &direct]);
    std::fs::remove_dir(repo.join("sub")).unwrap();
    env.ok(&["merge", &name, "--abort"]);
    assert_eq!(checkout_state(&repo), before);

    // The user's own `git commit` concludes it: a merge of the agent's commit.
    env.ok(&["merge", &name, "--conflicts"]);
    std::fs::write(repo.join("a.txt"), "both\n").unwrap();
    git(&repo, &["add", "a.txt"]);
    git(&repo, &["commit", "-q", "--no-edit"]);
    assert_eq!(git(&repo, &["rev-parse", "main^2"]), agent);
    // The work is on main now: a merge again lands nothing.
    let out = env.ok(&["merge", &name]);
    assert!(out.contains("is already on main, nothing to land"), "{out}");
    env.ok(&["down", &name]);
    env.assert_nothing_left_but_archives();
}

#[test]
fn work_already_on_the_target_lands_nothing_however_it_landed() {
    let env = Env::new();
    let repo = repo(&env, "repo");
    let name = env.unique("mc-twice");
    env.ok(&["up", &name, "--git-worktree", repo.to_str().unwrap()]);
    inside(&env, &name, "cd /workspace && echo one > one.txt && git add one.txt && git commit -qm one && echo two >> a.txt && git commit -qam two");
    // main moves, so that a merge would need a merge commit.
    std::fs::write(repo.join("user.txt"), "user\n").unwrap();
    git(&repo, &["add", "user.txt"]);
    git(&repo, &["commit", "-qm", "user"]);
    env.ok(&["merge", &name, "--squash"]);
    let squashed = git(&repo, &["rev-parse", "main"]);
    for how in [&[][..], &["--rebase"], &["--squash"]] {
        let mut args = vec!["merge", name.as_str()];
        args.extend_from_slice(how);
        let out = env.ok(&args);
        assert_eq!(git(&repo, &["rev-parse", "main"]), squashed, "{how:?} landed it again");
        assert!(out.contains("is already on main, nothing to land"), "{how:?}: {out}");
        args.push("--json");
        let json = env.json(&args);
        assert_eq!((json["already_on_target"].as_bool(), json["landed"].as_bool()), (Some(true), Some(false)));
        assert_eq!(git(&repo, &["rev-parse", "main"]), squashed, "{how:?} landed it again");
    }
    env.ok(&["down", &name]);
    env.assert_nothing_left_but_archives();
}

#[test]
fn jj_conflicts_are_named_and_update_rebases_inside_and_work_on_the_bookmark_lands_once() {
    let env = Env::new();
    let repo = jj_repo(&env, "repo", false);
    let name = env.unique("mc-jj");
    env.ok(&["up", &name, "--jj", repo.to_str().unwrap()]);
    inside(&env, &name, "cd /workspace && echo agent > a.txt && jj describe -m 'agent: a.txt' >/dev/null 2>&1 && jj new >/dev/null 2>&1 && echo new > new.txt");
    jj(&repo, &["new", "main", "-m", "user"]);
    std::fs::write(repo.join("a.txt"), "user\n").unwrap();
    jj(&repo, &["bookmark", "set", "main", "-r", "@"]);
    jj(&repo, &["new"]);
    let main = || jj(&repo, &["log", "--no-graph", "-r", "main", "-T", "commit_id"]);
    let before = main();

    let err = env.fails(&["merge", &name, "--yes"], 4);
    assert!(err.contains("conflicts with bookmark \"main\" in 1 file: \"a.txt\" (committed)"), "{err}");
    assert!(err.contains(&format!("forage-ctl update {name}")) && !err.contains("--conflicts"), "{err}");
    env.fails(&["merge", &name, "--conflicts"], 2);
    assert_eq!(main(), before);

    // update: the agent's changes rebased onto main inside, the conflict
    // recorded in its change for it to resolve.
    let err = env.fails(&["update", &name], 4);
    assert!(err.contains("left conflicts"), "{err}");
    inside(&env, &name, "cd /workspace && echo resolved > a.txt && jj squash >/dev/null 2>&1");
    env.ok(&["merge", &name, "--yes"]);
    assert_eq!(jj(&repo, &["file", "show", "-r", "main", "root:a.txt"]), "resolved\n");
    assert_eq!(jj(&repo, &["file", "show", "-r", "main", "root:new.txt"]), "new\n");
    // Landed once: a second merge lands nothing.
    let landed = main();
    let out = env.ok(&["merge", &name, "--yes"]);
    assert!(out.contains("is already on main, nothing to land"), "{out}");
    assert_eq!(main(), landed);
    env.ok(&["down", &name]);
    env.assert_nothing_left_but_archives();
}
