//! jj mode against real jj and the real engine: jj works inside the container,
//! its changes are the host repository's, and `down` keeps every change.

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

/// A jj repository (colocated with git unless told otherwise) with one described change.
pub fn jj_repo(env: &Env, rel: &str, colocate: bool) -> PathBuf {
    let dir = env.mkdir(rel);
    let flag = if colocate { "--colocate" } else { "--no-colocate" };
    let out = Command::new("jj").args(["git", "init", flag]).arg(&dir).output().unwrap();
    assert!(out.status.success(), "{}", describe(&out));
    std::fs::write(dir.join("a.txt"), "base\n").unwrap();
    jj(&dir, &["describe", "-m", "base"]);
    jj(&dir, &["new"]);
    dir
}

/// The repository's jj workspaces, by name.
pub fn workspaces(repo: &Path) -> Vec<String> {
    jj(repo, &["workspace", "list", "-T", "name ++ \"\\n\""]).lines().map(str::to_owned).collect()
}

fn descriptions(repo: &Path) -> String {
    jj(repo, &["log", "-r", "all()", "--no-graph", "-T", "description.first_line() ++ \"\\n\""])
}

fn sh(env: &Env, name: &str, script: &str) -> String {
    env.ok(&["exec", name, "--", "sh", "-c", script])
}

#[test]
fn an_agent_edits_and_describes_inside_and_down_keeps_every_change() {
    for colocate in [true, false] {
        let env = Env::new();
        let repo = jj_repo(&env, "repo", colocate);
        let name = env.unique("jjagent");
        env.ok(&["up", &name, "--jj", repo.to_str().unwrap()]);
        let out = sh(
            &env,
            &name,
            "cd /workspace && jj st && echo agent > b.txt && jj describe -m 'agent change' && jj new && echo wip > c.txt && jj diff --summary && jj log -r @- --no-graph -T description",
        );
        // A new file over jj's default snapshot size limit (1 MiB), never snapshotted inside.
        sh(&env, &name, "head -c 2000000 /dev/zero | tr '\\0' x > /workspace/big.bin");
        assert!(out.contains("A c.txt") && out.ends_with("agent change\n"), "{out}");
        // The change is the host repository's at once.
        assert!(descriptions(&repo).contains("agent change"));
        let ws = format!("forage-{name}");
        assert!(workspaces(&repo).contains(&ws));
        let status = env.json(&["status", &name, "--json"]);
        assert_eq!(status["git"]["ahead"], 2, "{status}");

        let out = env.ok(&["down", &name]);
        assert!(
            out.contains("archived 2 changes") && out.contains("jj workspace") && out.contains("forgotten"),
            "{out}"
        );
        assert!(!workspaces(&repo).contains(&ws), "the workspace is forgotten");
        assert!(!env.home.join("workspaces").join(&name).exists());
        env.assert_nothing_left_but_archives();
        // Every change is still there, reachable from the archive bookmark.
        let bookmark = format!("forage/archive/{name}");
        let archived = jj(
            &repo,
            &[
                "log",
                "-r",
                &format!("::bookmarks(glob:\"{bookmark}/*\")"),
                "--no-graph",
                "-T",
                "description.first_line() ++ \"\\n\"",
            ],
        );
        assert!(archived.contains("agent change"), "{archived}");
        let files = jj(&repo, &["file", "list", "-r", &format!("bookmarks(glob:\"{bookmark}/*\")")]);
        assert!(files.contains("b.txt") && files.contains("c.txt") && files.contains("big.bin"), "{files}");

        // restore --up: a sandbox on top of the archived work.
        env.ok(&["restore", &name, "--up"]);
        assert_eq!(sh(&env, &name, "cat /workspace/b.txt /workspace/c.txt"), "agent\nwip\n");
        env.ok(&["down", &name, "--discard"]);
        assert!(!workspaces(&repo).contains(&ws));
    }
}

#[test]
fn two_jj_sandboxes_on_one_repository_and_parallel_ups() {
    let env = Env::new();
    let repo = jj_repo(&env, "repo", true);
    let r = repo.to_str().unwrap();
    let (a, b) = (env.unique("jja"), env.unique("jjb"));
    env.ok(&["up", &a, "--jj", r]);
    env.ok(&["up", &b, "--repo", r]);
    sh(&env, &a, "cd /workspace && echo a > a2.txt && jj describe -m from-a");
    env.ok(&["down", &a]);
    // b is untouched and still works.
    let out = sh(
        &env,
        &b,
        "cd /workspace && echo b > b2.txt && jj describe -m from-b && jj log -r @ --no-graph -T description",
    );
    assert_eq!(out, "from-b\n");
    assert!(descriptions(&repo).contains("from-b"));
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
    assert_eq!(workspaces(&repo).len(), 5);
    for n in &names {
        assert!(sh(&env, n, "cd /workspace && jj st").contains("Working copy"));
    }
    env.ok(&["down", "--all"]);
    assert_eq!(workspaces(&repo), vec!["default".to_string()]);
    env.assert_nothing_left_but_archives();
}

#[test]
fn the_agent_cannot_redirect_the_workspace_or_touch_repo_config() {
    let env = Env::new();
    let repo = jj_repo(&env, "repo", true);
    let name = env.unique("jjbox");
    env.ok(&["up", &name, "--jj", repo.to_str().unwrap()]);
    let script = "cd /workspace; for f in .jj/repo .jj/workspace-config.toml; do (echo x > $f) 2>/dev/null && echo WROTE $f; done; \
                  repo=$(cd .jj && cd \"$(cat repo)\" && pwd); for f in config-id config.toml; do [ -e $repo/$f ] && (echo x > $repo/$f) 2>/dev/null && echo WROTE $f; done; \
                  git=$repo/../../.git; (echo x > $git/config) 2>/dev/null && echo WROTE git-config; (echo x > $git/hooks/post-commit) 2>/dev/null && echo WROTE hook; true";
    assert_eq!(sh(&env, &name, script), "");
    env.ok(&["down", &name]);
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
    env.fails(&["up", "nojj", "--jj", repo.to_str().unwrap(), "--branch", "x"], 2);
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
