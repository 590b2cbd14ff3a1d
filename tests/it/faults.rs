//! Crashes, interrupts and load: whatever happens to a forage-ctl process, the
//! user is left with a whole sandbox or with nothing, and `gc` can tell which.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Stdio;

use crate::git::{archive_refs, git, repo, repo_state, repo_state_but_archives};
use crate::support::*;

/// Steps of `up` after which the fault hooks fire, per workspace mode.
/// (`init` fires with or without init commands; after `ready` the sandbox is whole;
/// `secrets` is the copies of the `--secret` files `up_args` gives.)
const DIRECT_STEPS: &[&str] = &["record", "secrets", "container", "start", "init", "ready"];
const GIT_STEPS: &[&str] =
    &["record", "secrets", "git-branch", "git-worktree", "private-repo", "container", "start", "init", "ready"];
const JJ_STEPS: &[&str] = &["record", "secrets", "private-repo", "jj-workspace", "container", "start", "init", "ready"];

/// A jj repository's workspaces and bookmarks.
fn jj_state(repo: &Path) -> String {
    crate::jj::workspaces(repo).join("\n") + "\n" + &crate::jj::jj(repo, &["bookmark", "list", "-T", "name ++ \"\\n\""])
}

/// The `up` arguments for `name` in `mode`, with a secret (which `up` copies).
fn up_args(env: &Env, mode: &str, name: &str, repo: &Path) -> Vec<String> {
    let ws = env.mkdir("direct-ws");
    let (flag, path) = match mode {
        "direct" => ("--workspace", ws),
        "jj" => ("--jj", repo.to_path_buf()),
        _ => ("--git-worktree", repo.to_path_buf()),
    };
    let key = crate::templates::write(&env.path("keys/probe"), "probe-value");
    let secret = format!("probe={}", key.display());
    vec!["up".into(), name.into(), flag.into(), path.to_str().unwrap().into(), "--secret".into(), secret]
}

#[test]
fn sigkill_after_any_step_of_up_then_gc_force_leaves_nothing() {
    let env = Env::new();
    let repo = repo(&env, "repo");
    let before = repo_state(&repo);
    let jj_repo = crate::jj::jj_repo(&env, "jj-repo", true);
    let jj_before = jj_state(&jj_repo);
    for (mode, steps) in [("direct", DIRECT_STEPS), ("git", GIT_STEPS), ("jj", JJ_STEPS)] {
        for step in steps {
            let name = env.unique(&format!("kill-{step}"));
            let repo = if mode == "jj" { jj_repo.clone() } else { repo.clone() };
            let args = up_args(&env, mode, &name, &repo);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            env.killed_after(&args, step);

            let list = env.json(&["list", "--json"]);
            if *step == "ready" {
                // Killed after its last step: a whole sandbox, which gc leaves alone.
                assert_eq!(list[0]["status"], "running", "{mode}/{step}: {list}");
                assert_eq!(env.json(&["gc", "--force", "--json"]), serde_json::json!([]), "{mode}/{step}");
                env.ok(&["down", &name]);
            } else {
                assert_eq!(list[0]["status"], "broken", "{mode}/{step}: {list}");
                let dry = env.ok(&["gc"]);
                assert!(dry.contains(&name) && dry.contains("would"), "{mode}/{step}: {dry}");
                env.ok(&["gc", "--force"]);
            }
            env.assert_nothing_left_but_archives();
            if mode == "jj" {
                assert_eq!(
                    jj_state(&jj_repo),
                    jj_before,
                    "{mode}/{step}: the repository's workspaces are as they were"
                );
            } else {
                assert_eq!(repo_state(&repo), before, "{mode}/{step}: the repository is as it was");
            }
            assert!(!env.home.join("workspaces").join(&name).exists());
            assert_eq!(env.json(&["gc", "--json"]), serde_json::json!([]));
        }
    }
}

#[test]
fn down_also_finishes_a_killed_up() {
    let env = Env::new();
    let repo = repo(&env, "repo");
    let before = repo_state(&repo);
    let name = env.unique("killed");
    env.killed_after(&["up", &name, "--git-worktree", repo.to_str().unwrap()], "start");
    env.ok(&["down", &name]);
    env.assert_nothing_left_but_archives();
    assert_eq!(repo_state(&repo), before);
}

/// An `up` held after one of its steps by FORAGE_DEBUG_PAUSE_AFTER, waiting for a
/// signal, so a test can interrupt it (or break the world under it) at a known point.
pub struct PausedUp {
    child: std::process::Child,
    stderr: BufReader<std::process::ChildStderr>,
}

impl PausedUp {
    /// Starts `up` and returns once it says it has paused after `step`.
    pub fn start(env: &Env, args: &[&str], step: &str) -> Self {
        let mut child = env
            .cmd(args)
            .env("FORAGE_DEBUG_PAUSE_AFTER", step)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let mut seen = String::new();
        while !seen.contains(&format!("paused after {step}")) {
            let mut line = String::new();
            if stderr.read_line(&mut line).unwrap() == 0 {
                let status = child.wait().unwrap();
                panic!("up ended ({status}) before pausing after {step}: {seen}");
            }
            seen.push_str(&line);
        }
        PausedUp { child, stderr }
    }

    /// Sends `signal` and waits for `up` to finish.
    pub fn signal(mut self, signal: nix::sys::signal::Signal) -> std::process::Output {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.child.id() as i32), signal).unwrap();
        let mut out = self.child.wait_with_output().unwrap();
        std::io::Read::read_to_end(self.stderr.get_mut(), &mut out.stderr).unwrap();
        out
    }
}

#[test]
fn ctrl_c_sigterm_or_sighup_after_any_step_of_up_rolls_back_by_itself() {
    use nix::sys::signal::Signal;
    let env = Env::new();
    let repo = repo(&env, "repo");
    let before = repo_state(&repo);
    let jj_repo = crate::jj::jj_repo(&env, "jj-repo", true);
    let jj_before = jj_state(&jj_repo);
    let signals = [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP];
    for (mode, steps) in [("direct", DIRECT_STEPS), ("git", GIT_STEPS), ("jj", JJ_STEPS)] {
        for (i, step) in steps.iter().enumerate() {
            let signal = signals[i % signals.len()];
            let name = env.unique(&format!("int-{step}"));
            let repo = if mode == "jj" { jj_repo.clone() } else { repo.clone() };
            let args = up_args(&env, mode, &name, &repo);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let out = PausedUp::start(&env, &args, step).signal(signal);
            assert_eq!(out.status.code(), Some(1), "{mode}/{step}/{signal}: {}", describe(&out));
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                err.contains("interrupted; everything this command had created was removed"),
                "{mode}/{step}/{signal}: {}",
                describe(&out)
            );
            // No gc needed: up undid its own steps.
            env.assert_nothing_left();
            if mode == "jj" {
                assert_eq!(jj_state(&jj_repo), jj_before, "{mode}/{step}");
            } else {
                assert_eq!(repo_state(&repo), before, "{mode}/{step}");
            }
        }
    }
}

#[test]
fn sixteen_concurrent_ups_with_duplicates_while_list_and_down_run() {
    let env = Env::new();
    let repo = repo(&env, "repo");
    let before = repo_state(&repo);
    let r = repo.to_str().unwrap().to_owned();
    // Sandboxes for the concurrent downs to remove.
    let doomed: Vec<String> = (0..3).map(|i| env.unique(&format!("doomed{i}"))).collect();
    for d in &doomed {
        env.ok(&["up", d, "--git-worktree", &r]);
    }
    let dup = env.unique("dup");
    let names: Vec<String> =
        (0..12).map(|i| env.unique(&format!("load{i}"))).chain(std::iter::repeat_n(dup.clone(), 4)).collect();

    let ups: Vec<_> = names
        .iter()
        .map(|n| {
            env.cmd(&["up", n, "--git-worktree", &r]).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap()
        })
        .collect();
    let downs: Vec<_> = doomed
        .iter()
        .map(|d| env.cmd(&["down", d]).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap())
        .collect();
    // list keeps telling a consistent story while all this runs.
    for _ in 0..5 {
        let out = env.run(&["list", "--json"]);
        assert!(out.status.success(), "{}", describe(&out));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).expect("list --json is valid JSON");
    }
    let results: Vec<_> = ups.into_iter().map(|c| c.wait_with_output().unwrap()).collect();
    for d in downs {
        let out = d.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", describe(&out));
    }

    for (name, out) in names.iter().zip(&results).take(12) {
        assert!(out.status.success(), "{name}: {}", describe(out));
    }
    let dup_codes: Vec<Option<i32>> = results[12..].iter().map(|o| o.status.code()).collect();
    assert_eq!(dup_codes.iter().filter(|c| **c == Some(0)).count(), 1, "exactly one duplicate wins: {dup_codes:?}");
    assert_eq!(dup_codes.iter().filter(|c| **c == Some(4)).count(), 3, "the others exit 4: {dup_codes:?}");

    let list = env.json(&["list", "--json"]);
    let rows = list.as_array().unwrap();
    assert_eq!(rows.len(), 13, "{list}");
    assert!(rows.iter().all(|r| r["status"] == "running"), "{list}");
    assert_eq!(git(&repo, &["worktree", "list"]).lines().count(), 14);

    env.ok(&["down", "--all"]);
    env.assert_nothing_left();
    assert_eq!(repo_state(&repo), before);
}

#[test]
fn gc_cleans_up_after_a_record_deleted_by_hand_archiving_the_work() {
    let env = Env::new();
    let repo = repo(&env, "repo");
    let jj_repo = crate::jj::jj_repo(&env, "jj-repo", true);
    let before = repo_state(&repo);
    let (g, j) = (env.unique("lostgit"), env.unique("lostjj"));
    env.ok(&["up", &g, "--git-worktree", repo.to_str().unwrap()]);
    env.ok(&["up", &j, "--jj", jj_repo.to_str().unwrap()]);
    env.ok(&["exec", &g, "--", "sh", "-c", "echo precious > /workspace/precious.txt"]);
    env.ok(&["exec", &j, "--", "sh", "-c", "echo precious > /workspace/precious.txt"]);
    for n in [&g, &j] {
        std::fs::remove_file(env.home.join("sandboxes").join(format!("{n}.json"))).unwrap();
    }

    let report = env.json(&["gc", "--json"]);
    let kinds: Vec<&str> = report.as_array().unwrap().iter().map(|f| f["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds.iter().filter(|k| **k == "orphan-container").count(), 2, "{report}");
    assert_eq!(kinds.iter().filter(|k| **k == "orphan-workspace").count(), 2, "{report}");

    env.ok(&["gc", "--force"]);
    env.assert_nothing_left_but_archives();
    // The git work is in an archive ref; the repository is otherwise as it was.
    let archives = archive_refs(&repo);
    assert_eq!(archives.len(), 1, "{archives:?}");
    assert_eq!(git(&repo, &["show", &format!("{}:precious.txt", archives[0])]), "precious\n");
    assert_eq!(repo_state_but_archives(&repo), before);
    // The jj work is bookmarked, and the workspace forgotten.
    let files = crate::jj::jj(&jj_repo, &["file", "list", "-r", &format!("bookmarks(glob:\"forage/archive/{j}/*\")")]);
    assert!(files.contains("precious.txt"), "{files}");
    assert!(!crate::jj::jj(&jj_repo, &["workspace", "list"]).contains(&format!("forage-{j}")));
    // gc remembered its archives, so restore finds them.
    env.ok(&["restore", &g]);
    assert_eq!(git(&repo, &["show", &format!("forage-{g}:precious.txt")]), "precious\n");
}

#[test]
fn gc_never_deletes_a_repository_it_cannot_trace_back() {
    let env = Env::new();
    let stray = env.home.join("workspaces").join(env.unique("stray"));
    std::fs::create_dir_all(&stray).unwrap();
    git(&stray, &["init", "-q", "-b", "main"]);
    std::fs::write(stray.join("work.txt"), "someone's work\n").unwrap();
    let plain = env.home.join("workspaces").join(env.unique("plain"));
    std::fs::create_dir_all(&plain).unwrap();

    let report = env.json(&["gc", "--force", "--json"]);
    let about =
        |p: &Path| report.as_array().unwrap().iter().find(|f| f["subject"] == p.to_str().unwrap()).cloned().unwrap();
    assert!(about(&stray)["action"].as_str().unwrap().contains("by hand"), "{report}");
    assert!(stray.join("work.txt").exists(), "a repository forage cannot trace is left alone");
    assert!(!plain.exists(), "an empty leftover directory is removed");
}

/// Steps of a teardown after which `FORAGE_DEBUG_KILL_AFTER` fires.
const DOWN_STEPS: &[&str] = &["removed-container", "archived", "removed-workspace"];

#[test]
fn sigkill_after_any_step_of_down_then_down_again_loses_nothing_and_leaves_nothing() {
    let env = Env::new();
    let repo = repo(&env, "repo");
    let before = repo_state(&repo);
    let jj_repo = crate::jj::jj_repo(&env, "jj-repo", true);
    let jj_before = crate::jj::workspaces(&jj_repo);
    for mode in ["direct", "git", "jj"] {
        for step in DOWN_STEPS {
            let name = env.unique(&format!("downkill-{step}"));
            let repo = if mode == "jj" { jj_repo.clone() } else { repo.clone() };
            let args = up_args(&env, mode, &name, &repo);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            env.ok(&args);
            // The agent's work: a file only the workspace has.
            let ws = match mode {
                "direct" => env.path("direct-ws"),
                _ => env.home.join("workspaces").join(&name),
            };
            let work = format!("work-{name}.txt");
            std::fs::write(ws.join(&work), "the agent's work\n").unwrap();

            env.killed_after(&["down", &name], step);
            let list = env.json(&["list", "--json"]);
            assert_eq!(list[0]["status"], "broken", "{mode}/{step}: {list}");

            env.ok(&["down", &name]);
            env.assert_nothing_left_but_archives();
            assert!(!env.home.join("workspaces").join(&name).exists(), "{mode}/{step}");
            match mode {
                "direct" => assert!(ws.join(&work).exists(), "{mode}/{step}: a direct workspace is the user's"),
                "git" => {
                    assert_eq!(repo_state_but_archives(&repo), before, "{mode}/{step}");
                    let archive = git(
                        &repo,
                        &[
                            "for-each-ref",
                            "--sort=-refname",
                            "--count=1",
                            "--format=%(refname)",
                            &format!("refs/forage/archive/{name}"),
                        ],
                    );
                    let files = git(&repo, &["ls-tree", "-r", "--name-only", archive.trim()]);
                    assert!(files.contains(&work), "{mode}/{step}: {files}");
                }
                _ => {
                    assert_eq!(crate::jj::workspaces(&jj_repo), jj_before, "{mode}/{step}");
                    let newest = format!("latest(bookmarks(glob:\"forage/archive/{name}/*\"))");
                    let files = crate::jj::jj(&repo, &["file", "list", "-r", &newest]);
                    assert!(files.contains(&work), "{mode}/{step}: {files}");
                }
            }
        }
    }
    assert_eq!(env.json(&["gc", "--json"]), serde_json::json!([]));
}

/// A container that another party is removing (the engine answers 409, "removal
/// already in progress"): forage's `remove` returns only once the container is
/// gone, because `down` deletes the workspace it mounts right after. Several
/// removals race on one running container; every one of them, when it returns,
/// must find the container gone.
#[test]
fn a_removal_already_in_progress_is_waited_for_before_remove_returns() {
    use forage::runtime::Runtime;

    let env = Env::new();
    let ws = env.mkdir("ws");
    let name = env.unique("rm-race");
    env.ok(&["up", &name, "--workspace", ws.to_str().unwrap()]);
    let container = format!("forage-{name}");
    let engine = forage::runtime::docker::Docker::new(std::env::var("DOCKER_HOST").ok().as_deref());

    // The raw engine first, on the same kind of container: concurrent removals
    // do meet "in progress" (so the check below is a real race, not a formality).
    let raw = docker();
    let conflicts = block_on(async {
        let options = bollard::query_parameters::RemoveContainerOptions { force: true, ..Default::default() };
        let removals = (0..4).map(|_| raw.remove_container(&container, Some(options.clone())));
        futures_util::future::join_all(removals).await
    })
    .into_iter()
    .filter(|r| matches!(r, Err(bollard::errors::Error::DockerResponseServerError { status_code: 409, .. })))
    .count();
    assert!(conflicts > 0, "four concurrent removals of a running container never met a removal in progress");
    env.ok(&["down", &name]);

    env.ok(&["up", &name, "--workspace", ws.to_str().unwrap()]);
    let gone_on_return = block_on(async {
        let removals = (0..4).map(|_| async {
            engine.remove(&container).await.expect("remove");
            // Right when remove returned: is the container still there?
            match raw.inspect_container(&container, None).await {
                Err(e) => matches!(e, bollard::errors::Error::DockerResponseServerError { status_code: 404, .. }),
                Ok(_) => false,
            }
        });
        futures_util::future::join_all(removals).await
    });
    assert_eq!(gone_on_return, vec![true; 4], "a remove returned while the container was still being removed");

    let down = env.ok(&["down", &name]);
    assert!(down.contains(&name), "{down}");
    env.assert_nothing_left();
    assert!(ws.is_dir(), "a direct workspace is the user's own");
}
