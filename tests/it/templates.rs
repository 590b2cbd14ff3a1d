//! Templates, secrets, limits and policy, against the real engine.

use std::path::{Path, PathBuf};

use crate::support::*;

/// The default image's reference, building it if needed (under the shared image lock).
pub fn shell_image(env: &Env) -> String {
    let ws = env.mkdir("image-probe");
    let name = env.unique("probe");
    env.ok(&["up", &name, "--workspace", ws.to_str().unwrap(), "--no-start"]);
    let v = env.json(&["status", &name, "--json"]);
    env.ok(&["down", &name]);
    v["record"]["image"].as_str().unwrap().to_owned()
}

pub fn write(path: &Path, text: &str) -> PathBuf {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
    path.to_path_buf()
}

/// Removes a file under /etc/forage/templates when the test ends, pass or fail.
struct EtcTemplate(PathBuf);

impl Drop for EtcTemplate {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn origin(env: &Env, tpl_path: &Path, name: &str) -> String {
    let out = env.cmd(&["templates", "show", name, "--json"]).env("FORAGE_TEMPLATES_PATH", tpl_path).output().unwrap();
    assert!(out.status.success(), "{}", describe(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["origin"]["path"].as_str().unwrap_or("built-in").to_owned()
}

#[test]
fn the_search_path_is_env_then_user_then_etc_then_builtin() {
    // Held until after the /etc template is removed (dropped last).
    let _held = system_templates_held();
    let env = Env::new();
    let name = format!("it-prec-{}", std::process::id());
    let body = |d: &str| format!("description: {d}\nimage: x\nagent: {{command: [sh]}}\n");
    let env_dir = env.path("env-templates");
    let user = write(&env.path(&format!("config/forage/templates/{name}.yaml")), &body("user"));
    let etc = EtcTemplate(write(Path::new(&format!("/etc/forage/templates/{name}.yaml")), &body("etc")));
    let in_env = write(&env_dir.join(&name).join("template.yaml"), &body("env"));
    let shell_override = write(&env_dir.join("shell.yaml"), &body("my shell"));

    assert_eq!(origin(&env, &env_dir, &name), in_env.to_str().unwrap());
    assert_eq!(origin(&env, &env_dir, "shell"), shell_override.to_str().unwrap(), "a user template shadows a built-in");
    std::fs::remove_dir_all(env_dir.join(&name)).unwrap();
    assert_eq!(origin(&env, &env_dir, &name), user.to_str().unwrap());
    std::fs::remove_file(&user).unwrap();
    assert_eq!(origin(&env, &env_dir, &name), etc.0.to_str().unwrap());
    std::fs::remove_file(&shell_override).unwrap();
    assert_eq!(origin(&env, &env_dir, "shell"), "built-in");

    let listed = env.cmd(&["templates"]).env("FORAGE_TEMPLATES_PATH", &env_dir).output().unwrap();
    let listed = String::from_utf8_lossy(&listed.stdout);
    for builtin in ["shell", "review", "claude", "codex", "aider", "opencode"] {
        assert!(
            listed.lines().any(|l| l.trim_start().starts_with(&format!("{builtin} ")) && l.ends_with("built-in")),
            "{builtin}: {listed}"
        );
    }
    assert!(
        listed.lines().any(|l| l.trim_start().starts_with(&name) && l.ends_with(etc.0.to_str().unwrap())),
        "{listed}"
    );
}

#[test]
fn bad_templates_are_reported_with_file_line_and_column_and_create_nothing() {
    let env = Env::new();
    let dir = env.path("tpl");
    let ws = env.mkdir("ws");
    let cases = [
        ("malformed", "agent: [unclosed\n", ":1:"),
        (
            "unknown",
            "image: x\nagent: {command: [sh]}\nnetwork: none\nbogus_field: 1\n",
            ":4:1: unknown field `bogus_field`",
        ),
        ("wrongtype", "image: x\nagent:\n  command: [sh]\nresources:\n  pids: lots\n", ":5:"),
    ];
    for (name, text, expected) in cases {
        let file = write(&dir.join(format!("{name}.yaml")), text);
        for args in [vec!["templates", "show", name], vec!["up", "t", "-t", name, "--workspace", ws.to_str().unwrap()]]
        {
            let out = env.cmd(&args).env("FORAGE_TEMPLATES_PATH", &dir).output().unwrap();
            assert_eq!(out.status.code(), Some(2), "{args:?}: {}", describe(&out));
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(stderr.contains(&format!("{}{expected}", file.display())), "{name}: {stderr}");
        }
    }
    env.assert_nothing_left();
}

#[test]
fn a_secret_is_a_read_only_file_and_the_agents_env_and_nowhere_else() {
    let env = Env::new();
    let image = shell_image(&env);
    let dir = env.path("tpl");
    write(
        &dir.join("agent.yaml"),
        &format!(
            "image: {image}\nagent:\n  command: [sh, -c, 'echo \"key=$API_KEY\" > /workspace/.seen; mv /workspace/.seen /workspace/seen; exec sleep 1000']\n  secrets: {{API_KEY: api}}\n"
        ),
    );
    let value = format!("sk-it-{}-do-not-leak", std::process::id());
    let secret = write(&env.path("keys/api"), &value);
    let ws = env.mkdir("ws");
    let up = |extra: &[&str]| {
        let mut args = vec!["up", "sec", "-t", "agent", "--workspace", ws.to_str().unwrap()];
        args.extend_from_slice(extra);
        env.cmd(&args).env("FORAGE_TEMPLATES_PATH", &dir).arg("-vvv").output().unwrap()
    };

    // Missing or unreadable secrets: refused before anything exists.
    let out = up(&[]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--secret api=FILE"));
    let out = up(&["--secret", &format!("api={}", env.path("keys/missing").display())]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("keys/missing"));
    env.assert_nothing_left();

    let out = up(&["--secret", &format!("api={}", secret.display())]);
    assert!(out.status.success(), "{}", describe(&out));
    let verbose_output = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!verbose_output.contains(&value), "the secret reached forage's output");

    assert!(eventually(10, || ws.join("seen").exists()));
    assert_eq!(std::fs::read_to_string(ws.join("seen")).unwrap(), format!("key={value}\n"), "exported to the agent");
    let out = env.ok(&["exec", "sec", "--", "sh", "-c", "cat /run/secrets/api; echo; (echo x > /run/secrets/api) 2>/dev/null && echo WRITABLE; echo \"exec env: [$API_KEY]\""]);
    assert_eq!(out, format!("{value}\nexec env: []\n"), "readable, not writable, not in other processes' env");

    let inspected = serde_json::to_string(&inspect("forage-sec").unwrap()).unwrap();
    assert!(!inspected.contains(&value), "the secret is in docker inspect");
    assert!(inspected.contains("/run/secrets/api"));
    // The container mounts forage's copy, readable by the user alone, never the
    // file it was read from; no other file of forage's holds the value.
    let copy = env.home.join("secrets/sec/api");
    assert!(inspected.contains(copy.to_str().unwrap()) && !inspected.contains(secret.to_str().unwrap()), "{inspected}");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&copy).unwrap().permissions().mode() & 0o777, 0o600);
    assert_eq!(std::fs::metadata(copy.parent().unwrap()).unwrap().permissions().mode() & 0o777, 0o700);
    for file in env.home_files().into_iter().filter(|f| f != &copy) {
        assert!(!std::fs::read_to_string(&file).unwrap_or_default().contains(&value), "secret in {}", file.display());
    }
    assert!(!env.ok(&["logs", "sec"]).contains(&value));
    env.ok(&["down", "sec"]);
    env.assert_nothing_left();
}

/// `--secret NAME=env:VAR`: the value is read from forage's own environment,
/// copied like a file's, and reaches the agent alone: not argv, the record,
/// `docker inspect`, forage's output or any other file of forage's.
#[test]
fn a_secret_from_an_environment_variable_reaches_the_agent_alone() {
    let env = Env::new();
    let image = shell_image(&env);
    let dir = env.path("tpl");
    write(
        &dir.join("agent.yaml"),
        &format!("image: {image}\nagent:\n  command: [sleep, '1000']\n  secrets: {{API_KEY: api}}\n"),
    );
    let value = format!("sk-env-{}-do-not-leak", std::process::id());
    let ws = env.mkdir("ws");
    let up = |secret: &str, var: Option<&str>| {
        let mut cmd =
            env.cmd(&["up", "envsec", "-t", "agent", "--workspace", ws.to_str().unwrap(), "--secret", secret]);
        cmd.env("FORAGE_TEMPLATES_PATH", &dir).env_remove("FORAGE_IT_KEY").arg("-vvv");
        if let Some(v) = var {
            cmd.env("FORAGE_IT_KEY", v);
        }
        cmd.output().unwrap()
    };

    // Unset, empty, or not a variable's name: refused, naming it, nothing made.
    for (secret, var, needle) in [
        ("api=env:FORAGE_IT_KEY", None, "environment variable FORAGE_IT_KEY (for --secret api) is not set or empty"),
        (
            "api=env:FORAGE_IT_KEY",
            Some(""),
            "environment variable FORAGE_IT_KEY (for --secret api) is not set or empty",
        ),
        ("api=env:1-bad", Some("x"), "invalid --secret api=env:1-bad: name an environment variable"),
    ] {
        let out = up(secret, var);
        assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
        assert!(String::from_utf8_lossy(&out.stderr).contains(needle), "{}", describe(&out));
        env.assert_nothing_left();
    }

    let out = up("api=env:FORAGE_IT_KEY", Some(&value));
    assert!(out.status.success(), "{}", describe(&out));
    let output = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!output.contains(&value), "the secret reached forage's output");
    let seen = env.ok(&["exec", "envsec", "--", "sh", "-c", "cat /run/secrets/api; echo; cat /proc/1/cmdline"]);
    assert!(seen.starts_with(&format!("{value}\n")), "the agent reads the value: {seen:?}");
    assert!(!seen[value.len()..].contains(&value), "the value is in the agent's argv: {seen:?}");
    let inspected = serde_json::to_string(&inspect("forage-envsec").unwrap()).unwrap();
    assert!(!inspected.contains(&value), "the secret is in docker inspect");
    let copy = env.home.join("secrets/envsec/api");
    assert_eq!(std::fs::read_to_string(&copy).unwrap(), value);
    let record = std::fs::read_to_string(env.home.join("sandboxes/envsec.json")).unwrap();
    assert!(record.contains("\"env\": \"FORAGE_IT_KEY\"") || record.contains("\"env\":\"FORAGE_IT_KEY\""), "{record}");
    for file in env.home_files().into_iter().filter(|f| f != &copy) {
        assert!(!std::fs::read_to_string(&file).unwrap_or_default().contains(&value), "secret in {}", file.display());
    }
    // `reset` keeps the value `up` read: the variable is not read again.
    let out =
        env.cmd(&["reset", "envsec"]).env("FORAGE_TEMPLATES_PATH", &dir).env_remove("FORAGE_IT_KEY").output().unwrap();
    assert!(out.status.success(), "{}", describe(&out));
    assert_eq!(env.ok(&["exec", "envsec", "--", "cat", "/run/secrets/api"]), value);
    env.ok(&["down", "envsec"]);
    env.assert_nothing_left();
}

/// `up --task`/`--task-file`: the text lands read-only at
/// /run/forage/task.md and reaches the agent as its template's `agent.task`
/// says, read inside (never in `docker inspect`); bad tasks are refused
/// before anything is made; `reset` keeps the task; `down` leaves nothing.
#[test]
fn a_task_reaches_the_agent_the_way_its_template_says() {
    let env = Env::new();
    let image = shell_image(&env);
    let dir = env.path("tpl");
    let agent = "printf '%s' \"$1\" > /workspace/.got; mv /workspace/.got /workspace/got; cp \"$2\" /workspace/file; exec sleep 1000";
    write(
        &dir.join("tasked.yaml"),
        &format!(
            "image: {image}\nagent:\n  command: [sh, -c, {agent:?}, agent]\n  task: ['{{task}}', '{{task_file}}']\n"
        ),
    );
    write(&dir.join("plain.yaml"), &format!("image: {image}\nagent: {{command: [sleep, '1000']}}\n"));
    let ws = env.mkdir("ws");
    let w = ws.to_str().unwrap();
    let run = |args: &[&str]| env.cmd(args).env("FORAGE_TEMPLATES_PATH", &dir).output().unwrap();
    let task = format!("fix it: 'quoted' \"$HOME\" `x` {}\nsecond line", std::process::id());

    // Refused before anything is made: a template that takes no task, an
    // empty task, a task file the agent writes.
    let in_ws = write(&ws.join("task.md"), "planted");
    for (args, needle) in [
        (vec!["up", "tk", "-t", "plain", "--workspace", w, "--task", "x"], "does not say how its agent takes a task"),
        (vec!["up", "tk", "-t", "tasked", "--workspace", w, "--task", " "], "--task is empty"),
        (
            vec!["up", "tk", "-t", "tasked", "--workspace", w, "--task-file", in_ws.to_str().unwrap()],
            "which this sandbox's agent writes",
        ),
    ] {
        let out = run(&args);
        assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
        assert!(String::from_utf8_lossy(&out.stderr).contains(needle), "{}", describe(&out));
        env.assert_nothing_left();
    }
    std::fs::remove_file(&in_ws).unwrap();

    let out = run(&["up", "tk", "-t", "tasked", "--workspace", w, "--task", &task]);
    assert!(out.status.success(), "{}", describe(&out));
    assert!(eventually(10, || ws.join("got").exists()));
    assert_eq!(std::fs::read_to_string(ws.join("got")).unwrap(), task, "{{task}} is the text, as one argument");
    assert!(
        eventually(10, || std::fs::read_to_string(ws.join("file")).is_ok_and(|f| f == task)),
        "{{task_file}} is its file"
    );
    let out = env.ok(&[
        "exec",
        "tk",
        "--",
        "sh",
        "-c",
        "(echo x > /run/forage/task.md) 2>/dev/null && echo WRITABLE; cat /run/forage/task.md",
    ]);
    assert_eq!(out, task, "the task file is read-only");
    let inspected = serde_json::to_string(&inspect("forage-tk").unwrap()).unwrap();
    assert!(!inspected.contains(&std::process::id().to_string()), "the task's text is in docker inspect");
    let copy = env.home.join("secrets/tk/.task.md");
    for file in env.home_files().into_iter().filter(|f| f != &copy) {
        assert!(!std::fs::read_to_string(&file).unwrap_or_default().contains(&task), "task in {}", file.display());
    }
    // `reset` makes the container again with the same task.
    std::fs::remove_file(ws.join("got")).unwrap();
    let out = env.cmd(&["reset", "tk"]).env("FORAGE_TEMPLATES_PATH", &dir).output().unwrap();
    assert!(out.status.success(), "{}", describe(&out));
    assert!(eventually(10, || std::fs::read_to_string(ws.join("got")).is_ok_and(|g| g == task)));
    env.ok(&["down", "tk"]);

    // From a file outside every workspace: read once, at `up`.
    let file = write(&env.path("tasks/t.md"), "from a file");
    let out = run(&["up", "tk", "-t", "tasked", "--workspace", w, "--task-file", file.to_str().unwrap()]);
    assert!(out.status.success(), "{}", describe(&out));
    std::fs::write(&file, "changed later").unwrap();
    assert_eq!(env.ok(&["exec", "tk", "--", "cat", "/run/forage/task.md"]), "from a file");
    env.ok(&["down", "tk"]);
    env.assert_nothing_left();
}

#[test]
fn limits_network_and_read_only_policies_reach_the_container() {
    let env = Env::new();
    let image = shell_image(&env);
    let dir = env.path("tpl");
    write(
        &dir.join("tight.yaml"),
        &format!("image: {image}\nagent: {{command: [sleep, '1000']}}\nnetwork: none\nresources: {{memory: 256m, pids: 64, cpus: 0.5}}\nworkspace: {{read_only: true}}\n"),
    );
    let ws = env.mkdir("ws");
    let out = env
        .cmd(&["up", "tight", "-t", "tight", "--workspace", ws.to_str().unwrap()])
        .env("FORAGE_TEMPLATES_PATH", &dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", describe(&out));
    let hc = inspect("forage-tight").unwrap().host_config.unwrap();
    if engine_applies_limits() {
        assert_eq!(hc.memory, Some(256 << 20));
        assert_eq!(hc.pids_limit, Some(64));
        assert_eq!(hc.nano_cpus, Some(500_000_000));
    } else {
        assert_limits_dropped_warning(&out);
    }
    assert_eq!(hc.network_mode.as_deref(), Some("none"));
    let out = env.ok(&[
        "exec",
        "tight",
        "--",
        "sh",
        "-c",
        "ls /sys/class/net; (echo x > /workspace/f) 2>/dev/null && echo WROTE; true",
    ]);
    assert_eq!(out, "lo\n", "no network but loopback, and a read-only workspace");
    assert!(!ws.join("f").exists());
    env.ok(&["down", "tight"]);

    // CLI overrides beat the template.
    let out = env
        .cmd(&[
            "up",
            "loose",
            "-t",
            "tight",
            "--workspace",
            ws.to_str().unwrap(),
            "--memory",
            "512m",
            "--cpus",
            "1",
            "--network",
            "full",
            "--env",
            "GREETING=hi there",
        ])
        .env("FORAGE_TEMPLATES_PATH", &dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", describe(&out));
    let hc = inspect("forage-loose").unwrap().host_config.unwrap();
    if engine_applies_limits() {
        assert_eq!((hc.memory, hc.nano_cpus), (Some(512 << 20), Some(1_000_000_000)));
    } else {
        assert_limits_dropped_warning(&out);
    }
    assert_eq!(hc.network_mode.as_deref(), Some(full_network_mode()));
    assert_eq!(env.ok(&["exec", "loose", "--", "sh", "-c", "echo $GREETING"]), "hi there\n");
    env.ok(&["down", "loose"]);

    // The built-in review template: read-only workspace, no network.
    env.ok(&["up", "rev", "-t", "review", "--workspace", ws.to_str().unwrap()]);
    let out = env.ok(&[
        "exec",
        "rev",
        "--",
        "sh",
        "-c",
        "ls /sys/class/net; (echo x > /workspace/f) 2>/dev/null && echo WROTE; true",
    ]);
    assert_eq!(out, "lo\n");
    env.ok(&["down", "rev"]);

    // --read-only on the default template.
    env.ok(&["up", "ro", "--workspace", ws.to_str().unwrap(), "--read-only"]);
    let out = env.run(&["exec", "ro", "--", "touch", "/workspace/f"]);
    assert_ne!(out.status.code(), Some(0));
    env.ok(&["down", "ro"]);
    env.assert_nothing_left();
}

#[test]
fn init_runs_before_the_agent_and_a_failing_init_rolls_up_back() {
    let env = Env::new();
    let image = shell_image(&env);
    let dir = env.path("tpl");
    let agent = "[sh, -c, 'echo \"$@\" > /workspace/args; cat /workspace/init.txt > /workspace/.saw; mv /workspace/.saw /workspace/agent-saw; exec sleep 1000', agent]";
    write(
        &dir.join("good.yaml"),
        &format!("image: {image}\nagent: {{command: {agent}}}\ninit: ['sleep 1; echo prepared > init.txt']\n"),
    );
    write(
        &dir.join("bad.yaml"),
        &format!("image: {image}\nagent: {{command: [sleep, '1000']}}\ninit: ['echo init-says-hello; exit 3']\n"),
    );
    let ws = env.mkdir("ws");
    let run = |args: &[&str]| env.cmd(args).env("FORAGE_TEMPLATES_PATH", &dir).output().unwrap();

    let out = run(&["up", "good", "-t", "good", "--workspace", ws.to_str().unwrap(), "--", "one", "two"]);
    assert!(out.status.success(), "{}", describe(&out));
    assert!(eventually(10, || ws.join("agent-saw").exists()));
    assert_eq!(std::fs::read_to_string(ws.join("agent-saw")).unwrap(), "prepared\n", "the agent started after init");
    assert_eq!(std::fs::read_to_string(ws.join("args")).unwrap(), "one two\n", "-- ARGS are appended to the command");
    // A restart does not run init again, and the agent starts at once.
    std::fs::remove_file(ws.join("agent-saw")).unwrap();
    env.ok(&["restart", "good"]);
    assert!(eventually(10, || ws.join("agent-saw").exists()));
    env.ok(&["down", "good"]);

    let out = run(&["up", "bad", "-t", "bad", "--workspace", ws.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("echo init-says-hello; exit 3")
            && stderr.contains("exit code 3")
            && stderr.contains("init-says-hello\n"),
        "{stderr}"
    );
    env.assert_nothing_left();
}

#[test]
fn build_and_mounts_from_a_template_directory() {
    let env = Env::new();
    let image = shell_image(&env);
    let dir = env.path("tpl");
    let shared = env.mkdir("shared-data");
    std::fs::write(shared.join("data.txt"), "shared\n").unwrap();
    write(&dir.join("built/Dockerfile"), &format!("FROM {image}\nCOPY greeting.txt /greeting.txt\n"));
    write(&dir.join("built/greeting.txt"), "built from a Dockerfile\n");
    write(
        &dir.join("built/template.yaml"),
        &format!(
            "build: {{context: ., dockerfile: Dockerfile}}\nagent: {{command: [sleep, '1000']}}\nmounts:\n  - {{source: {}, target: /data}}\n  - {{source: greeting.txt, target: /opt/greeting.txt}}\n",
            shared.display()
        ),
    );
    let ws = env.mkdir("ws");
    let run = |args: &[&str]| env.cmd(args).env("FORAGE_TEMPLATES_PATH", &dir).output().unwrap();
    let out = run(&["up", "built", "-t", "built", "--workspace", ws.to_str().unwrap()]);
    assert!(out.status.success(), "{}", describe(&out));
    let out = env.ok(&[
        "exec",
        "built",
        "--",
        "sh",
        "-c",
        "cat /greeting.txt /data/data.txt /opt/greeting.txt; (echo x > /data/new) 2>/dev/null && echo WROTE; true",
    ]);
    assert_eq!(out, "built from a Dockerfile\nshared\nbuilt from a Dockerfile\n");
    let image_id = inspect("forage-built").unwrap().image;
    env.ok(&["down", "built"]);
    // Unchanged context: the cached image is reused.
    let out = run(&["up", "built", "-t", "built", "--workspace", ws.to_str().unwrap()]);
    assert!(out.status.success(), "{}", describe(&out));
    assert_eq!(inspect("forage-built").unwrap().image, image_id);
    env.ok(&["down", "built"]);

    // A mount whose source does not exist: refused, nothing created.
    write(
        &dir.join("badmount.yaml"),
        &format!(
            "image: {image}\nagent: {{command: [sh]}}\nmounts: [{{source: /nonexistent/forage-it, target: /x}}]\n"
        ),
    );
    let out = run(&["up", "m", "-t", "badmount", "--workspace", ws.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/forage-it"));
    env.assert_nothing_left();
}

#[test]
fn builtin_agent_templates_need_a_registry_and_say_so() {
    let env = Env::new();
    let ws = env.mkdir("ws");
    let key = write(&env.path("key"), "k");
    let out = env.run(&[
        "up",
        "c",
        "-t",
        "claude",
        "--workspace",
        ws.to_str().unwrap(),
        "--secret",
        &format!("anthropic={}", key.display()),
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        // The build's own output, up to where it failed: Docker echoes the
        // Dockerfile's line, Podman the line with its ARG substituted.
        stderr.contains("template \"claude\"")
            && stderr.contains("registry")
            && (stderr.contains("FROM ${BASE}") || stderr.contains("FROM node:22-bookworm-slim")),
        "{stderr}"
    );
    // Every place the build needs, not only the first it failed at, and each
    // way to do without them, the exact tag to bring included.
    for needed in [
        "its Dockerfile needs, from the network: the base image node:22-bookworm-slim (from Docker Hub), the distribution's package mirror (apt-get), the npm registry (npm)",
        "`up --image IMAGE`",
        "`docker save forage-build/claude:",
        "`forage-ctl templates export claude`",
    ] {
        assert!(stderr.contains(needed), "{needed:?} missing from:\n{stderr}");
    }
    env.assert_nothing_left();
}

#[test]
fn the_docker_socket_and_reserved_targets_are_never_mounted() {
    let env = Env::new();
    let dir = env.path("tpl");
    let ws = env.mkdir("ws");
    let run = |args: &[&str]| env.cmd(args).env("FORAGE_TEMPLATES_PATH", &dir).output().unwrap();
    for (name, source, target, needle) in [
        ("sock", "/var/run/docker.sock", "/sock", "it is a socket"),
        ("varrun", "/var/run", "/host-run", "container engine's socket"),
        ("inws", "/tmp", "/workspace/tmp", "outside /workspace"),
        ("dotdot", "/tmp", "/opt/../workspace", "without '..'"),
        ("secrets", "/tmp", "/run/secrets/x", "/run/secrets"),
    ] {
        write(
            &dir.join(format!("{name}.yaml")),
            &format!("image: x\nagent: {{command: [sh]}}\nmounts: [{{source: {source}, target: {target}}}]\n"),
        );
        let out = run(&["up", "never", "-t", name, "--workspace", ws.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2), "{name}: {}", describe(&out));
        assert!(String::from_utf8_lossy(&out.stderr).contains(needle), "{name}: {}", describe(&out));
    }
    env.assert_nothing_left();
}

#[test]
fn secrets_and_mounts_are_checked_before_docker_is_contacted() {
    let env = Env::new();
    let ws = env.mkdir("ws");
    let dead = format!("unix://{}", env.path("dead.sock").display());
    let key = write(&env.path("key"), "k");
    // A missing secret is a usage error even with no engine...
    let out = env
        .cmd(&["up", "early", "-t", "claude", "--workspace", ws.to_str().unwrap()])
        .env("DOCKER_HOST", &dead)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    // ... and `~/` in a secret path means HOME.
    let out = env
        .cmd(&["up", "early", "-t", "claude", "--workspace", ws.to_str().unwrap(), "--secret", "anthropic=~/key"])
        .env("DOCKER_HOST", &dead)
        .env("HOME", env.dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(5), "the secret was found, so only the engine is missing: {}", describe(&out));
    assert!(key.exists());
    env.assert_nothing_left();
}

#[test]
fn a_failing_init_in_git_and_jj_mode_rolls_back_and_archives_what_init_wrote() {
    let env = Env::new();
    let image = shell_image(&env);
    let dir = env.path("tpl");
    write(
        &dir.join("half.yaml"),
        &format!("image: {image}\nagent: {{command: [sleep, '1000']}}\ninit: ['echo from-init > init-wrote.txt', 'exit 3']\n"),
    );
    let git_repo = crate::git::repo(&env, "repo");
    let before = crate::git::repo_state(&git_repo);
    let jj_repo = crate::jj::jj_repo(&env, "jj-repo", true);
    let workspaces = crate::jj::workspaces(&jj_repo);

    for (flag, repo) in [("--git-worktree", &git_repo), ("--jj", &jj_repo)] {
        let name = env.unique(&format!("half{}", flag.len()));
        let out = env
            .cmd(&["up", &name, "-t", "half", flag, repo.to_str().unwrap()])
            .env("FORAGE_TEMPLATES_PATH", &dir)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{flag}: {}", describe(&out));
        assert!(String::from_utf8_lossy(&out.stderr).contains("exit code 3"), "{}", describe(&out));
        env.assert_nothing_left_but_archives();
        assert!(!env.home.join("workspaces").join(&name).exists());
        let files = if flag == "--jj" {
            assert_eq!(crate::jj::workspaces(&jj_repo), workspaces, "no workspace of the repository was touched");
            let bookmark = format!("latest(bookmarks(glob:\"forage/archive/{name}/*\"))");
            crate::jj::jj(&jj_repo, &["file", "list", "-r", &bookmark])
        } else {
            let archives = crate::git::archive_refs(&git_repo);
            assert_eq!(
                crate::git::repo_state_but_archives(&git_repo),
                before,
                "branch and worktree gone, no ref moved"
            );
            assert_eq!(archives.len(), 1, "{archives:?}");
            crate::git::git(&git_repo, &["ls-tree", "-r", "--name-only", &archives[0]])
        };
        assert!(files.contains("init-wrote.txt"), "{flag}: what init wrote is archived: {files}");
    }
}
