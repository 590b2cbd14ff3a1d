//! Bad input: one clear message, the documented exit code, nothing created.

use crate::support::*;

#[test]
fn invalid_names_exit_2_naming_the_rule() {
    let env = Env::new();
    let ws = env.mkdir("ws");
    for bad in ["", "Upper", "../x", "a b", "é", &"x".repeat(64)] {
        let stderr = env.fails(&["up", bad, "--workspace", ws.to_str().unwrap()], 2);
        assert!(stderr.contains("lowercase letters, digits"), "{bad:?}: {stderr}");
        assert!(stderr.contains(&format!("{bad:?}")), "names the bad value: {stderr}");
    }
    // A leading dash reads as an option; clap says so and how to pass it anyway.
    let stderr = env.fails(&["up", "-lead", "--workspace", ws.to_str().unwrap()], 2);
    assert!(stderr.contains("unexpected argument '-l'"), "{stderr}");
    env.assert_nothing_left();
}

#[test]
fn a_missing_or_wrong_workspace_exits_6_and_creates_nothing() {
    let env = Env::new();
    let file = env.path("file");
    std::fs::write(&file, "x").unwrap();
    let missing = env.path("missing");
    let stderr = env.fails(&["up", "w", "--workspace", missing.to_str().unwrap()], 6);
    assert!(stderr.contains(missing.to_str().unwrap()) && stderr.contains("does not exist"), "{stderr}");
    let stderr = env.fails(&["up", "w", "--workspace", file.to_str().unwrap()], 6);
    assert!(stderr.contains("not a directory"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    env.assert_nothing_left();
    assert!(!missing.exists(), "forage must not create the missing path");
}

#[test]
fn an_unreachable_engine_exits_5_with_a_hint_and_creates_nothing() {
    let env = Env::new();
    let ws = env.mkdir("ws");
    let dead = format!("unix://{}", env.path("dead.sock").display());
    for args in [vec!["up", "x", "--workspace", ws.to_str().unwrap()], vec!["list"], vec!["down", "x"]] {
        let out = env.cmd(&args).env("DOCKER_HOST", &dead).output().unwrap();
        assert_eq!(out.status.code(), Some(5), "{args:?}: {}", describe(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(&dead) && stderr.contains("DOCKER_HOST") && stderr.contains("dockerd"), "{stderr}");
    }
    env.assert_nothing_left();
}

#[test]
fn unknown_sandboxes_exit_3() {
    let env = Env::new();
    for args in [
        vec!["status", "nope"],
        vec!["exec", "nope", "--", "true"],
        vec!["down", "nope"],
        vec!["stop", "nope"],
        vec!["logs", "nope"],
        vec!["attach", "nope"],
    ] {
        let stderr = env.fails(&args, 3);
        assert!(stderr.contains("\"nope\"") && stderr.contains("forage-ctl list"), "{args:?}: {stderr}");
    }
    env.assert_nothing_left();
}

#[test]
fn a_name_in_use_exits_4_and_leaves_the_first_sandbox_alone() {
    let env = Env::new();
    let ws = env.mkdir("ws");
    env.ok(&["up", "taken", "--workspace", ws.to_str().unwrap()]);
    let id_before = inspect("forage-taken").unwrap().id;
    let stderr = env.fails(&["up", "taken", "--workspace", ws.to_str().unwrap()], 4);
    assert!(stderr.contains("\"taken\" already exists") && stderr.contains("forage-ctl down taken"), "{stderr}");
    assert_eq!(inspect("forage-taken").unwrap().id, id_before);
    assert_eq!(env.ok(&["ls", "-q"]), "taken\n");
    env.ok(&["down", "taken"]);
    env.assert_nothing_left();
}

#[test]
fn a_missing_template_or_image_exits_3_and_creates_nothing() {
    let env = Env::new();
    let ws = env.mkdir("ws");
    let stderr = env.fails(&["up", "t", "-t", "no-such-template", "--workspace", ws.to_str().unwrap()], 3);
    assert!(stderr.contains("no-such-template") && stderr.contains("forage-ctl templates"), "{stderr}");
    // With no close name, nothing is left of the suggestion's place.
    assert!(stderr.contains("not found (searched ") && !stderr.contains("; (") && !stderr.contains("; ;"), "{stderr}");
    let stderr = env.fails(&["up", "t", "--image", "forage-test/absent:1", "--workspace", ws.to_str().unwrap()], 3);
    assert!(stderr.contains("forage-test/absent:1"), "{stderr}");
    env.assert_nothing_left();
}

#[test]
fn bad_usage_exits_2() {
    let env = Env::new();
    env.fails(&["up", "x"], 2);
    env.fails(&["exec", "x"], 2);
    env.fails(&["down"], 2);
    let ws = env.mkdir("ws");
    let stderr = env.fails(&["up", "x", "--workspace", ws.to_str().unwrap(), "--memory", "lots"], 2);
    assert!(stderr.contains("lots"), "{stderr}");
    env.assert_nothing_left();
}

/// CI runs as root, for whom everything is readable; an ordinary user (in the
/// docker group) meets the unreadable workspace, secret file and repository.
#[test]
fn unreadable_paths_are_refused_clearly_and_create_nothing() {
    use std::os::unix::fs::PermissionsExt;
    let uid = 4243;
    let env = Env::new();
    env.give(env.dir.path(), uid);
    let locked = |rel: &str| {
        let p = env.mkdir(rel);
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o000)).unwrap();
        p
    };
    let ws = locked("ws");
    let repo = locked("repo");
    let secret = env.path("secret");
    std::fs::write(&secret, "s").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let readable_ws = env.mkdir("ok");
    env.give(&readable_ws, uid);

    let as_user = |args: &[&str], code: i32, needle: &str| {
        let out = env.cmd_as(uid, args).output().unwrap();
        assert_eq!(out.status.code(), Some(code), "{args:?}: {}", describe(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(needle) && stderr.lines().count() == 1, "{args:?}: {stderr}");
    };
    as_user(&["up", "unread-ws", "--workspace", ws.to_str().unwrap()], 6, "cannot be read");
    as_user(&["up", "unread-repo", "--git-worktree", repo.to_str().unwrap()], 6, "cannot be read");
    as_user(&["up", "unread-jj", "--jj", repo.to_str().unwrap()], 6, "cannot be read");
    let secret_arg = format!("key={}", secret.display());
    as_user(
        &["up", "unread-secret", "--workspace", readable_ws.to_str().unwrap(), "--secret", &secret_arg],
        2,
        "cannot be read",
    );
    env.assert_nothing_left();
}

/// Each reason the engine cannot be reached has its own message naming the
/// socket or address, and its own fix; all exit 5 and create nothing.
#[test]
fn a_missing_socket_and_a_refused_engine_each_say_so_and_exit_5() {
    let env = Env::new();
    let missing = env.path("no-engine.sock");
    let err = list_fails_with(&env, &format!("unix://{}", missing.display()));
    assert_eq!(
        err,
        format!(
            "forage-ctl: error: no Docker engine at unix://{0}: there is no socket {0}; start dockerd (e.g. `sudo \
             systemctl start docker`), or point DOCKER_HOST at the socket of a running engine\n",
            missing.display()
        )
    );

    // A socket file nobody listens on, as a stopped engine leaves it.
    let stale = env.path("stale.sock");
    drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
    let err = list_fails_with(&env, &format!("unix://{}", stale.display()));
    assert_eq!(
        err,
        format!(
            "forage-ctl: error: no Docker engine listens on the socket {} (connection refused): the engine that made \
             it has stopped, or it is not a Docker socket; start dockerd (e.g. `sudo systemctl start docker`), or \
             point DOCKER_HOST at a running engine\n",
            stale.display()
        )
    );

    // A TCP port nothing listens on: bind one, learn its number, close it.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let err = list_fails_with(&env, &format!("tcp://127.0.0.1:{port}"));
    assert_eq!(
        err,
        format!(
            "forage-ctl: error: the Docker engine at tcp://127.0.0.1:{port} refused the connection: nothing listens \
             there; start the engine listening on that address, or correct the host and port in DOCKER_HOST\n"
        )
    );
    env.assert_nothing_left();
}

/// `list` against `docker_host` exits 5; its stderr.
fn list_fails_with(env: &Env, docker_host: &str) -> String {
    let out = env.cmd(&["list"]).env("DOCKER_HOST", docker_host).output().unwrap();
    assert_eq!(out.status.code(), Some(5), "{docker_host}: {}", describe(&out));
    assert!(out.stdout.is_empty(), "{}", describe(&out));
    String::from_utf8(out.stderr).unwrap()
}

/// A user outside the socket's group is told to join it, not to start dockerd
/// (which runs). CI runs as root, whom permissions do not stop: the command
/// runs as `nobody`, with no supplementary groups, against the real socket.
#[test]
fn a_user_who_may_not_use_the_socket_is_told_to_join_its_group_not_to_start_dockerd() {
    use std::os::unix::fs::MetadataExt;
    use std::os::unix::process::CommandExt;
    let socket = std::path::Path::new("/var/run/docker.sock");
    let meta = std::fs::metadata(socket).expect("the engine's socket at /var/run/docker.sock");
    assert_eq!(meta.mode() & 0o006, 0, "the socket must not be open to everyone for this test");
    let group = nix::unistd::Group::from_gid(meta.gid().into()).unwrap().unwrap().name;
    let nobody = nix::unistd::User::from_name("nobody").unwrap().expect("a user nobody");
    assert_ne!(nobody.gid.as_raw(), meta.gid());

    let env = Env::new();
    nix::unistd::chown(env.dir.path(), Some(nobody.uid), Some(nobody.gid)).unwrap();
    // With a uid set, std drops root's supplementary groups (setgroups(0)).
    let out = env
        .cmd(&["list"])
        .env("DOCKER_HOST", "unix:///var/run/docker.sock")
        .env("HOME", env.dir.path())
        .uid(nobody.uid.as_raw())
        .gid(nobody.gid.as_raw())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(5), "{}", describe(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!(
            "forage-ctl: error: permission denied on the Docker socket /var/run/docker.sock: user nobody (uid {uid}) \
             may not use it (its group is {group}, mode {mode:o}); add yourself to the group that owns it (`sudo \
             usermod -aG {group} $USER`, then log in again or run `newgrp {group}`), or use rootless Docker \
             (DOCKER_HOST=unix://$XDG_RUNTIME_DIR/docker.sock)\n",
            uid = nobody.uid,
            mode = meta.mode() & 0o7777,
        )
    );
    assert!(out.stdout.is_empty());
    env.assert_nothing_left();
}
