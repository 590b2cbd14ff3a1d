//! What the CLI prints, as snapshots (insta): each test runs a scenario and
//! compares the whole transcript (command, stdout, stderr, exit code) with the
//! reviewed one in `tests/it/snapshots/`, so that a change of wording, or of
//! which stream a line goes to, is a diff someone reads. Paths, ids, ages and
//! times are replaced by placeholders first. After an intended change:
//! `cargo insta review` (or `INSTA_UPDATE=always cargo test`, then read the diff).

use crate::git::{git, repo};
use crate::support::*;

/// `args` run as the user would type them, with what they printed.
fn transcript(env: &Env, args: &[&str]) -> String {
    let out = env.run(args);
    let shown: Vec<String> = args.iter().map(|a| quoted(a)).collect();
    let mut text = format!("$ forage-ctl {}\n", shown.join(" "));
    text.push_str(&String::from_utf8_lossy(&out.stdout));
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !stderr.is_empty() {
        text.push_str("[stderr]\n");
        text.push_str(&stderr);
    }
    text.push_str(&format!("[exit {}]\n\n", out.status.code().map_or("signal".into(), |c| c.to_string())));
    text
}

/// `arg` as a shell would need it.
fn quoted(arg: &str) -> String {
    if !arg.is_empty() && arg.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=:@".contains(c)) {
        arg.to_owned()
    } else {
        format!("'{}'", arg.replace('\'', r"'\''"))
    }
}

fn scenario(env: &Env, commands: &[&[&str]]) -> String {
    commands.iter().map(|args| transcript(env, args)).collect()
}

/// Runs `check` with the filters that make a transcript the same on every run.
fn stable(env: &Env, check: impl FnOnce()) {
    let mut settings = insta::Settings::clone_current();
    settings.set_snapshot_path("snapshots");
    settings.set_prepend_module_to_snapshot(false);
    settings.add_filter(&regex_escape(env.dir.path().to_str().unwrap()), "[TMP]");
    settings.add_filter(r"\b[0-9a-f]{64}\b", "[ID]");
    settings.add_filter(r"\b[0-9a-f]{40}\b", "[COMMIT]");
    settings.add_filter(r"\b[0-9a-f]{12}\b", "[SHORT-ID]");
    // jj's change ids: 32 (or, shortened, 12) of the letters k to z.
    settings.add_filter(r"\b[k-z]{32}\b", "[CHANGE-ID]");
    settings.add_filter(r"\b[k-z]{12}\b", "[SHORT-CHANGE-ID]");
    settings.add_filter(r"forage-host/([a-z-]+):[0-9a-f]{16}", "forage-host/$1:[KEY]");
    settings.add_filter(r"\b\d{8}T\d{6}Z\b", "[STAMP]");
    // Where a pinned path is on disk (device and inode numbers).
    settings.add_filter(r#""(dev|ino)": \d+"#, r#""$1": [N]"#);
    settings.add_filter(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z", "[TIME]");
    settings.add_filter(r"\b\d{1,2}[smhd] ago\b", "[AGE] ago");
    // list's AGE column, the last of a row.
    settings.add_filter(r"(?m) \d{1,2}[smhd]$", " [AGE]");
    settings.add_filter(r#""(created_at|archived_at)": \d+"#, r#""$1": [TIME]"#);
    // The engine's version differs from host to host.
    settings.add_filter(r#""version": "\d+\.\d+[^"]*""#, r#""version": "[ENGINE-VERSION]""#);
    settings.bind(check);
}

fn regex_escape(text: &str) -> String {
    text.chars().fold(String::new(), |mut out, c| {
        if "\\.+*?()|[]{}^$".contains(c) {
            out.push('\\');
        }
        out.push(c);
        out
    })
}

#[test]
fn bad_input_and_empty_state() {
    // Its `templates` listing must not show another test's /etc template.
    let _held = system_templates_held();
    let env = Env::new();
    let file = env.path("file");
    std::fs::write(&file, "x").unwrap();
    let file = file.to_str().unwrap();
    let dir = env.mkdir("project");
    let dir = dir.to_str().unwrap();
    let text = scenario(
        &env,
        &[
            &["list"],
            &["list", "--json"],
            &["gc"],
            &["status", "nosuch"],
            &["status", "nosuch", "--json"],
            &["down", "nosuch"],
            &["restore", "nosuch"],
            &["up", "Bad_Name", "--workspace", file],
            &["up", "w", "--workspace", file],
            &["up", "w", "--workspace", "/"],
            &["up", "w", "--git-worktree", file],
            &["up", "w", "-t", "claude-code", "--workspace", file],
            &["up", "w", "--image", "Not A Reference", "--workspace", dir],
            &["up", "w", "--memory", "lots", "--workspace", dir],
            // A path where `up` takes a flag: the flag that fits it.
            &["up", "nc", "ripgrep"],
            &["up", "nc", dir],
            &["up", "nc"],
            &["templates"],
        ],
    );
    stable(&env, || insta::assert_snapshot!("bad_input_and_empty_state", text));
    env.assert_nothing_left();
}

#[test]
fn a_git_sandbox_from_up_to_restore() {
    let env = Env::new();
    let repo = repo(&env, "repo");
    let r = repo.to_str().unwrap();
    let name = "snap-git";
    let work =
        "cd /workspace && echo new > new.txt && git add new.txt && git commit -qm 'add new.txt' && echo more >> a.txt";
    let text = scenario(
        &env,
        &[
            &["up", name, "--git-worktree", r],
            &["exec", name, "--", "sh", "-c", work],
            &["sync", name],
            &["status", name],
            &["list"],
            &["down", name, "--dry-run"],
            &["down", name],
            &["list"],
            &["restore", name],
        ],
    );
    stable(&env, || insta::assert_snapshot!("a_git_sandbox_from_up_to_restore", text));
    assert_eq!(git(&repo, &["show", "forage-snap-git:new.txt"]), "new\n");
    env.assert_nothing_left_but_archives();
}

#[test]
fn a_jj_sandbox_in_jjs_words() {
    let env = Env::new();
    let repo = crate::jj::jj_repo(&env, "repo", true);
    let r = repo.to_str().unwrap();
    let name = "snap-jj";
    let text = scenario(
        &env,
        &[
            &["up", name, "--jj", r],
            &[
                "exec",
                name,
                "--",
                "sh",
                "-c",
                "cd /workspace && echo new > new.txt && jj describe -m 'add new.txt' 2>/dev/null",
            ],
            &["merge", name, "--dry-run"],
            &["merge", name, "--yes"],
            &["exec", name, "--", "sh", "-c", "echo more >> /workspace/new.txt"],
            &["sync", name],
            &[
                "exec",
                name,
                "--",
                "sh",
                "-c",
                "cd /workspace && jj new 2>/dev/null && echo b > b.txt && jj describe -m b 2>/dev/null",
            ],
            &["down", name, "--dry-run"],
            &["down", name],
            &["restore", name],
        ],
    );
    stable(&env, || insta::assert_snapshot!("a_jj_sandbox_in_jjs_words", text));
    env.assert_nothing_left_but_archives();
}

#[test]
fn json_for_scripts() {
    let env = Env::new();
    let dir = env.mkdir("project");
    let d = dir.to_str().unwrap();
    let name = "snap-json";
    let text = scenario(
        &env,
        &[
            &["up", name, "--workspace", d, "--json"],
            &["list", "--json"],
            &["status", name, "--json"],
            &["down", name, "--dry-run", "--json"],
            &["down", name, "--json"],
            &["gc", "--json"],
        ],
    );
    stable(&env, || insta::assert_snapshot!("json_for_scripts", text));
    env.assert_nothing_left();
}

#[test]
fn a_conflict_resolved_in_the_checkout_and_in_the_sandbox() {
    let env = Env::new();
    let repo = repo(&env, "repo");
    let r = repo.to_str().unwrap();
    let name = "snap-conflict";
    let agent = "cd /workspace && echo agent > a.txt && git commit -qam 'agent: a.txt' && echo more > more.txt";
    let mut text = scenario(&env, &[&["up", name, "--git-worktree", r], &["exec", name, "--", "sh", "-c", agent]]);
    std::fs::write(repo.join("a.txt"), "user\n").unwrap();
    git(&repo, &["commit", "-qam", "user: a.txt"]);
    let resolve = "cd /workspace && echo both > a.txt && git add a.txt && git commit -q --no-edit";
    text += &scenario(
        &env,
        &[
            &["merge", name, "--yes"],
            &["merge", name, "--yes", "--conflicts"],
            &["merge", name, "--abort"],
            &["merge", name, "--abort"],
            &["update", name],
            &["exec", name, "--", "sh", "-c", resolve],
            &["update", name],
            &["merge", name, "--yes", "--squash", "-m", "the agent's work"],
            &["merge", name, "--yes"],
        ],
    );
    stable(&env, || insta::assert_snapshot!("a_conflict_resolved_in_the_checkout_and_in_the_sandbox", text));
    env.ok(&["down", name]);
    env.assert_nothing_left_but_archives();
}

/// `--help`: the commands in groups, the global options apart, every exit
/// code; each command's own help ends with an example.
#[test]
fn help_groups_the_commands() {
    let env = Env::new();
    let text = scenario(&env, &[&["--help"], &["stop", "--help"]]);
    stable(&env, || insta::assert_snapshot!("help_groups_the_commands", text));
    let help = env.ok(&["--help"]);
    let commands: Vec<&str> = help
        .lines()
        .skip_while(|l| l != &"Lifecycle:")
        .take_while(|l| !l.starts_with("Global options"))
        .filter_map(|l| l.strip_prefix("  ").filter(|rest| !rest.starts_with(' '))?.split_whitespace().next())
        .collect();
    assert!(commands.len() > 20, "{commands:?}");
    for command in commands.into_iter().filter(|c| *c != "help") {
        let own = env.ok(&[command, "--help"]);
        assert!(own.contains("\nExample: ") && own.contains("forage-ctl "), "{command} --help has no example:\n{own}");
    }
}

/// Kills everything in a sandbox but its init, two seconds after the `exec`
/// that asks for it has returned (time for forage-ctl to read the exec's
/// exit code on a loaded machine before the container stops).
const KILL_ALL_SOON: &str = "(sleep 2; kill -KILL -1) </dev/null >/dev/null 2>&1 &";

#[test]
fn the_next_step_is_named() {
    let env = Env::new();
    let repo = repo(&env, "repo");
    std::fs::write(repo.join("a.txt"), "edited\n").unwrap();
    std::fs::write(repo.join("new.txt"), "new\n").unwrap();
    let r = repo.to_str().unwrap();
    let name = "snap-next";
    let work = "cd /workspace && echo one > one.txt && git add one.txt && git commit -qm one";
    let text = scenario(
        &env,
        &[
            &["up", name, "--git-worktree", r],
            &["up", "snap-next-x", "--git-worktree", r, "--include-uncommitted", "--base", "main"],
            &["up", "snap-next-x", "--workspace", r, "--include-uncommitted"],
            &["exec", name, "--", "sh", "-c", work],
            &["status", name],
            &["path", name],
        ],
    );
    git(&repo, &["branch", "review/snap-next", "main"]);
    let refused = scenario(&env, &[&["checkout", name]]);
    git(&repo, &["branch", "-D", "review/snap-next"]);
    let rest = scenario(
        &env,
        &[
            &["checkout", name],
            &["checkout", name, "--json"],
            // Everything but init is killed a moment after the exec has
            // returned: killed at once, the exec's own shell raced the
            // container's stop (exit 0 or 137; rootful Podman saw 137).
            &["exec", name, "--", "sh", "-c", KILL_ALL_SOON],
            &["wait", "--all"],
            &["wait", "--next"],
            &["wait", "--next"],
            &["wait", "--next", "--json"],
            &["down", name, "--discard"],
        ],
    );
    let text = text + &refused + &rest;
    stable(&env, || insta::assert_snapshot!("the_next_step_is_named", text));
}
