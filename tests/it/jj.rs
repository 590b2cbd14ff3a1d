//! jj mode against real jj and the real engine: jj works inside from the first
//! command, in a private repository; `sync` brings the agent's changes to the
//! host as bookmark `forage/<name>`, change ids intact; `down` keeps every change.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::support::*;

pub fn jj(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("jj")
        .args(["--no-pager", "--color=never", "-R"])
        .arg(dir)
        .args(args)
        .env("JJ_USER", "Test")
        .env("JJ_EMAIL", "test@example.com")
        .output()
        .expect("jj is installed (.ci/run installs it)");
    assert!(out.status.success(), "jj {args:?}: {}", describe(&out));
    String::from_utf8(out.stdout).unwrap()
}

/// A jj repository (colocated with git unless told otherwise) with one described
/// change, bookmarked `main`, and an empty working-copy change on top.
pub fn jj_repo(env: &Env, rel: &str, colocate: bool) -> PathBuf {
    let dir = env.mkdir(rel);
    let flag = if colocate { "--colocate" } else { "--no-colocate" };
    let out = Command::new("jj").args(["git", "init", flag]).arg(&dir).output().unwrap();
    assert!(out.status.success(), "{}", describe(&out));
    std::fs::write(dir.join("a.txt"), "base\n").unwrap();
    jj(&dir, &["describe", "-m", "base"]);
    jj(&dir, &["new"]);
    jj(&dir, &["bookmark", "create", "main", "-r", "@-"]);
    dir
}

/// The repository's jj workspaces, by name.
pub fn workspaces(repo: &Path) -> Vec<String> {
    jj(repo, &["workspace", "list", "-T", "name ++ \"\\n\""]).lines().map(str::to_owned).collect()
}

/// The repository's bookmarks, `name target` per line.
pub fn bookmarks(repo: &Path) -> String {
    jj(
        repo,
        &[
            "bookmark",
            "list",
            "--all",
            "-T",
            "name ++ \"@\" ++ remote ++ \" \" ++ normal_target.commit_id() ++ \"\\n\"",
        ],
    )
}

/// `description change_id` of every visible change.
fn changes(repo: &Path, revset: &str) -> String {
    jj(repo, &["log", "-r", revset, "--no-graph", "-T", "description.first_line() ++ \" \" ++ change_id ++ \"\\n\""])
}

fn sh(env: &Env, name: &str, script: &str) -> String {
    env.ok(&["exec", name, "--", "sh", "-c", script])
}

#[test]
fn jj_works_inside_from_the_first_command_and_sync_brings_changes_with_their_change_ids() {
    for colocate in [true, false] {
        let env = Env::new();
        let repo = jj_repo(&env, "repo", colocate);
        let name = env.unique("jjagent");
        env.ok(&["up", &name, "--jj", repo.to_str().unwrap()]);
        let host_ops = jj(&repo, &["op", "log", "--no-graph", "-T", "id ++ \"\\n\""]);
        // The very first jj command inside works (no read-only file under .jj to trip on).
        let out = sh(&env, &name, "cd /workspace && jj st && jj log -r 'main@host' --no-graph -T description");
        assert!(out.contains("The working copy has no changes") && out.ends_with("base\n"), "{colocate}: {out}");
        let out = sh(
            &env,
            &name,
            "cd /workspace && echo agent > b.txt && jj describe -m 'agent change' && jj new && echo wip > c.txt \
             && jj log -r @- --no-graph -T change_id",
        );
        let change_id = out.trim().to_owned();
        // A new file over jj's default snapshot size limit (1 MiB).
        sh(&env, &name, "head -c 2000000 /dev/zero | tr '\\0' x > /workspace/big.bin");
        // Nothing reached the host yet: the repository, its operations included, is as it was.
        assert!(!changes(&repo, "all()").contains("agent change"));
        assert_eq!(jj(&repo, &["op", "log", "--no-graph", "-T", "id ++ \"\\n\""]), host_ops);

        let synced = env.json(&["sync", &name, "--json"]);
        assert_eq!(synced["changes"], 2, "{synced}");
        let bookmark = format!("forage/{name}");
        // The change arrived with its change id, and the bookmark sits on the agent's work.
        assert_eq!(changes(&repo, &format!("{bookmark}-")), format!("agent change {change_id}\n"));
        let files = jj(&repo, &["file", "list", "-r", &bookmark]);
        assert!(files.contains("c.txt") && files.contains("big.bin"), "{files}");
        let status = env.json(&["status", &name, "--json"]);
        assert_eq!(status["git"]["ahead"], 2, "{status}");
        assert_eq!(status["git"]["branch"], bookmark.as_str());
        // The text lines up, shows short ids, and lists mounts in a stable order.
        let text = env.ok(&["status", &name]);
        let base = status["git"]["base"].as_str().unwrap();
        assert!(text.contains(&format!("bookmark:   {bookmark}\n")), "{text}");
        assert!(text.contains(&format!("base:       {} (", &base[..12])) && !text.contains(base), "{text}");
        let mounts: Vec<&str> =
            text.lines().filter(|l| l.starts_with("mount:")).map(|l| l.split(" -> ").nth(1).unwrap()).collect();
        let mut sorted = mounts.clone();
        sorted.sort();
        assert_eq!(mounts, sorted, "{text}");
        assert_eq!(workspaces(&repo), ["default"], "no workspace of the user's repository is the agent's");

        let out = env.ok(&["down", &name]);
        assert!(out.contains("archived 2 changes") && out.contains(&format!("bookmark {bookmark} removed")), "{out}");
        assert!(!bookmarks(&repo).contains(&format!("{bookmark}@")), "{}", bookmarks(&repo));
        assert!(!env.home.join("workspaces").join(&name).exists());
        env.assert_nothing_left_but_archives();
        // Every change is still there, reachable from the archive bookmark.
        let archive = format!("bookmarks(glob:\"forage/archive/{name}/*\")");
        assert!(changes(&repo, &format!("::{archive}")).contains(&format!("agent change {change_id}")));
        let files = jj(&repo, &["file", "list", "-r", &archive]);
        assert!(files.contains("b.txt") && files.contains("c.txt") && files.contains("big.bin"), "{files}");

        // restore --up: a sandbox on top of the archived work.
        env.ok(&["restore", &name, "--up"]);
        assert_eq!(sh(&env, &name, "cat /workspace/b.txt /workspace/c.txt"), "agent\nwip\n");
        env.ok(&["down", &name, "--discard"]);
        env.assert_nothing_left_but_archives();
    }
}

#[test]
fn two_jj_sandboxes_see_each_others_work_read_only_and_parallel_ups_all_succeed() {
    let env = Env::new();
    let repo = jj_repo(&env, "repo", true);
    let r = repo.to_str().unwrap();
    let (a, b) = (env.unique("jja"), env.unique("jjb"));
    env.ok(&["up", &a, "--jj", r]);
    env.ok(&["up", &b, "--repo", r]);
    sh(&env, &a, "cd /workspace && echo a > a2.txt && jj describe -m from-a");
    env.ok(&["sync", &a]);
    // b sees a's synced work as a remote bookmark, can build on it, cannot move it.
    let out = sh(
        &env,
        &b,
        &format!("cd /workspace && jj git import >/dev/null 2>&1 && jj log -r 'forage/{a}@host' --no-graph -T description && jj new 'forage/{a}@host' && test -f a2.txt && echo b > b2.txt && jj describe -m from-b"),
    );
    assert!(out.starts_with("from-a"), "{out}");
    env.ok(&["sync", &b]);
    assert_eq!(changes(&repo, &format!("forage/{b}")).split(' ').next(), Some("from-b"));
    assert_eq!(changes(&repo, &format!("forage/{b}-")).split(' ').next(), Some("from-a"));
    assert_eq!(changes(&repo, &format!("forage/{a}")).split(' ').next(), Some("from-a"));
    env.ok(&["down", &a]);
    env.ok(&["down", &b]);

    let names: Vec<String> = (0..4).map(|i| env.unique(&format!("jjpar{i}"))).collect();
    let children: Vec<_> = names
        .iter()
        .map(|n| env.cmd(&["up", n, "--jj", r]).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap())
        .collect();
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", describe(&out));
    }
    for n in &names {
        assert!(sh(&env, n, "cd /workspace && jj st").contains("Working copy"));
    }
    env.ok(&["down", "--all"]);
    assert_eq!(workspaces(&repo), vec!["default".to_string()]);
    env.assert_nothing_left_but_archives();
}

#[test]
fn a_stopped_sandbox_is_snapshotted_in_a_helper_container_and_late_files_are_kept() {
    let env = Env::new();
    let image = crate::templates::shell_image(&env);
    let dir = env.path("tpl");
    // An agent that writes a file as it is stopped: after jj's last snapshot.
    crate::templates::write(
        &dir.join("late.yaml"),
        &format!(
            "image: {image}\nagent: {{command: [sh, -c, \"trap 'echo bye > /workspace/late.txt; exit 0' TERM; while :; do sleep 0.1; done\"]}}\nstop_signal: SIGTERM\n"
        ),
    );
    let repo = jj_repo(&env, "repo", false);
    let up = |name: &str| {
        let out = env
            .cmd(&["up", name, "-t", "late", "--jj", repo.to_str().unwrap()])
            .env("FORAGE_TEMPLATES_PATH", &dir)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", describe(&out));
    };
    let late = env.unique("jjlate");
    up(&late);
    sh(&env, &late, "cd /workspace && echo x > x.txt && jj describe -m described-inside");
    env.ok(&["down", &late]);
    let files = jj(&repo, &["file", "list", "-r", &format!("bookmarks(glob:\"forage/archive/{late}/*\")")]);
    assert!(files.contains("late.txt") && files.contains("x.txt"), "{files}");
    assert!(changes(&repo, "all()").contains("described-inside"));

    // Stopped before down: jj runs in a helper container, and the change made
    // inside (not only its files) survives.
    let stopped = env.unique("jjstopped");
    up(&stopped);
    sh(&env, &stopped, "cd /workspace && echo s > s.txt && jj describe -m made-before-stop");
    env.ok(&["stop", &stopped]);
    let out = env.ok(&["down", &stopped]);
    assert!(out.contains("archived"), "{out}");
    let archive = format!("bookmarks(glob:\"forage/archive/{stopped}/*\")");
    assert!(changes(&repo, &format!("::{archive}")).contains("made-before-stop"), "{}", changes(&repo, "all()"));
    env.assert_nothing_left_but_archives();
}

#[test]
fn without_jj_in_the_image_the_files_are_still_archived() {
    let env = Env::new();
    let dir = env.path("tpl");
    crate::templates::write(
        &dir.join("nojj.yaml"),
        "host_image: {require: [sh], tools: [sh, echo, cat]}\nagent: {command: [sh, -c, 'while :; do read x; done']}\nstop_signal: SIGKILL\n",
    );
    let repo = jj_repo(&env, "repo", true);
    let name = env.unique("jjnojj");
    let out = env
        .cmd(&["up", &name, "-t", "nojj", "--jj", repo.to_str().unwrap()])
        .env("FORAGE_TEMPLATES_PATH", &dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", describe(&out));
    sh(&env, &name, "echo edited > /workspace/edited.txt");
    let out = env.run(&["down", &name]);
    assert!(out.status.success(), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not archived: jj's snapshot in the sandbox"),
        "{}",
        describe(&out)
    );
    let files = jj(&repo, &["file", "list", "-r", &format!("bookmarks(glob:\"forage/archive/{name}/*\")")]);
    assert!(files.contains("edited.txt") && files.contains("a.txt"), "{files}");
    env.assert_nothing_left_but_archives();
}

#[test]
fn jj_errors_are_clear() {
    let env = Env::new();
    let plain = env.mkdir("plain");
    let stderr = env.fails(&["up", "nojj", "--jj", plain.to_str().unwrap()], 6);
    assert!(stderr.contains("not inside a jj repository"), "{stderr}");
    let repo = jj_repo(&env, "repo", true);
    let stderr = env.fails(&["up", "nojj", "--jj", repo.to_str().unwrap(), "--base", "nosuchrev"], 6);
    assert!(stderr.contains("nosuchrev"), "{stderr}");
    let stderr = env.fails(&["up", "nojj", "--jj", repo.to_str().unwrap(), "--base", "none()"], 6);
    assert!(stderr.contains("\"none()\" names no commit"), "{stderr}");
    // A revset with quotes and backslashes reaches jj intact (forage quotes it
    // inside a template): it names the commit described "base".
    let main = jj(&repo, &["log", "--no-graph", "-r", "main", "-T", "commit_id"]);
    let quoted = r#"description(regex:"^ba\\w+\n$") & description(exact:"base\n")"#;
    env.ok(&["up", "quoted", "--jj", repo.to_str().unwrap(), "--base", quoted, "--no-start"]);
    assert_eq!(env.json(&["status", "quoted", "--json"])["git"]["base"], main.as_str());
    env.ok(&["down", "quoted", "--discard"]);
    // A merge base: the first change has both parents, the files of both.
    jj(&repo, &["new", "root()", "-m", "other"]);
    std::fs::write(repo.join("b.txt"), "other\n").unwrap();
    jj(&repo, &["bookmark", "create", "other", "-r", "@"]);
    jj(&repo, &["new", "main"]);
    env.ok(&["up", "merged", "--jj", repo.to_str().unwrap(), "--base", "main | other", "--no-start"]);
    let ws = env.home.join("workspaces/merged");
    assert!(ws.join("a.txt").exists() && ws.join("b.txt").exists(), "the files of both parents are checked out");
    env.ok(&["down", "merged", "--discard"]);
    env.fails(&["up", "nojj", "--jj", repo.to_str().unwrap(), "--branch", "x"], 2);
    let stderr = env.fails(&["up", "archive", "--jj", repo.to_str().unwrap()], 2);
    assert!(stderr.contains("forage/archive"), "{stderr}");
    jj(&repo, &["bookmark", "create", "forage/taken", "-r", "main"]);
    let stderr = env.fails(&["up", "taken", "--jj", repo.to_str().unwrap()], 4);
    assert!(stderr.contains("already has a bookmark forage/taken"), "{stderr}");
    // Without jj on PATH.
    let out = env.cmd(&["up", "nojj", "--jj", repo.to_str().unwrap()]).env("PATH", "/usr/bin:/bin").output().unwrap();
    assert_eq!(out.status.code(), Some(6), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("jj is not installed")
            && String::from_utf8_lossy(&out.stderr).contains("cargo install jj-cli")
    );
    env.assert_nothing_left();
    assert_eq!(workspaces(&repo), vec!["default".to_string()]);
}
