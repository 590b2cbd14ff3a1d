//! Host safety: workspaces and mounts that would hand the agent the machine are
//! refused; no record, however forged, makes forage delete outside its own
//! directories; bad records and templates are reported, never fatal to the rest.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};

use crate::git::{git, repo};
use crate::support::*;

#[test]
fn dangerous_workspaces_and_mounts_are_refused_with_exit_2_and_create_nothing() {
    let env = Env::new();
    let inside_home = env.home.join("workspaces");
    std::fs::create_dir_all(&inside_home).unwrap();
    // The engine's socket directory (/var/run is /run here), /, FORAGE_HOME, a
    // directory holding it, one inside it.
    for (path, needle) in [
        ("/var/run", "container engine's socket"),
        ("/run", "container engine's socket"),
        ("/", "whole file system"),
        (env.home.to_str().unwrap(), "is forage's state"),
        (env.dir.path().to_str().unwrap(), "holds forage's state"),
        (inside_home.to_str().unwrap(), "is inside forage's state"),
        // The kernel's views of other processes (another sandbox's files and
        // secrets through /proc/PID/root and environ), the engine's data.
        ("/proc", "kernel's view"),
        ("/sys", "kernel's view"),
        ("/dev", "kernel's view"),
        ("/var/lib/docker", "container engine keeps"),
        ("/var", "container engine keeps"),
        ("/etc", "system's own"),
        ("/usr/bin", "system's own"),
    ] {
        if !Path::new(path).exists() {
            continue;
        }
        let stderr = env.fails(&["up", "danger", "--workspace", path], 2);
        assert!(stderr.contains("refusing") && stderr.contains(needle), "{path}: {stderr}");
    }
    // The user's home (and what holds it) needs --allow-home.
    let home = env.mkdir("home-of-user");
    let refused =
        env.cmd(&["up", "homely", "--workspace", home.to_str().unwrap()]).env("HOME", &home).output().unwrap();
    assert_eq!(refused.status.code(), Some(2), "{}", describe(&refused));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--allow-home"), "{}", describe(&refused));
    // A template mounting the socket directory or FORAGE_HOME's parent.
    let tpl = env.path("tpl");
    for (name, source) in [("sock", "/var/run"), ("state", env.dir.path().to_str().unwrap())] {
        crate::templates::write(
            &tpl.join(format!("{name}.yaml")),
            &format!("host_image: {{require: [sh], tools: [sh]}}\nagent: {{command: [sh]}}\nmounts: [{{source: {source}, target: /x}}]\n"),
        );
        let ws = env.mkdir("ws");
        let out = env
            .cmd(&["up", name, "-t", name, "--workspace", ws.to_str().unwrap()])
            .env("FORAGE_TEMPLATES_PATH", &tpl)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{name}: {}", describe(&out));
        assert!(String::from_utf8_lossy(&out.stderr).contains("forage never hands an agent"), "{}", describe(&out));
    }
    // A repository that borrows objects (objects/info/alternates) from the
    // engine's socket directory: those are mounted read-only, and a socket works
    // read-only too.
    let repo = repo(&env, "borrower");
    std::fs::write(repo.join(".git/objects/info/alternates"), "/run\n").unwrap();
    let before = crate::git::repo_state(&repo);
    let stderr = env.fails(&["up", "borrower", "--git-worktree", repo.to_str().unwrap()], 2);
    assert!(stderr.contains("alternates") && stderr.contains("/run") && stderr.contains("socket"), "{stderr}");
    assert_eq!(crate::git::repo_state(&repo), before);
    env.assert_nothing_left();

    // FORAGE_HOME through a symlink, not made yet, over the workspace asked for.
    let real = env.mkdir("real");
    std::os::unix::fs::symlink(&real, env.path("link")).unwrap();
    let out = env
        .cmd(&["up", "linked", "--workspace", real.to_str().unwrap()])
        .env("FORAGE_HOME", env.path("link/state"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("holds forage's state"), "{}", describe(&out));
    assert!(!real.join("state").exists(), "nothing made");

    let allowed = env
        .cmd(&["up", "homely", "--workspace", home.to_str().unwrap(), "--allow-home", "--no-start"])
        .env("HOME", &home)
        .output()
        .unwrap();
    assert!(allowed.status.success(), "{}", describe(&allowed));
    env.ok(&["down", "homely"]);
}

#[test]
fn a_system_directory_is_no_workspace_even_read_only_but_a_template_may_mount_it_read_only() {
    let env = Env::new();
    // The workspace: refused with and without --read-only, and the message
    // says so rather than suggesting read-only.
    for extra in [&[][..], &["--read-only"][..]] {
        let args: Vec<&str> = ["up", "sys", "--workspace", "/etc"].into_iter().chain(extra.iter().copied()).collect();
        let stderr = env.fails(&args, 2);
        assert!(stderr.contains("refusing to mount /etc as a workspace, even read-only: it is /etc"), "{stderr}");
        assert!(stderr.contains("pass a project directory") && !stderr.contains("is fine"), "{stderr}");
    }
    // A template mount: writable is refused with the read-only way out;
    // read-only gets past the mount checks (to the missing image, exit 3).
    let tpl = env.path("tpl");
    let ws = env.mkdir("ws");
    for (name, read_only, code) in [("etcrw", false, 2), ("etcro", true, 3)] {
        crate::templates::write(
            &tpl.join(format!("{name}.yaml")),
            &format!(
                "image: forage-test/absent:1\nagent: {{command: [sh]}}\n\
                mounts: [{{source: /etc, target: /host-etc, read_only: {read_only}}}]\n"
            ),
        );
        let out = env
            .cmd(&["up", name, "-t", name, "--workspace", ws.to_str().unwrap()])
            .env("FORAGE_TEMPLATES_PATH", &tpl)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(code), "{name}: {}", describe(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        if read_only {
            assert!(stderr.contains("forage-test/absent:1"), "{stderr}");
        } else {
            assert!(stderr.contains(&format!("template {name} mounts /etc writable")), "{stderr}");
            assert!(stderr.contains("add `read_only: true` to the mount"), "{stderr}");
        }
    }
    env.assert_nothing_left();
}

/// Writes a record as an attacker with access to FORAGE_HOME would: `base` with
/// the given fields changed.
fn forge(env: &Env, base: &serde_json::Value, name: &str, change: impl Fn(&mut serde_json::Value)) {
    let mut record = base.clone();
    record["name"] = name.into();
    record["container"] = format!("forage-{name}").into();
    record["state"] = "removing".into();
    change(&mut record);
    std::fs::write(env.home.join(format!("sandboxes/{name}.json")), serde_json::to_vec(&record).unwrap()).unwrap();
}

#[test]
fn no_forged_record_makes_forage_delete_outside_its_directories() {
    let env = Env::new();
    let repo = repo(&env, "repo");
    let name = env.unique("model");
    env.ok(&["up", &name, "--git-worktree", repo.to_str().unwrap(), "--no-start"]);
    let model = env.json(&["status", &name, "--json"])["record"].clone();
    let victims: Vec<_> = ["victim1", "victim2", "victim3", "fake/worktrees/victim4"]
        .iter()
        .map(|rel| {
            let v = env.mkdir(rel);
            std::fs::write(v.join("keep"), "the user's\n").unwrap();
            v
        })
        .collect();
    let before: Vec<Snapshot> = victims.iter().map(|v| snapshot(v)).collect();
    let h = env.home.display().to_string();
    std::os::unix::fs::symlink(&victims[1], env.home.join("workspaces/link")).unwrap();

    let ws = |w: &mut serde_json::Value, key: &str, value: String| w["workspace"][key] = value.into();
    let undo_worktree = serde_json::json!([{"step": "git-worktree"}]);
    let undo_private = serde_json::json!([{"step": "private-repo"}]);
    // A workspace path through `..`, and through a symlink under workspaces/
    // (the worktree's entry in the repository named so that there is none).
    forge(&env, &model, "dotdot", |r| {
        ws(r, "path", format!("{h}/workspaces/../../victim1"));
        ws(r, "worktree_id", "gone".into());
        r["journal"] = undo_worktree.clone();
    });
    forge(&env, &model, "symlinked", |r| {
        ws(r, "path", format!("{h}/workspaces/link"));
        ws(r, "worktree_id", "gone".into());
        r["journal"] = undo_worktree.clone();
    });
    // A private repository through `..`.
    forge(&env, &model, "private", |r| {
        ws(r, "private", format!("{h}/private/../../victim3"));
        r["journal"] = undo_private.clone();
    });
    // A repository "admin entry" that is someone's directory.
    forge(&env, &model, "admin", |r| {
        ws(r, "common_dir", env.path("fake").display().to_string());
        ws(r, "worktree_id", "victim4".into());
        ws(r, "path", format!("{h}/workspaces/admin"));
        r["journal"] = undo_worktree.clone();
    });

    env.run(&["gc", "--force"]);
    for forged in ["dotdot", "symlinked", "private", "admin"] {
        let out = env.run(&["down", forged]);
        assert!(!out.status.success(), "{forged}: {}", describe(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("refusing to delete"), "{forged}: {stderr}");
    }
    for (v, b) in victims.iter().zip(&before) {
        assert_eq!(&snapshot(v), b, "{} was touched", v.display());
    }
    env.ok(&["down", &name]);
}

#[test]
fn a_record_copied_under_another_name_acts_on_neither_sandbox() {
    let env = Env::new();
    let ws = env.mkdir("ws");
    let (one, two) = (env.unique("one"), env.unique("two"));
    env.ok(&["up", &one, "--workspace", ws.to_str().unwrap(), "--no-start"]);
    env.ok(&["up", &two, "--workspace", ws.to_str().unwrap(), "--no-start"]);
    // A copy of one's record, named as two, under a third file name.
    let sandboxes = env.home.join("sandboxes");
    let mut copied: serde_json::Value =
        serde_json::from_slice(&std::fs::read(sandboxes.join(format!("{one}.json"))).unwrap()).unwrap();
    copied["name"] = two.clone().into();
    std::fs::write(sandboxes.join("copied.json"), serde_json::to_vec(&copied).unwrap()).unwrap();

    let list = env.json(&["list", "--json"]);
    let rows = list.as_array().unwrap();
    assert_eq!(rows.iter().filter(|r| r["name"] == two.as_str()).count(), 1, "{list}");
    let row = |n: &str| rows.iter().find(|r| r["name"] == n).unwrap()["status"].clone();
    assert_eq!(row("copied"), "corrupt", "{list}");
    assert_eq!(row(&one), "created", "{list}");
    let out = env.run(&["down", "copied"]);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains(&format!("names sandbox {two}")), "{}", describe(&out));
    assert!(inspect(&format!("forage-{one}")).is_some() && inspect(&format!("forage-{two}")).is_some());
    assert!(sandboxes.join(format!("{two}.json")).exists() && sandboxes.join(format!("{one}.json")).exists());
    std::fs::remove_file(sandboxes.join("copied.json")).unwrap();
    env.ok(&["down", &one, &two]);
    env.assert_nothing_left();
}

#[test]
fn gc_removes_an_empty_orphan_private_directory_and_leaves_one_holding_a_repository() {
    let env = Env::new();
    let empty = env.home.join("private/emptyorphan/import");
    std::fs::create_dir_all(&empty).unwrap();
    let holding = env.home.join("private/holding/git");
    std::fs::create_dir_all(&holding).unwrap();
    std::fs::write(holding.join("HEAD"), "ref: refs/heads/forage-holding\n").unwrap();
    let findings = env.json(&["gc", "--json"]);
    let text = findings.to_string();
    assert!(text.contains("private/emptyorphan") && text.contains("private/holding"), "{findings}");
    let gc = env.ok(&["gc"]);
    assert!(gc.contains("  would leave it alone (it holds a repository forage cannot trace back"), "{gc}");
    env.ok(&["gc", "--force"]);
    assert!(!env.home.join("private/emptyorphan").exists(), "an empty orphan goes");
    assert!(holding.join("HEAD").exists(), "one holding a repository forage cannot trace stays");
    let again = env.json(&["gc", "--json"]);
    assert_eq!(again.as_array().unwrap().len(), 1, "only what gc said it leaves: {again}");
}

#[test]
fn list_gc_and_down_all_get_past_a_corrupt_record_and_one_from_a_newer_forage() {
    let env = Env::new();
    let ws = env.mkdir("ws");
    let good = env.unique("good");
    env.ok(&["up", &good, "--workspace", ws.to_str().unwrap(), "--no-start"]);
    let sandboxes = env.home.join("sandboxes");
    std::fs::write(sandboxes.join("broken.json"), "{ not json").unwrap();
    let mut future = env.json(&["status", &good, "--json"])["record"].clone();
    future["version"] = 99.into();
    future["name"] = "future".into();
    std::fs::write(sandboxes.join("future.json"), serde_json::to_vec(&future).unwrap()).unwrap();

    let list = env.json(&["list", "--json"]);
    let status = |n: &str| list.as_array().unwrap().iter().find(|r| r["name"] == n).map(|r| r["status"].clone());
    assert_eq!(status(&good), Some("created".into()), "{list}");
    assert_eq!(status("broken"), Some("corrupt".into()), "{list}");
    assert_eq!(status("future"), Some("unsupported version".into()), "{list}");
    assert!(env.ok(&["list"]).contains("corrupt"));
    let findings = env.json(&["gc", "--json"]);
    let unreadable = findings.as_array().unwrap().iter().filter(|f| f["kind"] == "unreadable-record").count();
    assert_eq!(unreadable, 2, "{findings}");
    // Each said to be left alone, why, and what the user can do.
    let gc = env.ok(&["gc"]);
    let action = |record: &str| {
        let mut lines = gc
            .lines()
            .skip_while(|l| !l.starts_with(&format!("unreadable-record: {}", sandboxes.join(record).display())));
        lines.nth(1).unwrap_or_else(|| panic!("{record}: {gc}")).to_owned()
    };
    assert_eq!(
        action("broken.json"),
        "  would leave it alone (forage cannot tell what it describes); \
        move it aside, and remove the sandbox's container (forage-broken) and workspace by hand"
    );
    assert_eq!(
        action("future.json"),
        "  would leave it alone (a newer forage wrote it); use the newer forage-ctl that made it"
    );
    assert!(!gc.contains("would nothing"), "{gc}");
    let err = env.fails(&["status", "future"], 1);
    assert!(err.contains("unsupported version") && err.contains("newer forage-ctl"), "{err}");

    let out = env.run(&["down", "--all"]);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("corrupt"), "{}", describe(&out));
    assert!(inspect(&format!("forage-{good}")).is_none(), "the good sandbox went all the same");
    assert!(sandboxes.join("broken.json").exists() && sandboxes.join("future.json").exists());
}

#[test]
fn templates_too_big_or_too_deep_are_refused_before_they_are_parsed() {
    let env = Env::new();
    let tpl = env.path("tpl");
    crate::templates::write(
        &tpl.join("deep.yaml"),
        &format!("description: {}{}\n", "[".repeat(30_000), "]".repeat(30_000)),
    );
    crate::templates::write(&tpl.join("big.yaml"), &format!("description: x\n#{}\n", "x".repeat(70_000)));
    // Ways around a naive count: a quote inside a plain scalar (which YAML
    // reads as a plain `'`), block sequences nested on one line, and a quoted
    // scalar running over the line's end.
    crate::templates::write(
        &tpl.join("quoted.yaml"),
        &format!("agent: {{command: [sh]}}\ninit: [a', {}{}]\n", "[".repeat(20_000), "]".repeat(20_000)),
    );
    crate::templates::write(
        &tpl.join("dashes.yaml"),
        &format!("agent: {{command: [sh]}}\ninit:\n  {}x\n", "- ".repeat(20_000)),
    );
    crate::templates::write(
        &tpl.join("spanning.yaml"),
        &format!("agent: {{command: [sh]}}\ninit: [\"a\n{}\"]\n", "[".repeat(20_000)),
    );
    let show = |name: &str| env.cmd(&["templates", "show", name]).env("FORAGE_TEMPLATES_PATH", &tpl).output().unwrap();
    for (name, line) in [("deep", 1), ("quoted", 2), ("dashes", 3), ("spanning", 3)] {
        let out = show(name);
        assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(&format!("{name}.yaml:{line}: nested more than 32 levels")),
            "{}",
            describe(&out)
        );
    }
    let out = show("big");
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("larger than 64 KiB"), "{}", describe(&out));
}

#[test]
fn bad_image_references_branch_names_and_paths_get_one_clear_line() {
    let env = Env::new();
    let ws = env.mkdir("ws");
    let stderr = env.fails(&["up", "img", "--workspace", ws.to_str().unwrap(), "--image", "Bad Image:"], 2);
    assert!(stderr.contains("\"Bad Image:\" is not an image reference") && stderr.lines().count() == 1, "{stderr}");
    let tpl = env.path("tpl");
    crate::templates::write(&tpl.join("badimg.yaml"), "image: ubuntu:\nagent: {command: [sh]}\n");
    let out = env
        .cmd(&["up", "img", "-t", "badimg", "--workspace", ws.to_str().unwrap()])
        .env("FORAGE_TEMPLATES_PATH", &tpl)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    // A sandbox name that makes no branch name: said in plain words.
    let repo = repo(&env, "repo");
    let stderr = env.fails(&["up", "nc-x.lock", "--git-worktree", repo.to_str().unwrap()], 2);
    assert!(stderr.contains("sandbox name \"nc-x.lock\"") && !stderr.contains("SandboxName("), "{stderr}");
    // A mistyped template name gets the closest one.
    let stderr = env.fails(&["up", "t", "-t", "claude-code", "--workspace", ws.to_str().unwrap()], 3);
    assert!(stderr.contains("did you mean \"claude\"?"), "{stderr}");
    // A jj repository at a path that is not UTF-8: refused, no panic.
    use std::os::unix::ffi::OsStrExt;
    let odd = env.dir.path().join(std::ffi::OsStr::from_bytes(b"jj-\xff"));
    std::fs::create_dir(&odd).unwrap();
    std::fs::create_dir_all(odd.join(".jj/repo")).unwrap();
    let out = env.cmd(&["up", "odd"]).arg("--jj").arg(&odd).output().unwrap();
    assert_eq!(out.status.code(), Some(6), "{}", describe(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not UTF-8"), "{}", describe(&out));
    let orphan = env.home.join("workspaces/odd");
    std::fs::create_dir_all(orphan.join(".jj")).unwrap();
    std::fs::write(orphan.join(".jj/repo"), odd.join(".jj/repo").as_os_str().as_bytes()).unwrap();
    let report = env.json(&["gc", "--force", "--json"]);
    assert!(report.to_string().contains("by hand"), "{report}");
    assert!(orphan.join(".jj/repo").exists(), "what forage cannot trace back is left alone");
}

/// The lock file `forage-ctl` takes for a repository (see `Home::lock_repo`).
fn repo_lock(env: &Env, repo: &Path) -> std::path::PathBuf {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(repo.join(".git").canonicalize().unwrap().as_os_str().as_encoded_bytes());
    let key: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    env.home.join(format!("locks/repo-{key}.lock"))
}

#[test]
fn ctrl_c_while_up_waits_for_a_lock_ends_it_at_once_and_leaves_the_other_sandbox_alone() {
    use nix::fcntl::{Flock, FlockArg};
    use std::io::{BufRead, BufReader};
    let env = Env::new();
    let repo = repo(&env, "repo");
    let first = env.unique("first");
    env.ok(&["up", &first, "--git-worktree", repo.to_str().unwrap()]);
    // Another forage-ctl, in the middle of changing the repository.
    let lock = repo_lock(&env, &repo);
    let file = std::fs::File::options().create(true).truncate(false).write(true).open(&lock).unwrap();
    let held = Flock::lock(file, FlockArg::LockExclusive).map_err(|(_, e)| e).unwrap();

    let second = env.unique("second");
    let mut child = env
        .cmd(&["up", &second, "--git-worktree", repo.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut said = String::new();
    while !said.contains("waiting for the repository") {
        let mut line = String::new();
        assert!(stderr.read_line(&mut line).unwrap() > 0, "up ended without waiting: {said}");
        said.push_str(&line);
    }
    assert!(said.contains("Ctrl-C gives up"), "{said}");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGINT).unwrap();
    // A guard against hanging for ever, not a timing goal.
    assert!(eventually(30, || child.try_wait().unwrap().is_some()), "up ignored Ctrl-C while waiting");
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut rest).unwrap();
    assert_eq!(child.wait().unwrap().code(), Some(1), "{rest}");
    assert!(rest.contains("interrupted while waiting for the repository"), "{rest}");
    drop(held);

    // Nothing of the second sandbox; the first one untouched and working.
    assert!(inspect(&format!("forage-{second}")).is_none());
    assert!(!env.home.join(format!("sandboxes/{second}.json")).exists());
    assert!(git(&repo, &["branch", "--list", &format!("forage-{second}")]).is_empty());
    assert_eq!(env.json(&["list", "--json"])[0]["status"], "running");
    env.ok(&["exec", &first, "--", "true"]);
    env.ok(&["down", &first]);
    env.assert_nothing_left();
}

#[test]
fn a_setuid_file_the_agent_makes_is_out_of_other_users_reach() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let env = Env::new();
    // Everything above FORAGE_HOME's own directories open to all, as a home
    // directory often is; and an older forage made these readable by all.
    std::fs::set_permissions(env.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::create_dir_all(&env.home).unwrap();
    std::fs::set_permissions(&env.home, std::fs::Permissions::from_mode(0o755)).unwrap();
    for dir in ["workspaces", "private"] {
        std::fs::create_dir_all(env.home.join(dir)).unwrap();
        std::fs::set_permissions(env.home.join(dir), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let repo = repo(&env, "repo");
    let name = env.unique("hs-suid");
    env.ok(&["up", &name, "--git-worktree", repo.to_str().unwrap()]);
    // Root in the container copies a shell into its workspace and tries to make
    // it setuid: the copy is made, the mode refused (runtime/seccomp.rs).
    let out = env.run(&["exec", &name, "--", "sh", "-c", "cp /bin/sh /workspace/suid && chmod 4755 /workspace/suid"]);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("Operation not permitted"), "{}", describe(&out));
    let suid = env.home.join("workspaces").join(&name).join("suid");
    assert!(suid.is_file(), "the copy was made");
    assert_eq!(std::fs::metadata(&suid).unwrap().mode() & 0o6000, 0, "a setuid file on the host");
    // And were one there, no other user could reach it.
    for dir in ["workspaces", "private"] {
        let mode = std::fs::metadata(env.home.join(dir)).unwrap().mode();
        assert_eq!(mode & 0o077, 0, "{dir} is {mode:o}: other users can reach the agent's files");
    }
    let out = Command::new(&suid).arg("-c").arg("id -u").uid(4246).gid(4246).output();
    assert!(out.is_err() || !out.unwrap().status.success(), "another user ran the agent's shell");
    env.ok(&["down", &name, "--discard"]);
}
