//! Direct workspaces, end to end: the agent's writes land on the host as the
//! invoking user, and `down` removes the container but never the directory.

use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::process::Stdio;

use crate::support::*;

#[test]
fn up_exec_list_down_leaves_the_host_directory_as_the_agent_left_it() {
    let env = Env::new();
    let ws = env.mkdir("project");
    std::fs::write(ws.join("README"), "hello\n").unwrap();
    env.ok(&["up", "demo", "--workspace", ws.to_str().unwrap()]);

    env.ok(&[
        "exec",
        "demo",
        "--",
        "sh",
        "-c",
        "echo from-agent > /workspace/agent.txt && mkdir /workspace/sub && echo x > /workspace/sub/y",
    ]);
    let written = ws.join("agent.txt");
    assert_eq!(std::fs::read_to_string(&written).unwrap(), "from-agent\n");
    let meta = std::fs::metadata(&written).unwrap();
    assert_eq!((meta.uid(), meta.gid()), (nix::unistd::getuid().as_raw(), nix::unistd::getgid().as_raw()));

    let list = env.json(&["list", "--json"]);
    let rows = list.as_array().unwrap();
    assert_eq!(rows.len(), 1, "{list}");
    assert_eq!(rows[0]["name"], "demo");
    assert_eq!(rows[0]["status"], "running");
    assert_eq!(rows[0]["mode"], "direct");
    assert_eq!(rows[0]["template"], "shell");
    assert_eq!(rows[0]["workspace"], ws.canonicalize().unwrap().to_str().unwrap());
    assert_eq!(env.ok(&["ls", "-q"]), "demo\n");

    let before = snapshot(&ws);
    env.ok(&["down", "demo"]);
    assert!(inspect("forage-demo-never").is_none());
    assert_eq!(snapshot(&ws), before, "down must not modify a direct workspace");
    assert_eq!(std::fs::read_to_string(ws.join("README")).unwrap(), "hello\n");
    env.assert_nothing_left();
    assert_eq!(env.ok(&["list", "--json"]).trim(), "[]");
}

#[test]
fn the_container_has_the_security_defaults() {
    let env = Env::new();
    let ws = env.mkdir("ws");
    env.ok(&["up", "secure", "--workspace", ws.to_str().unwrap()]);
    let c = inspect("forage-secure").expect("container exists");
    let hc = c.host_config.unwrap();
    let cap_drop = hc.cap_drop.unwrap_or_default();
    match test_engine() {
        TestEngine::Docker => assert_eq!(cap_drop, ["ALL"]),
        // Podman reports `ALL` as the capabilities it dropped, one by one; the
        // bounding set read inside, below, shows that none is left.
        TestEngine::PodmanRootless | TestEngine::PodmanRootful => {
            for cap in ["CHOWN", "DAC_OVERRIDE", "FOWNER", "NET_RAW", "SETUID", "SETGID", "SYS_CHROOT"] {
                assert!(cap_drop.iter().any(|c| c.trim_start_matches("CAP_") == cap), "{cap} dropped: {cap_drop:?}");
            }
        }
    }
    assert!(hc.cap_add.unwrap_or_default().is_empty());
    // forage's own seccomp profile (runtime/seccomp.rs) replaces the engine's:
    // inline for Docker, as a file for Podman (which takes a path).
    let security = hc.security_opt.unwrap_or_default();
    assert_eq!(security.len(), 2, "{security:?}");
    assert_eq!(security[0], "no-new-privileges");
    let profile = security[1].strip_prefix("seccomp=").expect("a seccomp option");
    let profile = match test_engine() {
        TestEngine::Docker => profile.to_owned(),
        TestEngine::PodmanRootless | TestEngine::PodmanRootful => {
            std::fs::read_to_string(profile).expect("the profile file Podman was given")
        }
    };
    assert!(profile.starts_with('{') && profile.contains(r#""defaultAction":"SCMP_ACT_ERRNO""#), "{profile}");
    assert_eq!(hc.init, Some(true));
    assert_eq!(hc.privileged, Some(false));
    assert_eq!(hc.pids_limit, Some(1024));
    assert_eq!(hc.memory, Some(4 << 30));
    assert!(hc.nano_cpus.unwrap_or(0) > 0, "a CPU limit is set");
    assert_ne!(hc.network_mode.as_deref(), Some("host"));
    // Podman lists the workspace mount among the binds too; nothing else may be there.
    let binds = hc.binds.unwrap_or_default();
    assert!(binds.iter().all(|b| b.split(':').nth(1) == Some("/workspace")), "{binds:?}");
    let mounts = c.mounts.unwrap();
    assert_eq!(mounts.len(), 1, "only the workspace is mounted: {mounts:?}");
    assert_eq!(mounts[0].destination.as_deref(), Some("/workspace"));
    assert!(mounts.iter().all(|m| !m.source.as_deref().unwrap_or("").contains("docker.sock")));
    let config = c.config.unwrap();
    let me = format!("{}:{}", nix::unistd::getuid(), nix::unistd::getgid());
    assert_eq!(config.user.as_deref(), Some(me.as_str()));
    assert_eq!(config.tty, Some(true));
    let labels = config.labels.unwrap();
    assert_eq!(labels["forage.sandbox"], "secure");
    assert_eq!(labels["forage.mode"], "direct");
    assert_eq!(labels["forage.template"], "shell");
    assert_eq!(labels["forage.home"], env.home.to_str().unwrap());

    // The process runs as the user, with no capabilities, under an init.
    let out = env.ok(&["exec", "secure", "--", "sh", "-c", "id -u; grep CapEff /proc/self/status; cat /proc/1/cmdline | tr '\\0' ' '; echo; echo $HOME; touch $HOME/w && echo home-writable; grep -c \":$(id -u):\" /etc/passwd; grep CapBnd /proc/self/status; grep '^Seccomp:' /proc/self/status"]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], nix::unistd::getuid().to_string());
    assert!(lines[1].ends_with("0000000000000000"), "no effective capabilities: {out}");
    assert!(lines[2].contains("init"), "PID 1 is Docker's init: {out}");
    assert_eq!(lines[3], "/home/agent");
    assert_eq!(lines[4], "home-writable");
    assert_eq!(lines[5], "1", "the user has a passwd entry");
    assert!(lines[6].ends_with("0000000000000000"), "no capability can be regained: {out}");
    assert_eq!(lines[7].split_whitespace().collect::<Vec<_>>(), ["Seccomp:", "2"], "a seccomp filter: {out}");
    env.ok(&["down", "secure"]);
    env.assert_nothing_left();
}

#[test]
fn exec_returns_the_command_exit_code_and_forwards_stdin() {
    let env = Env::new();
    let ws = env.mkdir("ws");
    env.ok(&["up", "codes", "--workspace", ws.to_str().unwrap()]);
    let out = env.run(&["exec", "codes", "--", "sh", "-c", "echo out; echo err >&2; exit 42"]);
    assert_eq!(out.status.code(), Some(42), "{}", describe(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "out\n");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "err\n");

    let mut child = env
        .cmd(&["exec", "-i", "codes", "--", "sh", "-c", "cat > /workspace/in.txt"])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"piped input\n").unwrap();
    assert!(child.wait().unwrap().success());
    assert_eq!(std::fs::read_to_string(ws.join("in.txt")).unwrap(), "piped input\n");

    // shell without a terminal reads commands from stdin.
    let mut child = env.cmd(&["shell", "codes"]).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    child.stdin.take().unwrap().write_all(b"echo in-shell; exit 5\n").unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(5));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "in-shell\n");
    env.ok(&["down", "codes"]);
}

#[test]
fn attach_and_logs_reach_the_agent() {
    let env = Env::new();
    let ws = env.mkdir("ws");
    env.ok(&["up", "talk", "--workspace", ws.to_str().unwrap()]);
    // Typing into the attached terminal runs commands in the agent's shell.
    let mut attach = env.cmd(&["attach", "talk"]).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    let mut stdin = attach.stdin.take().unwrap();
    stdin.write_all(b"echo attached-marker > /workspace/attached.txt\n").unwrap();
    stdin.flush().unwrap();
    // Waits for the content, not the file: the shell creates it before writing.
    let arrived =
        eventually(20, || std::fs::read_to_string(ws.join("attached.txt")).is_ok_and(|t| t == "attached-marker\n"));
    attach.kill().unwrap();
    let _ = attach.wait();
    assert!(arrived, "a command typed through attach did not run");

    // The agent's terminal output is in its logs.
    let logs = env.ok(&["logs", "talk"]);
    assert!(logs.contains("echo attached-marker"), "{logs}");
    let tail = env.ok(&["logs", "talk", "-n", "1"]);
    assert!(tail.lines().count() <= 1, "{tail}");
    env.ok(&["down", "talk"]);
}

#[test]
fn stop_start_restart_keep_the_workspace() {
    let env = Env::new();
    let ws = env.mkdir("ws");
    env.ok(&["up", "cycle", "--workspace", ws.to_str().unwrap()]);
    env.ok(&["exec", "cycle", "--", "sh", "-c", "echo kept > /workspace/k"]);
    let status = |env: &Env| -> String {
        let v = env.json(&["status", "cycle", "--json"]);
        v["status"].as_str().unwrap().to_owned()
    };
    env.ok(&["stop", "cycle"]);
    assert_eq!(status(&env), "stopped");
    let stderr = env.fails(&["exec", "cycle", "--", "true"], 4);
    assert!(stderr.contains("not running") && stderr.contains("forage-ctl start cycle"), "{stderr}");
    let stderr = env.fails(&["attach", "cycle"], 4);
    assert!(stderr.contains("is not running (stopped by `forage-ctl stop`)"), "{stderr}");
    env.ok(&["start", "cycle"]);
    assert_eq!(status(&env), "running");
    env.ok(&["restart", "cycle"]);
    assert_eq!(status(&env), "running");
    assert_eq!(env.ok(&["exec", "cycle", "--", "cat", "/workspace/k"]), "kept\n");
    env.ok(&["down", "cycle"]);
    env.assert_nothing_left();
}

#[test]
fn no_start_creates_a_stopped_sandbox_and_down_all_removes_everything() {
    let env = Env::new();
    let ws = env.mkdir("ws");
    env.ok(&["up", "one", "--workspace", ws.to_str().unwrap(), "--no-start"]);
    env.ok(&["up", "two", "--workspace", ws.to_str().unwrap()]);
    let v = env.json(&["status", "one", "--json"]);
    assert_eq!(v["status"], "created");
    assert_eq!(v["container"]["mounts"][0]["target"], "/workspace");
    let plan = env.ok(&["down", "--all", "--dry-run"]);
    assert!(plan.contains("one") && plan.contains("two"), "{plan}");
    assert_eq!(env.containers().len(), 2, "dry run changes nothing");
    let removed = env.json(&["down", "--all", "--json"]);
    assert_eq!(removed.as_array().unwrap().len(), 2);
    env.assert_nothing_left();
}

#[test]
fn a_container_removed_behind_forages_back_is_reported_and_cleaned_up() {
    let env = Env::new();
    let ws = env.mkdir("ws");
    env.ok(&["up", "gone", "--workspace", ws.to_str().unwrap()]);
    let opts = bollard::query_parameters::RemoveContainerOptions { force: true, ..Default::default() };
    block_on(docker().remove_container("forage-gone", Some(opts))).unwrap();
    let list = env.json(&["list", "--json"]);
    assert_eq!(list[0]["status"], "missing");
    env.ok(&["down", "gone"]);
    env.assert_nothing_left();
}

#[test]
fn an_orphan_container_is_listed_planned_by_dry_run_and_removed_by_down() {
    let env = Env::new();
    let ws = env.mkdir("ws");
    let name = env.unique("orphan");
    env.ok(&["up", &name, "--workspace", ws.to_str().unwrap()]);
    std::fs::remove_file(env.home.join("sandboxes").join(format!("{name}.json"))).unwrap();
    let list = env.json(&["list", "--json"]);
    assert_eq!(list[0]["status"], "orphan", "{list}");

    let plan = env.ok(&["down", &name, "--dry-run"]);
    assert_eq!(plan, format!("would remove container forage-{name} of sandbox {name} (it has no record)\n"));
    let plan = env.json(&["down", "--all", "--dry-run", "--json"]);
    assert_eq!(plan[0]["container"], format!("forage-{name}"), "{plan}");
    assert_eq!(plan[0]["status"], "orphan", "{plan}");
    assert_eq!(env.containers().len(), 1, "a dry run changes nothing");
    let err = env.fails(&["down", "no-such-sandbox", "--dry-run"], 3);
    assert!(err.contains("no-such-sandbox"), "{err}");

    let out = env.ok(&["down", &name]);
    assert_eq!(out, format!("removed container forage-{name} of sandbox {name}\n"));
    env.assert_nothing_left();
    assert!(ws.exists());
}

/// CI runs as root; this runs forage-ctl as an ordinary user (in the docker group)
/// so the uid mapping is proven for a uid that is not 0.
#[test]
fn a_non_root_user_runs_as_themself_inside_and_owns_what_the_agent_writes() {
    let uid = 4242;
    let env = Env::new();
    let ws = env.mkdir("ws");
    env.give(env.dir.path(), uid);
    env.give(&ws, uid);
    let as_user = |args: &[&str]| {
        let out = env.cmd_as(uid, args).output().unwrap();
        assert!(out.status.success(), "{args:?}: {}", describe(&out));
        String::from_utf8(out.stdout).unwrap()
    };
    as_user(&["up", "mine", "--workspace", ws.to_str().unwrap()]);
    let out = as_user(&[
        "exec",
        "mine",
        "--",
        "sh",
        "-c",
        "id -u; id -g; whoami; echo $HOME; touch $HOME/ok && echo > /workspace/made",
    ]);
    assert_eq!(out, format!("{uid}\n{}\nagent\n/home/agent\n", docker_gid()));
    let meta = std::fs::metadata(ws.join("made")).unwrap();
    assert_eq!((meta.uid(), meta.gid()), (uid, docker_gid()));
    as_user(&["down", "mine"]);
    env.assert_nothing_left();
}

/// Run as root on a checkout someone else owns, forage says that the agent will
/// be root inside and its files root's, and how to give it the owner's uid.
#[test]
fn root_on_a_users_checkout_is_told_the_agent_runs_as_root() {
    let env = Env::new();
    assert_eq!(nix::unistd::getuid().as_raw(), 0, "the integration tests run as root");
    let ws = env.mkdir("theirs");
    nix::unistd::chown(&ws, Some(1000.into()), Some(1000.into())).unwrap();
    let out = env.run(&["up", "asroot", "--workspace", ws.to_str().unwrap(), "--no-start"]);
    assert!(out.status.success(), "{}", describe(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("runs as root inside the sandbox") && stderr.contains("uid 1000 who owns the checkout"),
        "{stderr}"
    );
    env.ok(&["down", "asroot"]);

    // A checkout of root's own gets no such warning.
    let mine = env.mkdir("mine");
    let out = env.run(&["up", "mine", "--workspace", mine.to_str().unwrap(), "--no-start"]);
    assert!(out.status.success(), "{}", describe(&out));
    assert!(!String::from_utf8_lossy(&out.stderr).contains("runs as root"), "{}", describe(&out));
    env.ok(&["down", "mine"]);
    env.assert_nothing_left();
}

/// On every engine the agent's files are the invoking user's on the host. On
/// rootless Podman that is forage's doing (the container's uids are
/// subordinate ids unless forage asks for keep-id), so the test also asserts
/// which engine answered: a run meant for Podman that fell back to Docker
/// would prove nothing.
#[test]
fn files_the_agent_writes_belong_to_the_invoking_user_on_this_engine() {
    let env = Env::new();
    let ws = env.mkdir("owned");
    let name = env.unique("owned");
    let out = env.cmd(&["-v", "up", &name, "--workspace", ws.to_str().unwrap()]).output().unwrap();
    assert!(out.status.success(), "{}", describe(&out));
    let log = String::from_utf8_lossy(&out.stderr);
    let expected = match test_engine() {
        TestEngine::Docker => "engine: Docker ",
        TestEngine::PodmanRootless | TestEngine::PodmanRootful => "engine: Podman ",
    };
    assert!(log.contains(expected), "expected {expected:?} in: {log}");
    assert_eq!(test_engine() == TestEngine::PodmanRootless, log.contains("(rootless)"), "{log}");
    let engine = &env.json(&["status", &name, "--json"])["engine"];
    let (kind, rootless) = match test_engine() {
        TestEngine::Docker => ("docker", false),
        TestEngine::PodmanRootless => ("podman", true),
        TestEngine::PodmanRootful => ("podman", false),
    };
    assert_eq!((engine["kind"].as_str(), engine["rootless"].as_bool()), (Some(kind), Some(rootless)), "{engine}");

    env.ok(&[
        "exec",
        &name,
        "--",
        "sh",
        "-c",
        "mkdir -p /workspace/d/e && echo x > /workspace/d/e/f && id -u > /workspace/uid",
    ]);
    let me = (nix::unistd::getuid().as_raw(), nix::unistd::getgid().as_raw());
    assert_eq!(std::fs::read_to_string(ws.join("uid")).unwrap().trim(), me.0.to_string(), "the agent runs as the user");
    for written in ["uid", "d", "d/e", "d/e/f"] {
        let meta = std::fs::metadata(ws.join(written)).unwrap();
        assert_eq!((meta.uid(), meta.gid()), me, "{written} belongs to the invoking user");
    }
    env.ok(&["down", &name]);
    env.assert_nothing_left();
}
