//! The engine stopping, crashing and coming back under forage: `list`,
//! `status` and `down` tell the truth throughout, and nothing is lost or left.
//! Each test runs its own engine (private_engine.rs: a dockerd, or a Podman
//! service, as the run is aimed at), so stopping it cannot disturb the tests
//! that share the machine's engine.

use std::path::Path;

use nix::sys::signal::Signal;

use crate::faults::PausedUp;
use crate::git::{archive_refs, git, repo, repo_state_but_archives};
use crate::private_engine::PrivateEngine;
use crate::support::*;

/// While the engine is down, every command that needs it fails with exit 5 and a
/// message naming the engine's address and how to start it, and changes nothing.
fn assert_engine_down_refused(env: &Env, engine: &PrivateEngine, commands: &[&[&str]]) {
    let files = env.home_files();
    for args in commands {
        let err = env.fails(args, 5);
        assert!(
            err.contains(engine.host().trim_start_matches("unix://")) && err.contains(engine.start_advice()),
            "{args:?}: {err}"
        );
        assert_eq!(err.lines().count(), 1, "{args:?}: one line: {err}");
    }
    assert_eq!(env.home_files(), files, "a command refused for want of an engine changed FORAGE_HOME");
}

/// The shared engine's bridge, which a careless second dockerd deletes.
fn shared_bridge_exists() -> bool {
    Path::new("/sys/class/net/docker0").exists()
}

#[test]
fn engine_restart_under_a_sandbox_list_status_and_down_stay_truthful_and_lose_nothing() {
    let bridge = shared_bridge_exists();
    let mut engine = PrivateEngine::start();
    let env = Env::on_engine(&engine.host());
    let repo = repo(&env, "repo");
    let before = repo_state_but_archives(&repo);
    let name = env.unique("restart");
    env.ok(&["up", &name, "--git-worktree", repo.to_str().unwrap(), "--network", "none"]);
    assert_eq!(env.json(&["status", &name, "--json"])["status"], "running");

    // The agent's work: a commit on its branch and a file it has not committed.
    let ws = env.home.join("workspaces").join(&name);
    std::fs::write(ws.join("committed.txt"), "kept\n").unwrap();
    git(&ws, &["add", "committed.txt"]);
    git(&ws, &["commit", "-qm", "agent work"]);
    std::fs::write(ws.join("loose.txt"), "also kept\n").unwrap();
    let branch = format!("refs/heads/forage-{name}");
    let tip = git(&repo, &["rev-parse", &branch]);
    let during = repo_state_but_archives(&repo);

    engine.stop();
    assert_engine_down_refused(
        &env,
        &engine,
        &[&["list"], &["list", "--json"], &["status", &name], &["down", &name], &["gc", "--force"]],
    );
    assert_eq!(repo_state_but_archives(&repo), during, "a refused down touched the repository");
    assert!(ws.join("loose.txt").exists());

    engine.restart();
    // dockerd stopped the container on its way down; Podman's service left it
    // running. forage reports what is.
    let state = if engine.is_podman() { "running" } else { "exited" };
    let list = env.json(&["list", "--json"]);
    assert_eq!(list.as_array().unwrap().len(), 1, "{list}");
    assert_eq!(list[0]["status"], state, "{list}");
    let status = env.json(&["status", &name, "--json"]);
    assert_eq!(status["status"], state, "{status}");
    assert_eq!(status["container"]["state"], state, "{status}");
    let text = env.ok(&["status", &name]);
    assert!(text.contains(&format!("status:     {state}")) && text.contains("1 commit ahead"), "{text}");
    assert_eq!(env.json(&["gc", "--json"]), serde_json::json!([]), "a stopped sandbox is whole, not garbage");

    // It is still a working sandbox, and `down` keeps every byte of the work.
    if !engine.is_podman() {
        env.ok(&["start", &name]);
    }
    assert_eq!(env.ok(&["exec", &name, "--", "cat", "/workspace/loose.txt"]), "also kept\n");
    env.ok(&["down", &name]);
    let archives = archive_refs(&repo);
    assert_eq!(archives.len(), 1, "{archives:?}");
    let archive = archives[0].as_str();
    let archived_files = git(&repo, &["ls-tree", "-r", "--name-only", archive]);
    assert!(archived_files.contains("committed.txt") && archived_files.contains("loose.txt"), "{archived_files}");
    assert!(git(&repo, &["merge-base", "--is-ancestor", tip.trim(), archive]).is_empty());

    env.assert_nothing_left_but_archives();
    assert_eq!(repo_state_but_archives(&repo), before);
    assert!(!ws.exists());
    assert_eq!(shared_bridge_exists(), bridge, "the private engine touched the host's docker0");
}

#[test]
fn engine_crash_in_the_middle_of_up_leaves_a_broken_sandbox_that_down_finishes() {
    let mut engine = PrivateEngine::start();
    let env = Env::on_engine(&engine.host());
    let repo = repo(&env, "repo");
    let before = repo_state_but_archives(&repo);
    let name = env.unique("crash");

    // `up` has made the branch, the worktree and the container, and started it,
    // when the engine dies; Ctrl-C then asks `up` to roll back, which it cannot.
    let up =
        PausedUp::start(&env, &["up", &name, "--git-worktree", repo.to_str().unwrap(), "--network", "none"], "start");
    engine.crash();
    let out = up.signal(Signal::SIGINT);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    assert!(
        err.contains("interrupted; rolling back failed")
            && err.contains(if engine.is_podman() {
                "the Podman service stopped answering"
            } else {
                "the Docker engine stopped answering"
            })
            && err.contains(&format!("`forage-ctl down {name}` finishes the cleanup")),
        "{err}"
    );
    assert!(!err.contains("everything this command had created was removed"), "{err}");
    assert_engine_down_refused(&env, &engine, &[&["list"], &["status", &name], &["down", &name]]);

    engine.restart();
    let list = env.json(&["list", "--json"]);
    assert_eq!(list[0]["status"], "broken", "{list}");
    assert_eq!(env.json(&["status", &name, "--json"])["status"], "broken");
    let findings = env.ok(&["gc"]);
    assert!(findings.contains(&format!("broken-sandbox: {name}")), "{findings}");

    env.ok(&["down", &name]);
    env.assert_nothing_left();
    assert_eq!(repo_state_but_archives(&repo), before);
    assert_eq!(env.json(&["gc", "--json"]), serde_json::json!([]));
}
