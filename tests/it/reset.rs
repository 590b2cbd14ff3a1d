//! `reset`: a new container from the template as it is now, with the options `up`
//! was given; the workspace, its branch and the agent's work are not touched.

use std::path::Path;

use crate::git::{git, repo};
use crate::support::*;
use crate::templates::{shell_image, write};

fn container_id(name: &str) -> String {
    inspect(&format!("forage-{name}")).and_then(|c| c.id).unwrap_or_default()
}

/// A template whose agent writes what it sees (env, secret and arguments) into
/// the workspace (whole, by rename, so the test never reads it half written),
/// then waits.
fn agent_template(dir: &Path, image: &str, flavour: &str, init: &str) -> std::path::PathBuf {
    let agent = "[sh, -c, 'echo \"$FLAVOUR $EXTRA [$TOKEN] $*\" > /workspace/.seen; mv /workspace/.seen /workspace/seen; exec sleep 1000', agent]";
    write(
        &dir.join("resettable.yaml"),
        &format!(
            "image: {image}\nagent:\n  command: {agent}\n  env: {{FLAVOUR: {flavour}}}\n  secrets: {{TOKEN: tok}}\ninit: [{init}]\nresources: {{memory: 2g}}\n"
        ),
    )
}

#[test]
fn reset_makes_a_new_container_from_the_edited_template_and_keeps_the_workspace_and_options() {
    let env = Env::new();
    let image = shell_image(&env);
    let dir = env.path("tpl");
    agent_template(&dir, &image, "one", "'true'");
    let secret = write(&env.path("keys/tok"), "tok-value");
    let repo = repo(&env, "repo");
    let name = env.unique("reset");
    let run = |args: &[&str]| env.cmd(args).env("FORAGE_TEMPLATES_PATH", &dir).output().unwrap();
    let secret_arg = format!("tok={}", secret.display());
    let up = [
        "up",
        &name,
        "-t",
        "resettable",
        "--git-worktree",
        repo.to_str().unwrap(),
        "--secret",
        &secret_arg,
        "--env",
        "EXTRA=extra",
        "--memory",
        "1g",
        "--",
        "arg1",
    ];
    let out = run(&up);
    assert!(out.status.success(), "{}", describe(&out));
    let ws = env.home.join("workspaces").join(&name);
    assert!(eventually(10, || ws.join("seen").exists()));
    assert_eq!(std::fs::read_to_string(ws.join("seen")).unwrap(), "one extra [tok-value] arg1\n");

    // The agent's work: a commit in its repository and a file it has not committed.
    let script = "cd /workspace && echo committed > work.txt && git add work.txt && git commit -qm 'agent work' && echo uncommitted > loose.txt";
    env.ok(&["exec", &name, "--", "sh", "-c", script]);
    std::fs::remove_file(ws.join("seen")).unwrap();
    let refs = git(&repo, &["for-each-ref", "--format=%(refname) %(objectname)"]);
    let worktrees = git(&repo, &["worktree", "list", "--porcelain"]);
    let old_id = container_id(&name);

    // The template changes: a new env value and an init command.
    agent_template(&dir, &image, "two", "'echo initialised > /tmp/init-ran'");
    let out = run(&["reset", &name]);
    assert!(out.status.success(), "{}", describe(&out));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains(&format!("sandbox {name} has a new container forage-{name}")), "{said}");

    let new_id = container_id(&name);
    assert!(!new_id.is_empty() && new_id != old_id, "a new container: {old_id} -> {new_id}");
    assert!(eventually(10, || ws.join("seen").exists()));
    assert_eq!(
        std::fs::read_to_string(ws.join("seen")).unwrap(),
        "two extra [tok-value] arg1\n",
        "the template's new env, and up's --env, secret and arguments"
    );
    assert_eq!(env.ok(&["exec", &name, "--", "cat", "/tmp/init-ran"]), "initialised\n", "the new init ran");
    let c = inspect(&format!("forage-{name}")).unwrap();
    if engine_applies_limits() {
        assert_eq!(c.host_config.unwrap().memory, Some(1 << 30), "up's --memory, over the template's 2g");
    } else {
        assert_limits_dropped_warning(&out);
    }
    assert_eq!(std::fs::read_to_string(ws.join("loose.txt")).unwrap(), "uncommitted\n");
    assert_eq!(git(&repo, &["for-each-ref", "--format=%(refname) %(objectname)"]), refs, "no ref moved");
    assert_eq!(git(&repo, &["worktree", "list", "--porcelain"]), worktrees);
    assert_eq!(env.ok(&["exec", &name, "--", "git", "-C", "/workspace", "log", "--format=%s", "-1"]), "agent work\n");
    let status = env.json(&["status", &name, "--json"]);
    assert_eq!(status["status"], "running", "{status}");
    assert_eq!(status["record"]["options"]["memory"], "1g", "up's --memory is kept: {status}");

    // A container removed behind forage's back: reset makes a new one.
    let opts = bollard::query_parameters::RemoveContainerOptions { force: true, ..Default::default() };
    block_on(docker().remove_container(&format!("forage-{name}"), Some(opts))).unwrap();
    let list = env.json(&["list", "--json"]);
    assert_eq!(list[0]["status"], "missing");
    let out = run(&["reset", &name]);
    assert!(out.status.success(), "{}", describe(&out));
    let list = env.json(&["list", "--json"]);
    assert_eq!(list[0]["status"], "running");

    env.ok(&["down", &name]);
    env.assert_nothing_left_but_archives();
}

#[test]
fn reset_refuses_what_it_cannot_do_and_changes_nothing() {
    let env = Env::new();
    let image = shell_image(&env);
    let dir = env.path("tpl");
    let template = agent_template(&dir, &image, "one", "'true'");
    let secret = write(&env.path("keys/tok"), "tok-value");
    let ws = env.mkdir("ws");
    let name = env.unique("refuse");
    let run = |args: &[&str]| env.cmd(args).env("FORAGE_TEMPLATES_PATH", &dir).output().unwrap();
    let secret_arg = format!("tok={}", secret.display());
    let out = run(&["up", &name, "-t", "resettable", "--workspace", ws.to_str().unwrap(), "--secret", &secret_arg]);
    assert!(out.status.success(), "{}", describe(&out));
    let id = container_id(&name);
    let record = std::fs::read(env.home.join("sandboxes").join(format!("{name}.json"))).unwrap();
    let unchanged = |what: &str| {
        assert_eq!(container_id(&name), id, "{what}: the container was replaced");
        assert_eq!(inspect(&format!("forage-{name}")).unwrap().state.unwrap().running, Some(true), "{what}");
        let now = std::fs::read(env.home.join("sandboxes").join(format!("{name}.json"))).unwrap();
        assert_eq!(now, record, "{what}: the record changed");
    };
    let refused = |args: &[&str], code: i32, says: &str| {
        let out = run(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {}", describe(&out));
        assert!(err.contains(says) && err.lines().count() == 1, "{args:?}: {err}");
        unchanged(says);
    };

    refused(&["reset", "no-such-sandbox"], 3, "no-such-sandbox");
    std::fs::write(&template, "image: [not, a, string]\nagent: {command: [sh]}\n").unwrap();
    refused(&["reset", &name], 2, "resettable.yaml:1");
    std::fs::remove_file(&template).unwrap();
    refused(&["reset", &name], 3, "resettable");
    agent_template(&dir, &image, "one", "'true'");
    // The copy of the secret the container mounts, moved away: refused, naming
    // it. (The file it was copied from is never read again: see the next test.)
    let copy = env.home.join("secrets").join(&name).join("tok");
    std::fs::rename(&copy, copy.with_extension("away")).unwrap();
    let out = run(&["reset", &name]);
    assert_eq!(out.status.code(), Some(6), "{}", describe(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains(copy.to_str().unwrap()), "{}", describe(&out));
    unchanged("a secret's copy moved away");
    std::fs::rename(copy.with_extension("away"), &copy).unwrap();

    // A failing init: the new container is stopped, the sandbox kept, and a second
    // reset with a fixed template finishes the job.
    agent_template(&dir, &image, "one", "'echo init-fails; exit 4'");
    let out = run(&["reset", &name]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    assert!(err.contains("init-fails") && err.contains(&format!("`forage-ctl reset {name}` again")), "{err}");
    let status = env.json(&["status", &name, "--json"]);
    assert_eq!(status["status"], "exited", "{status}");
    agent_template(&dir, &image, "one", "'true'");
    let out = run(&["reset", &name]);
    assert!(out.status.success(), "{}", describe(&out));

    // A half-made sandbox is not reset.
    let broken = env.unique("half");
    env.killed_after(&["up", &broken, "--workspace", ws.to_str().unwrap()], "container");
    let err = env.fails(&["reset", &broken], 4);
    assert!(err.contains(&format!("forage-ctl down {broken}")), "{err}");

    env.ok(&["down", "--all"]);
    env.assert_nothing_left();
}
