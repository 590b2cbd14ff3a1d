//! Agent state that outlives a sandbox (SPEC §9), against the real engine: a
//! fake agent with Claude Code's CLI shape rotates a token in
//! $CLAUDE_CONFIG_DIR/.credentials.json on each run, and forage keeps the
//! newest per template and profile.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use crate::support::*;
use crate::templates::{shell_image, write};

/// The fake `claude`: reads token-N, writes token-N+1 (and `.claude.json`);
/// `claude login` stores the token it reads from stdin instead.
const CLAUDE: &str = r#"#!/bin/sh
d="${CLAUDE_CONFIG_DIR:-$HOME/.claude}"
mkdir -p "$d"
if [ "$1" = login ]; then
  printf 'token: ' && read -r tok && printf '%s' "token-$tok" > "$d/.credentials.json" && echo "logged in"
  exit 0
fi
n=$(sed 's/^token-//' "$d/.credentials.json" 2>/dev/null)
n=$(( ${n:-0} + 1 ))
printf '%s' "token-$n" > "$d/.cred.tmp" && mv "$d/.cred.tmp" "$d/.credentials.json"
printf '{"runs": %s}\n' "$n" > "$d/.claude.json"
echo "rotated to token-$n"
"#;

/// The template `fake` in the test's user template directory: the fake agent
/// runs once as the sandbox starts, then idles.
fn fake_template(env: &Env) {
    fake_template_named(env, "fake", "");
}

/// The fake template under `name`, with `agent_extra` (YAML lines under
/// `agent:`) added.
fn fake_template_named(env: &Env, name: &str, agent_extra: &str) {
    let image = shell_image(env);
    let dir = env.path(&format!("config/forage/templates/{name}"));
    write(&dir.join("claude"), CLAUDE);
    write(
        &dir.join("Dockerfile"),
        &format!("FROM {image}\nCOPY claude /usr/bin/claude\nRUN chmod 755 /usr/bin/claude\n"),
    );
    write(
        &dir.join("template.yaml"),
        &("build: {dockerfile: Dockerfile}\n\
         agent:\n  command: [sh, -c, 'claude; exec sleep 100000']\n  env: {CLAUDE_CONFIG_DIR: /home/agent/.claude}\n  \
         state: [.claude/.credentials.json, .claude/.claude.json, .fake/]\n  login: [claude, login]\n"
            .to_owned()
            + agent_extra),
    );
}

/// The stored copy of `rel` (under the agent's home) for `profile`.
fn stored(env: &Env, profile: &str, rel: &str) -> Option<String> {
    std::fs::read_to_string(env.home.join("agent-state/profiles/fake").join(profile).join("files").join(rel)).ok()
}

fn token(env: &Env, profile: &str) -> Option<String> {
    stored(env, profile, ".claude/.credentials.json")
}

/// The token inside sandbox `name`, once it is `want`.
fn wait_for_token(env: &Env, name: &str, want: &str) {
    let seen = || {
        let out = env.run(&["exec", name, "--", "cat", "/home/agent/.claude/.credentials.json"]);
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert!(eventually(30, || seen() == want), "sandbox {name} holds {:?}, not {want:?}", seen());
}

/// forage-ctl `args` (a `login`) with `typed` on its stdin, which then
/// closes; it must succeed.
fn login_typing(env: &Env, args: &[&str], typed: &str) -> std::process::Output {
    use std::io::Write;
    let mut child = env.cmd(args).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    child.stdin.take().unwrap().write_all(typed.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", describe(&out));
    out
}

fn up(env: &Env, name: &str, ws: &Path, extra: &[&str]) {
    let mut args = vec!["up", name, "-t", "fake", "--workspace", ws.to_str().unwrap()];
    args.extend(extra);
    env.ok(&args);
}

#[test]
fn a_rotated_token_survives_sandboxes_in_a_row_at_once_and_discarded() {
    let env = Env::new();
    fake_template(&env);
    let ws = env.mkdir("ws");
    let (a, b, c) = (env.unique("st-a"), env.unique("st-b"), env.unique("st-c"));

    // Three in a row: each starts from the last one's token and rotates it.
    for (i, name) in [&a, &b, &c].into_iter().enumerate() {
        up(&env, name, &ws, &[]);
        wait_for_token(&env, name, &format!("token-{}", i + 1));
        let inspected = serde_json::to_string(&inspect(&format!("forage-{name}")).unwrap()).unwrap();
        assert!(!inspected.contains("token-") && !inspected.contains("agent-state"), "state in docker inspect");
        env.ok(&["down", name]);
        assert_eq!(token(&env, "default").as_deref(), Some(format!("token-{}", i + 1).as_str()));
    }
    assert_eq!(stored(&env, "default", ".claude/.claude.json").as_deref(), Some("{\"runs\": 3}\n"));

    // Two at once: both start from token-3 and rotate to token-4; b rotates
    // again later (token-5). Down in the opposite order: b's newer token wins
    // over a's older one, though a's write-back comes last.
    up(&env, &a, &ws, &[]);
    wait_for_token(&env, &a, "token-4");
    up(&env, &b, &ws, &[]);
    wait_for_token(&env, &b, "token-4");
    // File times are whole seconds: b's second rotation is plainly later.
    std::thread::sleep(std::time::Duration::from_secs(2));
    env.ok(&["exec", &b, "--", "claude"]);
    wait_for_token(&env, &b, "token-5");
    env.ok(&["down", &b]);
    assert_eq!(token(&env, "default").as_deref(), Some("token-5"));
    let out = env.run(&["down", &a]);
    assert!(out.status.success(), "{}", describe(&out));
    assert_eq!(token(&env, "default").as_deref(), Some("token-5"), "the older token replaced the newer");

    // A git sandbox: `sync` takes the state back too; `down --discard`
    // (which kills the agent at once) keeps a token rotated after it.
    let repo = env.mkdir("repo");
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git").arg("-C").arg(&repo).args(args).output().unwrap();
        assert!(out.status.success(), "git {args:?}: {}", describe(&out));
    };
    git(&["init", "-q"]);
    git(&["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "init"]);
    env.ok(&["up", &c, "-t", "fake", "--repo", repo.to_str().unwrap()]);
    wait_for_token(&env, &c, "token-6");
    env.ok(&["sync", &c]);
    assert_eq!(token(&env, "default").as_deref(), Some("token-6"), "sync did not take the state back");
    env.ok(&["exec", &c, "--", "claude"]);
    wait_for_token(&env, &c, "token-7");
    env.ok(&["down", "--discard", &c]);
    assert_eq!(token(&env, "default").as_deref(), Some("token-7"), "--discard lost the rotated token");
    env.assert_nothing_left_but_state();
}

#[test]
fn profiles_are_separate_and_logout_removes_one() {
    let env = Env::new();
    fake_template(&env);
    let ws = env.mkdir("ws");
    let (a, w) = (env.unique("pr-a"), env.unique("pr-w"));
    up(&env, &a, &ws, &[]);
    wait_for_token(&env, &a, "token-1");
    env.ok(&["down", &a]);
    up(&env, &w, &ws, &["--profile", "work"]);
    wait_for_token(&env, &w, "token-1");
    let status = env.json(&["status", &w, "--json"]);
    assert_eq!(status["record"]["options"]["profile"], "work");
    assert!(env.ok(&["status", &w]).contains("(agent state: profile work)"));
    env.ok(&["exec", &w, "--", "claude"]);
    // `reset` keeps the state: the new container starts from token-2.
    env.ok(&["reset", &w]);
    wait_for_token(&env, &w, "token-3");
    env.ok(&["down", &w]);
    assert_eq!(token(&env, "work").as_deref(), Some("token-3"));
    assert_eq!(token(&env, "default").as_deref(), Some("token-1"), "one profile's sandbox wrote another's");

    let list = env.json(&["login", "--list", "--json"]);
    let pairs: Vec<(String, String, u64)> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["template"].as_str().unwrap().into(),
                p["profile"].as_str().unwrap().into(),
                p["files"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(pairs, [("fake".into(), "default".into(), 2), ("fake".into(), "work".into(), 2)]);

    env.ok(&["logout", "fake", "--profile", "work"]);
    assert_eq!(token(&env, "work"), None);
    assert_eq!(token(&env, "default").as_deref(), Some("token-1"));
    let err = env.fails(&["logout", "fake", "--profile", "work"], 3);
    assert!(err.contains("nothing is stored for template fake, profile work"), "{err}");
    // Bad input: one clear error, nothing made.
    let err = env.fails(&["up", "x", "-t", "fake", "--workspace", ws.to_str().unwrap(), "--profile", "Bad/P"], 2);
    assert!(err.contains("invalid profile \"Bad/P\""), "{err}");
    let err = env.fails(&["up", "x", "--workspace", ws.to_str().unwrap(), "--profile", "work"], 2);
    assert!(err.contains("keeps no agent state"), "{err}");
    // A new sandbox of the default profile starts from its token.
    up(&env, &a, &ws, &[]);
    wait_for_token(&env, &a, "token-2");
    env.ok(&["down", &a]);
    env.assert_nothing_left_but_state();
}

#[test]
fn login_runs_the_agents_login_and_leaves_nothing_behind() {
    let env = Env::new();
    fake_template(&env);
    // Nothing stored yet: said on stderr, nothing on stdout for a script.
    let out = env.run(&["login", "--list"]);
    assert!(out.status.success() && out.stdout.is_empty(), "{}", describe(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no agent logins or state are stored"), "{}", describe(&out));
    let out = login_typing(&env, &["login", "fake", "--profile", "me"], "41\n");
    assert!(String::from_utf8_lossy(&out.stdout).contains("logged in"), "{}", describe(&out));
    assert_eq!(token(&env, "me").as_deref(), Some("token-41"));
    // Nothing of the throwaway sandbox is left: container, workspace, record.
    assert_eq!(env.containers(), Vec::<String>::new());
    for dir in ["sandboxes", "workspaces", "agent-state/sandboxes"] {
        let left: Vec<_> =
            std::fs::read_dir(env.home.join(dir)).map(|d| d.flatten().map(|e| e.path()).collect()).unwrap_or_default();
        assert!(left.is_empty(), "left in {dir}: {left:?}");
    }
    env.assert_nothing_left_but_state();

    // The next sandbox of that profile starts logged in.
    let ws = env.mkdir("ws");
    let name = env.unique("li");
    up(&env, &name, &ws, &["--profile", "me"]);
    wait_for_token(&env, &name, "token-42");
    env.ok(&["down", &name]);
    assert_eq!(token(&env, "me").as_deref(), Some("token-42"));

    // A template without a login says how to pass its key instead.
    let image = shell_image(&env);
    write(
        &env.path("config/forage/templates/keyed.yaml"),
        &format!(
            "image: {image}\nagent:\n  command: [sleep, '100']\n  secrets: {{OPENAI_API_KEY: openai}}\n  state: [.k]\n"
        ),
    );
    let err = env.fails(&["login", "keyed"], 2);
    assert!(err.contains("has no login command") && err.contains("--secret openai=env:OPENAI_API_KEY"), "{err}");
    env.assert_nothing_left_but_state();
}

#[test]
fn login_interrupted_leaves_nothing_behind() {
    use std::io::Read;
    let env = Env::new();
    fake_template(&env);
    // Stdin stays open and empty: the login waits for its token.
    let mut child = env
        .cmd(&["login", "fake", "--profile", "cut"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    // Held open until forage-ctl has exited: its end would end the login.
    let stdin = child.stdin.take().unwrap();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let reader = {
        let seen = seen.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 256];
            while let Ok(n) = stdout.read(&mut buf) {
                if n == 0 {
                    break;
                }
                seen.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        })
    };
    let prompted = || String::from_utf8_lossy(&seen.lock().unwrap()).contains("token: ");
    assert!(eventually(120, prompted), "the login never asked: {:?}", String::from_utf8_lossy(&seen.lock().unwrap()));
    assert_eq!(env.containers().len(), 1, "the login's sandbox runs");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGINT).unwrap();
    let out = child.wait_with_output().unwrap();
    drop(stdin);
    reader.join().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("interrupted"), "{}", describe(&out));
    assert_eq!(token(&env, "cut"), None);
    for dir in ["sandboxes", "workspaces", "agent-state/sandboxes"] {
        let left: Vec<_> =
            std::fs::read_dir(env.home.join(dir)).map(|d| d.flatten().map(|e| e.path()).collect()).unwrap_or_default();
        assert!(left.is_empty(), "left in {dir}: {left:?}");
    }
    env.assert_nothing_left_but_state();
}

#[test]
fn what_the_agent_plants_in_its_state_never_reaches_the_store() {
    let env = Env::new();
    fake_template(&env);
    let ws = env.mkdir("ws");
    let secret = write(&env.path("keys/tok"), "SECRET-VALUE-4711");
    let (x, y) = (env.unique("at-x"), env.unique("at-y"));
    up(&env, &x, &ws, &[]);
    wait_for_token(&env, &x, "token-1");
    env.ok(&["down", &x]);
    let before = (token(&env, "default"), stored(&env, "default", ".claude/.claude.json"));
    assert_eq!(before.0.as_deref(), Some("token-1"));

    up(&env, &x, &ws, &["--secret", &format!("tok={}", secret.display())]);
    wait_for_token(&env, &x, "token-2");
    // Replace the token with a symlink to a secret, .claude.json with one to
    // a host-looking path; make .fake a directory with a FIFO and a big file.
    let attack = "cd /home/agent && ln -sf /run/secrets/tok .claude/.credentials.json \
         && ln -sf /etc/shadow .claude/.claude.json && mkdir -p .fake && mkfifo .fake/pipe \
         && echo ok > .fake/small && head -c 17000000 /dev/zero > .fake/big && cat .claude/.credentials.json";
    assert_eq!(env.ok(&["exec", &x, "--", "sh", "-c", attack]), "SECRET-VALUE-4711", "the attack took effect");
    let out = env.run(&["down", &x]);
    assert!(out.status.success(), "{}", describe(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("symbolic link"), "no warning for the symlinks: {err}");
    assert!(err.contains("passes the 16 MiB forage takes back"), "no warning for the big file: {err}");
    // The symlink to a missing file (/etc/shadow is not in the image): Docker
    // archives it as a link, which is skipped; Podman answers 404 for it (it
    // follows the link), so it reads as the file deleted, and the stored copy
    // goes as it would had the agent deleted the file. Nothing is taken either way.
    let kept = match test_engine() {
        TestEngine::Docker => before.clone(),
        TestEngine::PodmanRootless | TestEngine::PodmanRootful => (before.0.clone(), None),
    };
    assert_eq!((token(&env, "default"), stored(&env, "default", ".claude/.claude.json")), kept, "store changed");
    assert_eq!(stored(&env, "default", ".fake/small"), None, "part of a refused directory was taken");
    for file in env.home_files() {
        let bytes = std::fs::read(&file).unwrap_or_default();
        assert!(!String::from_utf8_lossy(&bytes).contains("SECRET-VALUE-4711"), "secret in {}", file.display());
    }

    // A directory of more files than the bound: refused as a whole; a FIFO
    // alone is skipped and the rest is taken.
    up(&env, &y, &ws, &[]);
    wait_for_token(&env, &y, "token-2");
    let many = "mkdir -p /home/agent/.fake && cd /home/agent/.fake && i=0; while [ $i -le 1000 ]; do : > f$i; i=$((i+1)); done; ls | wc -l";
    assert_eq!(env.ok(&["exec", &y, "--", "sh", "-c", many]).trim(), "1001");
    let out = env.run(&["down", &y]);
    assert!(out.status.success(), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("passes the 1000 files forage takes back"),
        "{}",
        describe(&out)
    );
    assert_eq!(stored(&env, "default", ".fake/f0"), None);
    assert_eq!(token(&env, "default").as_deref(), Some("token-2"), "the token is still taken");

    up(&env, &y, &ws, &[]);
    wait_for_token(&env, &y, "token-3");
    // And the directory above the token becomes a symlink to one the agent
    // filled: the engine would follow it, so nothing of it is read.
    let attack = "mkdir -p ~/.fake && mkfifo ~/.fake/pipe && echo kept > ~/.fake/kept \
         && mkdir /tmp/evil && printf EVIL > /tmp/evil/.credentials.json && mv ~/.claude ~/.real \
         && ln -s /tmp/evil ~/.claude && cat ~/.claude/.credentials.json";
    assert_eq!(env.ok(&["exec", &y, "--", "sh", "-c", attack]), "EVIL");
    let out = env.run(&["down", &y]);
    assert!(out.status.success(), "{}", describe(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(".fake/pipe is a FIFO"), "{err}");
    assert!(err.contains("/home/agent/.claude is a symbolic link"), "{err}");
    assert_eq!(stored(&env, "default", ".fake/kept").as_deref(), Some("kept\n"));
    assert_eq!(stored(&env, "default", ".fake/pipe"), None);
    assert_eq!(token(&env, "default").as_deref(), Some("token-2"), "read through the symlinked directory");
    env.assert_nothing_left_but_state();
}

/// FORAGE_HOME's agent-state/profiles holds what the tests stored (and
/// archives what `down` kept).
pub trait StateLeft {
    fn assert_nothing_left_but_state(&self);
}

impl StateLeft for Env {
    fn assert_nothing_left_but_state(&self) {
        assert_eq!(self.containers(), Vec::<String>::new(), "containers left behind");
        let keep = [self.home.join("agent-state/profiles"), self.home.join("archives")];
        let files: Vec<PathBuf> =
            self.home_files().into_iter().filter(|f| !keep.iter().any(|k| f.starts_with(k))).collect();
        assert_eq!(files, Vec::<PathBuf>::new(), "files left in FORAGE_HOME");
    }
}

#[test]
fn gc_removes_what_a_sandbox_without_a_record_was_given() {
    let env = Env::new();
    fake_template(&env);
    let ws = env.mkdir("ws");
    let name = env.unique("gc");
    up(&env, &name, &ws, &[]);
    wait_for_token(&env, &name, "token-1");
    env.ok(&["down", &name]);
    up(&env, &name, &ws, &[]);
    wait_for_token(&env, &name, "token-2");
    // The record deleted by hand: its container and its note of the state are orphans.
    std::fs::remove_file(env.home.join(format!("sandboxes/{name}.json"))).unwrap();
    let note = env.home.join(format!("agent-state/sandboxes/{name}.json"));
    assert!(note.exists());
    let kinds = |v: &serde_json::Value| -> Vec<String> {
        let rows = v.get("findings").unwrap_or(v).as_array().cloned().unwrap_or_default();
        rows.iter().map(|f| f["kind"].as_str().unwrap_or_default().to_owned()).collect()
    };
    let dry = env.json(&["gc", "--json"]);
    assert!(kinds(&dry).contains(&"orphan-agent-state".to_owned()), "{dry}");
    assert!(note.exists(), "a dry run removed it");
    env.ok(&["gc", "--force"]);
    assert!(!note.exists());
    // Without its record, forage never took that sandbox's token back.
    assert_eq!(token(&env, "default").as_deref(), Some("token-1"));
    env.assert_nothing_left_but_state();

    // `up` killed right after it gave the state: `gc --force` finishes the
    // undo, the note included, and the store keeps its token.
    env.killed_after(&["up", &name, "-t", "fake", "--workspace", ws.to_str().unwrap()], "agent-state");
    assert!(note.exists(), "the kill came before the state was given");
    env.ok(&["gc", "--force"]);
    assert!(!note.exists());
    assert_eq!(token(&env, "default").as_deref(), Some("token-1"));
    env.assert_nothing_left_but_state();
}

#[test]
fn a_container_removed_behind_forages_back_is_a_warning_not_an_error() {
    let env = Env::new();
    fake_template(&env);
    let ws = env.mkdir("ws");
    let name = env.unique("gone");
    up(&env, &name, &ws, &[]);
    wait_for_token(&env, &name, "token-1");
    let opts = bollard::query_parameters::RemoveContainerOptions { force: true, ..Default::default() };
    block_on(env.docker().remove_container(&format!("forage-{name}"), Some(opts))).unwrap();
    let out = env.run(&["down", &name]);
    assert!(out.status.success(), "{}", describe(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("its container is gone, so its agent's state (profile default) was not saved"), "{err}");
    assert_eq!(token(&env, "default"), None);
    env.assert_nothing_left_but_state();
}

/// A template with a login asks for its key only until the user logged in:
/// `forage-ctl login claude` once, then `up -t claude` with no key at all.
#[test]
fn a_login_stands_in_for_the_templates_key() {
    let env = Env::new();
    fake_template_named(&env, "keyedfake", "  secrets: {ANTHROPIC_API_KEY: anthropic}\n");
    let ws = env.mkdir("ws");
    let name = env.unique("kl");
    let err = env.fails(&["up", &name, "-t", "keyedfake", "--workspace", ws.to_str().unwrap()], 2);
    assert!(
        err.contains("--secret anthropic=env:ANTHROPIC_API_KEY") && err.contains("forage-ctl login keyedfake`"),
        "{err}"
    );
    let err = env.fails(&["up", &name, "-t", "keyedfake", "--profile", "w", "--workspace", ws.to_str().unwrap()], 2);
    assert!(err.contains("forage-ctl login keyedfake --profile w`"), "{err}");
    env.assert_nothing_left_but_state();

    login_typing(&env, &["login", "keyedfake"], "7\n");

    // Logged in: no key needed, and the agent has no key variable at all.
    env.ok(&["up", &name, "-t", "keyedfake", "--workspace", ws.to_str().unwrap()]);
    let out = env.run(&["exec", &name, "--", "sh", "-c", "echo \"[${ANTHROPIC_API_KEY-unset}]\""]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "[unset]\n", "{}", describe(&out));
    // `reset` re-plans the same way.
    env.ok(&["reset", &name]);
    env.ok(&["down", &name]);
    // Another profile, not logged in, still needs the key.
    env.fails(&["up", &name, "-t", "keyedfake", "--profile", "w", "--workspace", ws.to_str().unwrap()], 2);
    env.assert_nothing_left_but_state();
}
