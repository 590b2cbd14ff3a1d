//! The next step is always named: `up` and `status` hint the review commands;
//! `up` says what of the user's checkout the agent will not see, and
//! `--include-uncommitted` copies it in; `wait --all` and `wait --next` let a
//! loop handle each agent once; `path` and `checkout` reach the agent's work
//! from the host. Real engine, real git; the agent works through `exec`.

use std::path::Path;
use std::process::Command;

use crate::git::{git, repo};
use crate::support::*;

fn inside(env: &Env, name: &str, script: &str) -> String {
    env.ok(&["exec", name, "--", "sh", "-c", script])
}

fn stderr_of(env: &Env, args: &[&str]) -> String {
    let out = env.run(args);
    assert!(out.status.success(), "forage-ctl {args:?}: {}", describe(&out));
    String::from_utf8(out.stderr).unwrap()
}

/// The `command` arguments of the `hints` a `--json` result holds.
fn hinted_commands(json: &serde_json::Value) -> Vec<Vec<String>> {
    json["hints"]
        .as_array()
        .unwrap_or_else(|| panic!("no hints in {json}"))
        .iter()
        .filter_map(|h| h["command"].as_array())
        .map(|c| c.iter().map(|w| w.as_str().unwrap().to_owned()).collect())
        .collect()
}

fn words(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| (*s).to_owned()).collect()
}

#[test]
fn up_and_status_name_the_review_commands() {
    let env = Env::new();
    let repo = repo(&env, "repo");
    let name = env.unique("ns-hints");
    let up = env.json(&["up", &name, "--git-worktree", repo.to_str().unwrap(), "--json"]);
    let hinted = hinted_commands(&up);
    assert!(hinted.contains(&words(&["diff", &name])) && hinted.contains(&words(&["merge", &name])), "{up}");
    assert_eq!(up["name"].as_str(), Some(name.as_str()), "the record is still there: {up}");

    // Nothing made yet: how to wait for the agent.
    let before = stderr_of(&env, &["status", &name]);
    assert!(before.contains(&format!("`forage-ctl wait {name}`")), "{before}");
    inside(&env, &name, "cd /workspace && echo work > w.txt && git add w.txt && git commit -qm work");
    let after = stderr_of(&env, &["status", &name]);
    for command in [format!("`forage-ctl diff {name}`"), format!("`forage-ctl merge {name}`")] {
        assert!(after.contains(&command), "{command} is not hinted: {after}");
    }
    let status = env.json(&["status", &name, "--json"]);
    assert!(hinted_commands(&status).contains(&words(&["merge", &name])), "{status}");
    env.ok(&["down", &name, "--discard"]);
}

#[test]
fn up_warns_of_uncommitted_changes_and_include_uncommitted_copies_them() {
    let env = Env::new();
    let repo = repo(&env, "repo");
    let r = repo.to_str().unwrap();
    std::fs::write(repo.join("gone.txt"), "tracked\n").unwrap();
    git(&repo, &["add", "gone.txt"]);
    git(&repo, &["commit", "-qm", "gone.txt"]);
    let head = git(&repo, &["rev-parse", "HEAD"]);
    // The user's work in progress: an edit, a deletion, a staged new file,
    // untracked files (one deep, one a symlink), and an ignored file.
    std::fs::write(repo.join("a.txt"), "original\nmine\n").unwrap();
    std::fs::remove_file(repo.join("gone.txt")).unwrap();
    std::fs::write(repo.join("staged.txt"), "staged\n").unwrap();
    git(&repo, &["add", "staged.txt"]);
    std::fs::create_dir_all(repo.join("deep/er")).unwrap();
    std::fs::write(repo.join("deep/er/new.txt"), "new\n").unwrap();
    std::os::unix::fs::symlink("/etc/hostname", repo.join("link")).unwrap();
    std::fs::write(repo.join("noise.log"), "ignored\n").unwrap();
    let checkout = working_files(&repo);
    let status = git(&repo, &["status", "--porcelain"]);

    // Without the flag: a warning that names the count and the way.
    let plain = env.unique("ns-plain");
    let out = env.run(&["up", &plain, "--git-worktree", r]);
    assert!(out.status.success(), "{}", describe(&out));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("has 5 uncommitted changes") && said.contains("--include-uncommitted"), "{said}");
    assert!(said.contains(&format!("`forage-ctl diff {plain}`")), "up names the review commands: {said}");
    assert_eq!(inside(&env, &plain, "cat /workspace/a.txt"), "original\n");

    // With it: the files as the user has them, on the user's HEAD.
    let copied = env.unique("ns-copied");
    env.ok(&["up", &copied, "--git-worktree", r, "--include-uncommitted"]);
    let seen = inside(
        &env,
        &copied,
        "cd /workspace && cat a.txt staged.txt deep/er/new.txt && readlink link \
         && test ! -e gone.txt && test ! -e noise.log && git rev-parse HEAD && git status --porcelain",
    );
    assert!(seen.starts_with("original\nmine\nstaged\nnew\n/etc/hostname\n"), "{seen}");
    assert!(seen.contains(&head), "the base is the user's HEAD: {seen}");
    for line in [" M a.txt", " D gone.txt", "?? deep/", "?? link", "?? staged.txt"] {
        assert!(seen.contains(line), "{line:?} missing from the sandbox's status: {seen}");
    }
    assert!(!seen.contains("A  staged.txt"), "the user's index is not copied, only files: {seen}");
    // The user's checkout is as it was.
    assert!(working_files(&repo) == checkout, "the user's files changed");
    assert_eq!(git(&repo, &["status", "--porcelain"]), status);
    assert_eq!(git(&repo, &["rev-parse", "HEAD"]), head);
    // The review shows them as the agent's work.
    let diffed = env.ok(&["diff", &copied, "--name-only"]);
    for path in ["a.txt", "gone.txt", "staged.txt", "deep/er/new.txt", "link"] {
        assert!(diffed.lines().any(|l| l == path), "{path} not in the diff: {diffed}");
    }

    // What it cannot do, refused before anything is made.
    let refused = env.unique("ns-refused");
    let err = env.fails(&["up", &refused, "--git-worktree", r, "--include-uncommitted", "--base", "main"], 2);
    assert!(err.contains("leave out --base"), "{err}");
    let dir = env.mkdir("plain-dir");
    let err = env.fails(&["up", &refused, "--workspace", dir.to_str().unwrap(), "--include-uncommitted"], 2);
    assert!(err.contains("--include-uncommitted is for --git-worktree"), "{err}");
    assert!(!env.home.join("workspaces").join(&refused).exists());

    // merge lands the copied changes as the agent's work, once the user's
    // checkout is clean (here: stashed).
    git(&repo, &["stash", "-u", "-q"]);
    env.ok(&["merge", &copied, "--yes"]);
    assert_eq!(std::fs::read_to_string(repo.join("a.txt")).unwrap(), "original\nmine\n");
    assert_eq!(std::fs::read_to_string(repo.join("deep/er/new.txt")).unwrap(), "new\n");
    assert!(!repo.join("gone.txt").exists());
    for n in [&plain, &copied] {
        env.ok(&["down", n, "--discard"]);
    }

    // Never read where an agent writes: a direct sandbox over a directory of
    // the checkout (its agent could put a symlink or a FIFO there meanwhile).
    let direct = env.unique("ns-direct");
    env.ok(&["up", &direct, "--workspace", repo.join("deep").to_str().unwrap()]);
    let err = env.fails(&["up", &refused, "--git-worktree", r, "--include-uncommitted"], 4);
    assert!(err.contains("--include-uncommitted reads your checkout") && err.contains(&direct), "{err}");
    assert!(!env.home.join("workspaces").join(&refused).exists());
    env.ok(&["down", &direct]);
}

/// The files of a checkout (its `.git` left out: `up` adds a worktree there).
fn working_files(repo: &Path) -> Snapshot {
    snapshot(repo).into_iter().filter(|(p, ..)| !p.starts_with(".git")).collect()
}

/// `wait --next` in a shell loop, as the user guide shows it; then once more.
fn wait_next_loop(env: &Env) -> (Vec<String>, String) {
    let script = format!(
        "while n=$('{BIN}' wait --next --idle-for 1s --timeout 120s); do echo \"got $n\"; done; \
         '{BIN}' wait --next --idle-for 1s; echo \"exit $?\""
    );
    let mut sh = Command::new("sh");
    sh.args(["-c", &script]).env("FORAGE_HOME", &env.home).env("XDG_CONFIG_HOME", env.dir.path().join("config"));
    // The run's engine, as `Env::cmd` gives every forage-ctl (as root, the
    // first engine forage would find is Docker's, not root's Podman).
    if let Some(host) = test_engine_host() {
        sh.env("DOCKER_HOST", host);
    }
    let out = sh.output().unwrap();
    assert!(out.status.success(), "{}", describe(&out));
    let stdout = String::from_utf8(out.stdout).unwrap();
    let got = stdout.lines().filter_map(|l| l.strip_prefix("got ")).map(str::to_owned).collect();
    let last = stdout.lines().last().unwrap_or_default().to_owned();
    (got, last)
}

#[test]
fn wait_all_and_wait_next_see_each_agent_once() {
    let env = Env::new();
    let repo = repo(&env, "repo");
    let names: Vec<String> = ["ns-w1", "ns-w2", "ns-w3"].iter().map(|p| env.unique(p)).collect();
    for n in &names {
        env.ok(&["up", n, "--git-worktree", repo.to_str().unwrap()]);
    }
    // Two agents end; the third waits for input (idle).
    kill_everything_inside(&env, &names[0]);
    kill_everything_inside(&env, &names[2]);

    let out = env.run(&["wait", "--all", "--idle-for", "1s", "--timeout", "120s"]);
    assert_eq!(out.status.code(), Some(8), "all done, one idle: {}", describe(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    for n in &names {
        assert_eq!(stdout.lines().filter(|l| l.starts_with(&format!("{n}: "))).count(), 1, "{n}: {stdout}");
    }
    let out = env.run(&["wait", "--all", "--idle-for", "1s", "--timeout", "120s", "--json"]);
    assert_eq!(out.status.code(), Some(8), "{}", describe(&out));
    let all: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(all["done"].as_array().map(Vec::len), Some(3), "{all}");

    let (mut got, last) = wait_next_loop(&env);
    assert_eq!(last, "exit 10", "none left after the loop");
    got.sort();
    let mut expected = names.clone();
    expected.sort();
    assert_eq!(got, expected, "each agent reported once");
    // A second loop finds nothing left to report.
    let (again, last) = wait_next_loop(&env);
    assert_eq!((again, last.as_str()), (Vec::<String>::new(), "exit 10"));
    for n in &names {
        env.ok(&["down", n, "--discard"]);
    }
}

fn on_branch(repo: &Path) -> String {
    git(repo, &["rev-parse", "--abbrev-ref", "HEAD"]).trim().to_owned()
}

#[test]
fn path_and_checkout_reach_the_agents_work_from_the_host() {
    let env = Env::new();
    let repo = repo(&env, "repo");
    let name = env.unique("ns-co");
    env.ok(&["up", &name, "--git-worktree", repo.to_str().unwrap()]);

    // `path`: the workspace of the record.
    let listed = env.json(&["list", "--json"]);
    let workspace =
        listed.as_array().unwrap().iter().find(|r| r["name"] == name.as_str()).unwrap()["workspace"].clone();
    assert_eq!(env.ok(&["path", &name]).trim_end(), workspace.as_str().unwrap());
    assert_eq!(env.json(&["path", &name, "--json"])["path"], workspace);
    env.fails(&["path", "ns-nosuch"], 3);

    // The sandbox's own branch cannot be switched to in the user's checkout.
    let refused =
        Command::new("git").arg("-C").arg(&repo).args(["switch", &format!("forage-{name}")]).output().unwrap();
    assert!(!refused.status.success(), "{}", describe(&refused));

    // `checkout`: a branch of the agent's synced commits, to switch to.
    let review = format!("review/{name}");
    inside(&env, &name, "cd /workspace && echo one > one.txt && git add one.txt && git commit -qm one");
    let out = env.run(&["checkout", &name]);
    assert!(out.status.success(), "{}", describe(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains(&format!("`git switch {review}`")), "{}", describe(&out));
    git(&repo, &["switch", "-q", &review]);
    assert_eq!(std::fs::read_to_string(repo.join("one.txt")).unwrap(), "one\n");
    assert_eq!(git(&repo, &["log", "-1", "--format=%s"]), "one\n");
    git(&repo, &["switch", "-q", "main"]);

    // Again after more work: forage's own branch moves on.
    inside(&env, &name, "cd /workspace && echo two > two.txt && git add two.txt && git commit -qm two");
    let moved = env.json(&["checkout", &name, "--json"]);
    let tip = git(&repo, &["rev-parse", &format!("forage-{name}")]);
    assert_eq!(moved["commit"].as_str(), Some(tip.trim()), "{moved}");
    assert_eq!(git(&repo, &["rev-parse", &review]), tip);

    // Checked out by the user: not moved under their files.
    git(&repo, &["switch", "-q", &review]);
    inside(&env, &name, "cd /workspace && echo three > three.txt && git add three.txt && git commit -qm three");
    let err = env.fails(&["checkout", &name], 4);
    assert!(err.contains("is checked out in"), "{err}");
    assert_eq!(git(&repo, &["rev-parse", &review]), tip);
    assert_eq!(on_branch(&repo), review);
    git(&repo, &["switch", "-q", "main"]);

    // A branch of the user's by that name is never clobbered.
    git(&repo, &["branch", "-D", "-q", &review]);
    git(&repo, &["branch", &review, "main"]);
    let mine = git(&repo, &["rev-parse", &review]);
    let err = env.fails(&["checkout", &name], 4);
    assert!(err.contains("forage did not put it there"), "{err}");
    assert_eq!(git(&repo, &["rev-parse", &review]), mine);
    env.ok(&["down", &name, "--discard"]);
}

#[test]
fn jj_refuses_include_uncommitted_and_checkout_and_its_hint_is_true() {
    let env = Env::new();
    let repo = crate::jj::jj_repo(&env, "jj-repo", false);
    let r = repo.to_str().unwrap();
    std::fs::write(repo.join("mine.txt"), "mine\n").unwrap();
    let name = env.unique("ns-jj");
    let err = env.fails(&["up", &name, "--jj", r, "--include-uncommitted"], 2);
    assert!(err.contains("--include-uncommitted is for git") && err.contains("--base @"), "{err}");
    assert!(!env.home.join("workspaces").join(&name).exists());
    // What the hint says: `jj status` records the file in @, `--base @` starts on it.
    crate::jj::jj(&repo, &["status"]);
    env.ok(&["up", &name, "--jj", r, "--base", "@"]);
    assert_eq!(inside(&env, &name, "cat /workspace/mine.txt"), "mine\n");
    let err = env.fails(&["checkout", &name], 2);
    assert!(err.contains(&format!("jj new forage/{name}")), "{err}");
    env.ok(&["down", &name, "--discard"]);
}
