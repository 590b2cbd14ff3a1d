//! The project's toolchain (devcontainer.json, .forage/template.yaml), read
//! from the user's checkout and layered under the agent's template, against
//! the real engine: test images are built here from the offline default
//! image (no registry).

use std::path::Path;

use crate::git::{git, repo, repo_state};
use crate::support::*;
use crate::templates::{shell_image, write};

/// A template directory holding `layered`: a Dockerfile that takes `ARG BASE`
/// and adds a marker, and an agent that records whether the project's
/// postCreateCommand ran before it.
fn layered_templates(env: &Env, image: &str) -> std::path::PathBuf {
    let dir = env.path("tpl");
    write(
        &dir.join("layered/Dockerfile"),
        &format!("ARG BASE={image}\nFROM ${{BASE}}\nUSER root\nCOPY agent-marker /agent-marker\n"),
    );
    write(&dir.join("layered/agent-marker"), "agent layer\n");
    write(
        &dir.join("layered/template.yaml"),
        "build: {dockerfile: Dockerfile}\nagent: {command: [sh, -c, 'if test -e /tmp/post-created; then echo yes; else echo no; fi > /tmp/agent-saw; exec sleep 1000']}\n",
    );
    dir
}

/// A devcontainer.json naming a Dockerfile (FROM the default image) that
/// installs `projtool`, with containerEnv, postCreateCommand and a port.
fn devcontainer_project(root: &Path, image: &str) {
    write(
        &root.join(".devcontainer/devcontainer.json"),
        r#"{
  // as VS Code writes it: comments, trailing commas
  "name": "test project",
  "build": {"dockerfile": "Dockerfile", "context": "..",},
  "containerEnv": {"PROJ_VAR": "from-devcontainer"},
  "postCreateCommand": "touch /tmp/post-created",
  "forwardPorts": [3000],
}"#,
    );
    write(
        &root.join(".devcontainer/Dockerfile"),
        &format!("FROM {image}\nCOPY tools/projtool /usr/local/bin/projtool\n"),
    );
    write(&root.join("tools/projtool"), "#!/bin/sh\necho \"projtool ran $*\"\n");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(root.join("tools/projtool"), std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn sh(env: &Env, name: &str, script: &str) -> String {
    env.ok(&["exec", name, "--", "sh", "-c", script])
}

/// The agent's view of what the toolchain gave it.
fn agent_sees_the_toolchain(env: &Env, name: &str) {
    assert_eq!(sh(env, name, "projtool a b"), "projtool ran a b\n", "the project's tool, from its Dockerfile");
    assert_eq!(sh(env, name, "cat /agent-marker"), "agent layer\n", "the agent's layer on top");
    assert_eq!(sh(env, name, "echo $PROJ_VAR"), "from-devcontainer\n", "containerEnv");
    assert!(eventually(20, || env.run(&["exec", name, "--", "cat", "/tmp/agent-saw"]).stdout == b"yes\n"));
}

#[test]
fn a_devcontainer_toolchain_reaches_the_agent_and_the_agents_edits_to_it_change_nothing() {
    let env = Env::new();
    let image = shell_image(&env);
    let tpl = layered_templates(&env, &image);
    let repo = repo(&env, "repo");
    devcontainer_project(&repo, &image);
    git(&repo, &["add", "."]);
    git(&repo, &["commit", "-qm", "devcontainer"]);
    let r = repo.to_str().unwrap();
    let (a, b) = (env.unique("tc-a"), env.unique("tc-b"));
    let up = |name: &str| {
        env.cmd(&["up", name, "-t", "layered", "--git-worktree", r])
            .env("FORAGE_TEMPLATES_PATH", &tpl)
            .output()
            .unwrap()
    };

    let out = up(&a);
    assert!(out.status.success(), "{}", describe(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("toolchain: .devcontainer/devcontainer.json (build .devcontainer/Dockerfile)"),
        "up says which toolchain it used: {stderr}"
    );
    assert!(
        stderr.contains(&format!("forwards port 3000: `forage-ctl port {a} add PORT`")),
        "up offers the project's forwardPorts: {stderr}"
    );
    agent_sees_the_toolchain(&env, &a);
    let status = env.json(&["status", &a, "--json"]);
    assert_eq!(status["record"]["toolchain"]["source"], ".devcontainer/devcontainer.json", "{status}");
    assert_eq!(status["record"]["toolchain"]["forward_ports"], serde_json::json!([3000]), "{status}");
    assert!(env
        .ok(&["status", &a])
        .contains("toolchain:  .devcontainer/devcontainer.json (build .devcontainer/Dockerfile)"));

    // The agent rewrites the devcontainer on its branch, and it reaches the host's branch.
    sh(
        &env,
        &a,
        r#"cd /workspace && printf '{"image": "nosuch/evil:1", "containerEnv": {"PROJ_VAR": "evil"}}' > .devcontainer/devcontainer.json && git commit -qam 'agent edits the toolchain'"#,
    );
    env.ok(&["sync", &a]);
    let on_branch = git(&repo, &["show", &format!("forage-{a}:.devcontainer/devcontainer.json")]);
    assert!(on_branch.contains("nosuch/evil"), "the attack step took effect: {on_branch}");
    // The next sandbox on the repository, even one started from the agent's
    // branch (its own worktree then holds the agent's devcontainer.json), gets
    // the toolchain of the user's checkout.
    let base = format!("forage-{a}");
    let out = env
        .cmd(&["up", &b, "-t", "layered", "--git-worktree", r, "--base", &base])
        .env("FORAGE_TEMPLATES_PATH", &tpl)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", describe(&out));
    agent_sees_the_toolchain(&env, &b);
    assert!(
        sh(&env, &b, "cat /workspace/.devcontainer/devcontainer.json").contains("nosuch/evil"),
        "b's own copy is the agent's"
    );
    // And `reset` makes the same from the record, whatever the checkout says now.
    std::fs::write(repo.join(".devcontainer/devcontainer.json"), r#"{"image": "nosuch/changed:1"}"#).unwrap();
    let out = env.cmd(&["reset", &a]).env("FORAGE_TEMPLATES_PATH", &tpl).output().unwrap();
    assert!(out.status.success(), "{}", describe(&out));
    agent_sees_the_toolchain(&env, &a);
    // The project's image removed since: `reset` says so, and the sandbox runs on.
    let project = status["record"]["toolchain"]["image"]["reference"].as_str().unwrap().to_owned();
    assert!(project.starts_with("forage-build/project-repo:"), "{status}");
    block_on(docker().remove_image(&project, None::<bollard::query_parameters::RemoveImageOptions>, None)).unwrap();
    let out = env.cmd(&["reset", &a]).env("FORAGE_TEMPLATES_PATH", &tpl).output().unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", describe(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains(&format!("the image {project}, which the image of template \"layered\" is built on, is no longer in the Docker engine")), "{}", describe(&out));
    assert_eq!(sh(&env, &a, "projtool"), "projtool ran \n");

    env.ok(&["down", &a]);
    env.ok(&["down", &b]);
    env.assert_nothing_left_but_archives();
}

#[test]
fn the_forage_file_wins_and_one_asking_for_the_host_is_refused_leaving_nothing() {
    let env = Env::new();
    let image = shell_image(&env);
    let tpl = layered_templates(&env, &image);
    let repo = repo(&env, "repo");
    devcontainer_project(&repo, &image);
    write(
        &repo.join(".forage/template.yaml"),
        &format!("image: {image}\nenv: {{FROM_FORAGE: 'yes'}}\ninit: ['touch /tmp/post-created']\n"),
    );
    git(&repo, &["add", "."]);
    git(&repo, &["commit", "-qm", "toolchain"]);
    let r = repo.to_str().unwrap();
    let run = |args: &[&str]| env.cmd(args).env("FORAGE_TEMPLATES_PATH", &tpl).output().unwrap();
    let name = env.unique("tc-f");

    let out = run(&["up", &name, "-t", "layered", "--git-worktree", r]);
    assert!(out.status.success(), "{}", describe(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains(&format!("toolchain: .forage/template.yaml (image {image})")));
    assert_eq!(sh(&env, &name, "echo $FROM_FORAGE; command -v projtool || echo no-projtool"), "yes\nno-projtool\n");
    assert!(eventually(20, || env.run(&["exec", &name, "--", "cat", "/tmp/agent-saw"]).stdout == b"yes\n"));
    env.ok(&["down", &name]);

    // `--no-project-toolchain` ignores the files; a template that cannot be
    // layered (the default's image of host tools) says so once and runs as it is.
    let out = run(&["up", &name, "-t", "layered", "--git-worktree", r, "--no-project-toolchain"]);
    assert!(out.status.success(), "{}", describe(&out));
    assert!(env.json(&["status", &name, "--json"])["record"]["toolchain"].is_null());
    env.ok(&["down", &name]);
    let out = run(&["up", &name, "--git-worktree", r]);
    assert!(out.status.success(), "{}", describe(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.matches("template shell cannot be layered on the project's toolchain").count(), 1, "{stderr}");
    assert_eq!(sh(&env, &name, "echo \"[$FROM_FORAGE]\""), "[]\n");
    env.ok(&["down", &name]);
    env.assert_nothing_left();

    // A project file that asks for a host mount: refused, nothing made.
    let before = repo_state(&repo);
    write(&repo.join(".forage/template.yaml"), &format!("image: {image}\nmounts: [{{source: /, target: /host}}]\n"));
    let out = run(&["up", &name, "-t", "layered", "--git-worktree", r]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("`mounts` is not for a repository to set") && stderr.contains(".forage/template.yaml"),
        "{stderr}"
    );
    assert_eq!(repo_state(&repo), before, "no branch, no worktree");
    env.assert_nothing_left();
}

#[test]
fn what_a_hostile_devcontainer_asks_never_reaches_the_host() {
    let env = Env::new();
    let image = shell_image(&env);
    let tpl = layered_templates(&env, &image);
    let ws = env.mkdir("ws");
    let w = ws.to_str().unwrap();
    let run = |args: &[&str]| env.cmd(args).env("FORAGE_TEMPLATES_PATH", &tpl).output().unwrap();
    let (agent, next) = (env.unique("tc-h"), env.unique("tc-n"));
    let marker = std::env::temp_dir().join(format!("forage-it-initialize-{agent}"));
    let outside = write(
        &env.path("outside/secret.json"),
        &format!(r#"{{"image": "{image}", "containerEnv": {{"LEAK": "host-file-read"}}}}"#),
    );

    // An agent in a direct-mode workspace writes a devcontainer.json that
    // would run a command on the host.
    env.ok(&["up", &agent, "--workspace", w, "--no-project-toolchain"]);
    sh(
        &env,
        &agent,
        &format!(
            r#"mkdir -p /workspace/.devcontainer && printf '{{"image": "{image}", "initializeCommand": "touch {}", "runArgs": ["--privileged"], "mounts": ["source=/,target=/host,type=bind"]}}' > /workspace/.devcontainer/devcontainer.json"#,
            marker.display()
        ),
    );
    env.ok(&["down", &agent]);
    assert!(ws.join(".devcontainer/devcontainer.json").is_file(), "the attack step took effect");
    let out = run(&["up", &next, "-t", "layered", "--workspace", w]);
    assert!(out.status.success(), "{}", describe(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("initializeCommand (it would run on your machine)")
            && stderr.contains("runArgs")
            && stderr.contains("mounts"),
        "{stderr}"
    );
    assert!(!marker.exists(), "initializeCommand never runs on the host");
    assert_eq!(sh(&env, &next, "test -e /host && echo MOUNTED || echo none"), "none\n");
    env.ok(&["down", &next]);

    // A devcontainer.json that is a symlink to a file outside: not followed.
    std::fs::remove_file(ws.join(".devcontainer/devcontainer.json")).unwrap();
    std::os::unix::fs::symlink(&outside, ws.join(".devcontainer/devcontainer.json")).unwrap();
    let out = run(&["up", &next, "-t", "layered", "--workspace", w]);
    assert!(out.status.success(), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(".devcontainer/devcontainer.json is a symlink"),
        "{}",
        describe(&out)
    );
    assert_eq!(sh(&env, &next, "echo \"[$LEAK]\""), "[]\n");
    assert!(env.json(&["status", &next, "--json"])["record"]["toolchain"].is_null());
    env.ok(&["down", &next]);

    // A build context that leads out of the workspace: refused (exit 2), nothing made.
    std::fs::remove_file(ws.join(".devcontainer/devcontainer.json")).unwrap();
    write(
        &ws.join(".devcontainer/devcontainer.json"),
        r#"{"build": {"dockerfile": "Dockerfile", "context": "../../outside"}}"#,
    );
    let out = run(&["up", &next, "-t", "layered", "--workspace", w]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("build.context \"../../outside\" leads outside it"), "{stderr}");
    env.assert_nothing_left();
}

/// Builds `tag` in the engine from a Dockerfile alone.
fn build_image(tag: &str, dockerfile: &str) {
    let mut tar = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_size(dockerfile.len() as u64);
    h.set_mode(0o644);
    tar.append_data(&mut h, "Dockerfile", dockerfile.as_bytes()).unwrap();
    let body = tar.into_inner().unwrap();
    let options =
        bollard::query_parameters::BuildImageOptions { t: Some(tag.to_owned()), rm: true, ..Default::default() };
    let api = docker();
    block_on(async {
        use futures_util::StreamExt;
        let mut stream = api.build_image(options, None, Some(bollard::body_full(body.into())));
        while let Some(item) = stream.next().await {
            let info = item.unwrap();
            assert!(info.error_detail.is_none(), "{info:?}");
        }
    });
}

#[test]
fn a_template_names_a_base_image_and_a_rebuilt_base_rebuilds_the_agent() {
    let env = Env::new();
    let image = shell_image(&env);
    let base = format!("forage-it-base/{}:1", env.unique("b"));
    build_image(&base, &format!("FROM {image}\nRUN echo one > /base-version\n"));
    let dir = env.path("tpl");
    write(&dir.join("based/Dockerfile"), "ARG BASE=nosuch/default:1\nFROM ${BASE}\nRUN echo agent > /agent-layer\n");
    write(
        &dir.join("based/template.yaml"),
        &format!("build: {{dockerfile: Dockerfile, base: '{base}'}}\nagent: {{command: [sleep, '1000']}}\n"),
    );
    write(&dir.join("unlayerable/Dockerfile"), &format!("FROM {image}\n"));
    write(
        &dir.join("unlayerable/template.yaml"),
        &format!("build: {{dockerfile: Dockerfile, base: '{base}'}}\nagent: {{command: [sleep, '1000']}}\n"),
    );
    let ws = env.mkdir("ws");
    let name = env.unique("based");
    let run = |args: &[&str]| env.cmd(args).env("FORAGE_TEMPLATES_PATH", &dir).output().unwrap();
    let up = || {
        let out = run(&["up", &name, "-t", "based", "--workspace", ws.to_str().unwrap()]);
        assert!(out.status.success(), "{}", describe(&out));
        let version = sh(&env, &name, "cat /base-version /agent-layer");
        let image = env.json(&["status", &name, "--json"])["record"]["image"].as_str().unwrap().to_owned();
        env.ok(&["down", &name]);
        (version, image)
    };
    let (version, first) = up();
    assert_eq!(version, "one\nagent\n");
    assert_eq!(up().1, first, "an unchanged base: the cached agent image");
    // The base image rebuilt under the same tag: the agent's image is built anew on it.
    build_image(&base, &format!("FROM {image}\nRUN echo two > /base-version\n"));
    let (version, second) = up();
    assert_eq!(version, "two\nagent\n");
    assert_ne!(second, first, "the cache key follows the base image's id");

    // `build.base` on a Dockerfile that does not take it: refused, nothing made.
    let out = run(&["up", &name, "-t", "unlayerable", "--workspace", ws.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("names `build.base` but its Dockerfile does not take it"));
    env.assert_nothing_left();
    let _ = block_on(docker().remove_image(&base, None::<bollard::query_parameters::RemoveImageOptions>, None));
}
