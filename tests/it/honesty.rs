//! Every command's exit code and last line tell the truth: an agent that died is
//! not "up", work thrown away is named first, a dry run plans what the real run
//! does, and names the agent chose reach the terminal escaped.

use std::path::PathBuf;

use crate::git::{git, repo};
use crate::support::*;

fn template(env: &Env, name: &str, body: &str) -> PathBuf {
    let dir = env.path("tpl");
    crate::templates::write(&dir.join(format!("{name}.yaml")), body);
    dir
}

#[test]
fn an_agent_that_dies_as_it_starts_fails_up_with_its_code_and_output() {
    let env = Env::new();
    let ws = env.mkdir("ws");
    // Exits at once with an error, after printing something (an escape sequence too).
    let dir = template(
        &env,
        "dies",
        "host_image: {require: [sh], tools: [sh, echo]}\nagent: {command: [sh, -c, \"echo cannot start: no API key; echo \\\"\\e[31mred\\\"; exit 3\"]}\n",
    );
    let out = env
        .cmd(&["up", "dies", "-t", "dies", "--workspace", ws.to_str().unwrap()])
        .env("FORAGE_TEMPLATES_PATH", &dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("exited with code 3 as it started") && stderr.contains("cannot start: no API key"),
        "{stderr}"
    );
    assert!(
        stderr.contains("\\x1b[31mred") && !stderr.contains('\x1b'),
        "the agent's escape sequence is shown escaped: {stderr:?}"
    );
    assert!(String::from_utf8(out.stdout).unwrap().is_empty(), "no `is up`");
    env.assert_nothing_left();

    // A program that is not in the image: refused before it is started.
    let dir = template(
        &env,
        "absent",
        "host_image: {require: [sh], tools: [sh]}\nagent: {command: [claude, --dangerously-skip-permissions]}\n",
    );
    let out = env
        .cmd(&["up", "absent", "-t", "absent", "--workspace", ws.to_str().unwrap()])
        .env("FORAGE_TEMPLATES_PATH", &dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("the agent's program \"claude\" is not in image"),
        "{}",
        describe(&out)
    );
    env.assert_nothing_left();

    // An agent that finishes its task (exit 0) at once is fine; one that dies
    // later is reported by attach, with its code, instead of attaching to nothing.
    let dir = template(
        &env,
        "later",
        "host_image: {require: [sh], tools: [sh, sleep]}\nagent: {command: [sh, -c, 'sleep 0.5; exit 5']}\n",
    );
    let out = env
        .cmd(&["up", "later", "-t", "later", "--workspace", ws.to_str().unwrap()])
        .env("FORAGE_TEMPLATES_PATH", &dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", describe(&out));
    assert!(eventually(20, || inspect("forage-later").and_then(|c| c.state).and_then(|s| s.running) == Some(false)));
    let stderr = env.fails(&["attach", "later"], 4);
    assert!(
        stderr.contains("not running (exited, exit code 5)") && stderr.contains("forage-ctl logs later"),
        "{stderr}"
    );
    env.ok(&["down", "later"]);
    env.assert_nothing_left();
}

#[test]
fn discard_and_dry_run_name_the_work_they_would_throw_away() {
    let env = Env::new();
    let repo = repo(&env, "repo");
    let name = env.unique("lossy");
    env.ok(&["up", &name, "--git-worktree", repo.to_str().unwrap()]);
    env.ok(&[
        "exec",
        &name,
        "--",
        "sh",
        "-c",
        "cd /workspace && echo x > x.txt && git add x.txt && git commit -qm 'the only copy' && echo y > dirty.txt",
    ]);
    let before = crate::git::repo_state(&repo);

    let plan = env.ok(&["down", &name, "--dry-run"]);
    assert!(plan.contains("would archive") && plan.contains("the only copy") && plan.contains("dirty.txt"), "{plan}");
    let plan = env.ok(&["down", &name, "--dry-run", "--discard"]);
    assert!(plan.contains("would throw away") && plan.contains("the only copy"), "{plan}");
    let json = env.json(&["down", &name, "--dry-run", "--json"]);
    assert!(json[0]["at_stake"]["unsynced"][0].as_str().unwrap().contains("the only copy"), "{json}");
    assert!(json[0]["at_stake"]["files"].to_string().contains("dirty.txt"), "{json}");
    // Dry runs changed nothing.
    assert_eq!(crate::git::repo_state(&repo), before);
    assert!(inspect(&format!("forage-{name}")).is_some());

    let out = env.run(&["down", &name, "--discard"]);
    assert!(out.status.success(), "{}", describe(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("throwing away") && stderr.contains("the only copy") && stderr.contains("dirty.txt"),
        "{stderr}"
    );
    assert!(crate::git::archive_refs(&repo).is_empty());
    env.assert_nothing_left();
}

/// `down --discard` of a git or jj sandbox kills its agent at once (nothing of
/// it is kept); a direct sandbox's agent, whose files are the user's, and any
/// sandbox's agent on a plain `down`, get the stop signal and time to finish.
#[test]
fn down_discard_kills_a_git_sandbox_at_once_but_lets_a_direct_one_finish() {
    let env = Env::new();
    let out = env.mkdir("out");
    let ws = env.mkdir("ws");
    let repo = repo(&env, "repo");
    // The agent says it is ready, and on SIGTERM leaves a mark outside the workspace.
    let dir = template(
        &env,
        "term",
        &format!(
            "host_image: {{require: [sh], tools: [sh, touch, sleep]}}\nagent: {{command: [sh, -c, \"trap 'touch /out/$FORAGE_SANDBOX-term; exit 0' TERM; touch /out/$FORAGE_SANDBOX-ready; while :; do sleep 1 & wait $!; done\"]}}\nmounts: [{{source: {}, target: /out, read_only: false}}]\n",
            out.display()
        ),
    );
    let up = |name: &str, workspace: &[&str]| {
        let mut args = vec!["up", name, "-t", "term"];
        args.extend_from_slice(workspace);
        let o = env.cmd(&args).env("FORAGE_TEMPLATES_PATH", &dir).output().unwrap();
        assert!(o.status.success(), "{}", describe(&o));
        assert!(eventually(20, || out.join(format!("{name}-ready")).exists()), "the agent of {name} never started");
    };
    let (ws, repo) = (ws.to_str().unwrap(), repo.to_str().unwrap());
    up("direct", &["--workspace", ws]);
    up("kept", &["--git-worktree", repo]);
    up("thrown", &["--git-worktree", repo]);
    env.ok(&["down", "direct", "--discard"]);
    env.ok(&["down", "kept"]);
    env.ok(&["down", "thrown", "--discard"]);
    assert!(out.join("direct-term").exists(), "a direct sandbox's agent gets its stop signal");
    assert!(out.join("kept-term").exists(), "a plain down gives the agent its stop signal");
    assert!(!out.join("thrown-term").exists(), "down --discard of a git sandbox kills its agent at once");
    env.assert_nothing_left_but_archives();
}

#[test]
fn gc_force_acts_on_exactly_the_findings_its_dry_run_lists() {
    let env = Env::new();
    let repo = repo(&env, "repo");
    let ws = env.mkdir("ws");
    // A broken sandbox with its container (its `up` killed after making it), an
    // orphan container and workspace (their record deleted by hand), a stale temp file.
    let broken = env.unique("broken");
    env.killed_after(&["up", &broken, "--git-worktree", repo.to_str().unwrap()], "container");
    let lost = env.unique("lost");
    env.ok(&["up", &lost, "--git-worktree", repo.to_str().unwrap()]);
    std::fs::remove_file(env.home.join(format!("sandboxes/{lost}.json"))).unwrap();
    let direct = env.unique("direct");
    env.ok(&["up", &direct, "--workspace", ws.to_str().unwrap()]);
    std::fs::write(env.home.join("sandboxes/.x.json.999999.tmp"), "{").unwrap();

    let plan = |args: &[&str]| {
        let mut found: Vec<(String, String)> = env
            .json(args)
            .as_array()
            .unwrap()
            .iter()
            .map(|f| (f["kind"].as_str().unwrap().to_owned(), f["subject"].as_str().unwrap().to_owned()))
            .collect();
        found.sort();
        found
    };
    let dry = plan(&["gc", "--json"]);
    let kinds: Vec<&str> = dry.iter().map(|(k, _)| k.as_str()).collect();
    for kind in ["broken-sandbox", "orphan-container", "orphan-workspace", "stale-temp-file"] {
        assert!(kinds.contains(&kind), "{kind}: {dry:?}");
    }
    let forced = plan(&["gc", "--force", "--json"]);
    assert_eq!(forced, dry, "--force acted on something its dry run did not list, or the other way round");
    assert_eq!(env.json(&["gc", "--json"]), serde_json::json!([]));
    env.ok(&["down", &direct]);
    env.assert_nothing_left_but_archives();
}

#[test]
fn names_the_agent_chose_arrive_escaped_and_exec_takes_its_command_as_docker_does() {
    let env = Env::new();
    let repo = repo(&env, "repo");
    let name = env.unique("esc");
    env.ok(&["up", &name, "--git-worktree", repo.to_str().unwrap()]);
    // Without `--`: everything after the name and forage's options is the command's.
    let out = env.ok(&[
        "exec",
        &name,
        "sh",
        "-c",
        "cd /workspace && touch \"$(printf 'evil\\033]0;owned\\007\\033[31mred')\" && ls | wc -l",
    ]);
    assert_eq!(out.trim(), "2", "a.txt and the new file: {out}");
    for args in [vec!["status", name.as_str()], vec!["down", name.as_str(), "--dry-run"]] {
        let out = env.run(&args);
        assert!(out.status.success(), "{}", describe(&out));
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(!text.contains('\x1b') && !text.contains('\x07'), "{args:?}: raw control bytes: {text:?}");
        assert!(text.contains("evil\\x1b]0;owned\\x07\\x1b[31mred"), "{args:?}: {text}");
    }
    env.ok(&["down", &name, "--discard"]);
    git(&repo, &["status"]);
}
