//! forage-ctl on a real terminal (a pseudo-terminal made by util-linux's
//! `script`), byte for byte: a command's output alone, no progress line left
//! among it, and a container session that owns the terminal whole, at the
//! window's size, following its changes.

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};

use crate::git::repo;
use crate::support::*;
use crate::templates::{shell_image, write};

/// Runs `shell` (sh syntax; `$FORAGE` is forage-ctl) on a new pseudo-terminal
/// of 40 rows and 100 columns, with this test's FORAGE_HOME and `vars`:
/// forage-ctl's stdin, stdout and stderr are the terminal, as at a user's
/// shell. Returns the exit code and every byte written to the terminal.
fn on_a_terminal(env: &Env, shell: &str, vars: &[(&str, &str)]) -> (i32, Vec<u8>) {
    let mut child = Command::new("/usr/bin/script");
    child
        .args(["--quiet", "--return", "--command", &format!("stty rows 40 cols 100; {shell}"), "/dev/null"])
        .env("FORAGE", BIN)
        .env("SHELL", "/bin/sh")
        .env("FORAGE_HOME", &env.home)
        .env("XDG_CONFIG_HOME", env.path("config"))
        .env_remove("FORAGE_TEMPLATES_PATH")
        .env_remove("RUST_LOG")
        .env_remove("NO_COLOR")
        .envs(vars.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let mut child = a_terminals_environment(&mut child).spawn().expect("util-linux's script at /usr/bin/script");
    // Held open until the end: when its input ends, `script` types an end of
    // input on the terminal, which a session would read.
    let input = child.stdin.take();
    let mut written = Vec::new();
    child.stdout.take().unwrap().read_to_end(&mut written).unwrap();
    let status = child.wait().unwrap();
    drop(input);
    (status.code().unwrap_or(-1), written)
}

/// What every command here has besides its own: the terminal's type (the
/// spinner is drawn on a terminal that has one, never on a `dumb` one, and a
/// test run may have none: the Podman pass runs with a bare environment), and
/// the run's engine (`script` is not `Env::cmd`).
fn a_terminals_environment(cmd: &mut Command) -> &mut Command {
    cmd.env("TERM", "xterm");
    if let Some(host) = test_engine_host() {
        cmd.env("DOCKER_HOST", host);
    }
    cmd
}

/// The bytes, readable in a failure message.
fn escaped(bytes: &[u8]) -> String {
    bytes.escape_ascii().to_string()
}

/// `text` as a terminal shows it: each line break written "\r\n".
fn as_on_a_terminal(text: &str) -> Vec<u8> {
    text.replace('\n', "\r\n").into_bytes()
}

/// Asserts that nothing of a progress spinner is in `bytes`: no braille
/// (U+2800 to U+28FF, in UTF-8 e2 a0 80 to e2 a3 bf) and no escape sequence.
fn assert_no_progress(bytes: &[u8], what: &str) {
    let text = String::from_utf8_lossy(bytes);
    assert!(!text.chars().any(|c| ('\u{2800}'..='\u{28ff}').contains(&c)), "{what}: a spinner: {}", escaped(bytes));
    assert!(!bytes.contains(&0x1b), "{what}: an escape sequence: {}", escaped(bytes));
}

/// `list`'s table with each row's age (its last column, which moves on
/// between two runs) left out.
fn without_ages(table: &[u8]) -> String {
    String::from_utf8_lossy(table)
        .split_inclusive('\n')
        .map(|line| {
            let (body, end) = line.split_at(line.trim_end_matches(['\r', '\n']).len());
            let age_starts = body.trim_end().rfind(' ').map_or(0, |i| i + 1);
            format!("{}{end}", &body[..age_starts])
        })
        .collect()
}

#[test]
fn up_list_and_diff_on_a_terminal_write_their_output_alone() {
    let env = Env::new();
    let repo = repo(&env, "repo");
    let name = env.unique("pty");

    // `up`'s steps take long enough for a spinner to show (from a quarter of
    // a second in): whatever was drawn is cleared before its report starts,
    // and nothing is drawn after.
    let up = format!("exec $FORAGE up {name} --git-worktree {} --network none", repo.display());
    let (code, shown) = on_a_terminal(&env, &up, &[("NO_COLOR", "1")]);
    assert_eq!(code, 0, "{}", escaped(&shown));
    let report = format!("sandbox {name} is up: ");
    let at = shown.windows(report.len()).position(|w| w == report.as_bytes()).expect("up's report");
    let (progress, after) = shown.split_at(at);
    // Lines `up` writes before its report (the checkout it made, a warning)
    // may follow the spinner's last clearing, never a frame of it.
    let clear = b"\r\x1b[2K";
    let since_cleared =
        progress.windows(clear.len()).rposition(|w| w == clear).map_or(progress, |i| &progress[i + clear.len()..]);
    assert_no_progress(since_cleared, "before up's report, since the spinner was last cleared");
    assert_no_progress(after, "after up's report");
    assert!(after.ends_with(format!("`forage-ctl down {name}` to remove it, keeping its work\r\n").as_bytes()));

    env.ok(&["exec", &name, "--", "sh", "-c", "echo changed >> /workspace/a.txt"]);

    let (code, shown) = on_a_terminal(&env, "exec $FORAGE list", &[]);
    assert_eq!(code, 0, "{}", escaped(&shown));
    assert_no_progress(&shown, "list");
    let piped = env.ok(&["list"]);
    assert_eq!(without_ages(&shown), without_ages(&as_on_a_terminal(&piped)), "{}", escaped(&shown));

    // Without colour, `diff` on a terminal is byte for byte `diff` into a pipe;
    // through a pager (here `cat -`) and without one alike.
    let piped = env.ok(&["diff", &name]);
    assert!(piped.contains("+changed"), "{piped}");
    for (how, vars) in [
        ("pager", [("NO_COLOR", "1"), ("FORAGE_PAGER", "cat -")]),
        ("no pager", [("NO_COLOR", "1"), ("FORAGE_PAGER", "cat")]),
    ] {
        let (code, shown) = on_a_terminal(&env, &format!("exec $FORAGE diff {name}"), &vars);
        assert_eq!(code, 0, "{how}: {}", escaped(&shown));
        assert_no_progress(&shown, how);
        assert_eq!(shown, as_on_a_terminal(&piped), "diff, {how}: {}", escaped(&shown));
    }
    env.ok(&["down", &name, "--discard"]);
    env.assert_nothing_left_but_archives();
}

/// A program that draws for the terminal's size, as a full-screen agent does:
/// it prints the size once it has one, and with a file to create, creates it
/// and prints the size again when a SIGWINCH brings a new one. It gives up
/// after two minutes.
const WINSIZE: &str = r#"
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/ioctl.h>
#include <unistd.h>
static void on_winch(int sig) { (void)sig; }
static int sized(struct winsize *ws) { return ioctl(1, TIOCGWINSZ, ws) == 0 && ws->ws_row > 0; }
int main(int argc, char **argv) {
    sigset_t winch, unblocked;
    sigemptyset(&winch);
    sigaddset(&winch, SIGWINCH);
    sigprocmask(SIG_BLOCK, &winch, &unblocked);
    signal(SIGWINCH, on_winch);
    alarm(120);
    struct winsize ws, first;
    while (!sized(&ws)) sigsuspend(&unblocked);
    printf("size %d %d\n", ws.ws_row, ws.ws_col);
    fflush(stdout);
    if (argc > 1) {
        first = ws;
        close(open(argv[1], O_CREAT | O_WRONLY, 0644));
        do sigsuspend(&unblocked);
        while (!sized(&ws) || (ws.ws_row == first.ws_row && ws.ws_col == first.ws_col));
        printf("size %d %d\n", ws.ws_row, ws.ws_col);
    }
    return 0;
}
"#;

/// A sandbox whose agent is `WINSIZE`, waiting for a terminal size and then
/// for a change of it (reported by creating /workspace/ready).
fn winsize_sandbox(env: &Env, ws: &Path) -> (String, Vec<(&'static str, String)>) {
    static_program(&write(&env.path("winsize.c"), WINSIZE), &ws.join("winsize"));
    let templates = env.path("tpl");
    let image = shell_image(env);
    write(
        &templates.join("winsize.yaml"),
        &format!("image: {image}\nagent: {{command: [/workspace/winsize, /workspace/ready]}}\nnetwork: none\n"),
    );
    let name = env.unique("tty");
    let up = env
        .cmd(&["up", &name, "-t", "winsize", "--workspace", ws.to_str().unwrap()])
        .env("FORAGE_TEMPLATES_PATH", &templates)
        .output()
        .unwrap();
    assert!(up.status.success(), "{}", describe(&up));
    (name, vec![("FORAGE_TEMPLATES_PATH", templates.display().to_string())])
}

#[test]
fn exec_and_attach_hand_over_a_clean_terminal_of_the_windows_size_that_follows_it() {
    let env = Env::new();
    let ws = env.mkdir("ws");
    let (name, vars) = winsize_sandbox(&env, &ws);
    let vars: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();

    // `exec -it`: what the terminal shows is the program's output alone, and
    // the program saw the window's size.
    // `-t` alone likewise: the container's terminal wrote "\r\n", and ours
    // must not make it "\r\r\n".
    for flags in ["-it", "-t"] {
        let (code, shown) = on_a_terminal(&env, &format!("exec $FORAGE exec {flags} {name} /workspace/winsize"), &vars);
        assert_eq!(code, 0, "{flags}: {}", escaped(&shown));
        assert_eq!(escaped(&shown), escaped(b"size 40 100\r\n"), "{flags}");
    }

    // `attach`: forage's one line, then the agent's output alone; the agent
    // draws for the window's size, and again for its new size when the
    // window changes under the session.
    let ready = ws.join("ready");
    let session = format!(
        "$FORAGE attach {name} </dev/tty & i=0; while [ ! -e {ready} ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done; \
         stty cols 120 </dev/tty; wait $!",
        ready = ready.display()
    );
    let (code, shown) = on_a_terminal(&env, &session, &vars);
    assert_eq!(code, 0, "{}", escaped(&shown));
    let expected = format!("attached to {name}; detach with ctrl-p ctrl-q\r\nsize 40 100\r\nsize 40 120\r\n");
    assert_eq!(escaped(&shown), escaped(expected.as_bytes()));

    env.ok(&["down", &name]);
    env.assert_nothing_left();
}

/// `-v`'s log lines are written above the progress line, not through it:
/// `up` paused after starting the container (its spinner drawn), then Ctrl-C
/// typed on the terminal, makes it log its rollback while the spinner shows.
#[test]
fn verbose_log_lines_are_written_above_the_progress_line() {
    use std::io::Write;
    let env = Env::new();
    let ws = env.mkdir("ws");
    let name = env.unique("logs");
    let mut child = Command::new("/usr/bin/script");
    child
        .args(["--quiet", "--command"])
        .arg(format!("stty rows 40 cols 100; exec {BIN} up {name} -v --workspace {}", ws.display()))
        .arg("/dev/null")
        .env("SHELL", "/bin/sh")
        .env("FORAGE_HOME", &env.home)
        .env("XDG_CONFIG_HOME", env.path("config"))
        .env("FORAGE_DEBUG_PAUSE_AFTER", "start")
        .env("NO_COLOR", "1")
        .env_remove("RUST_LOG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    let mut child = a_terminals_environment(&mut child).spawn().unwrap();
    let mut input = child.stdin.take().unwrap();
    let mut output = child.stdout.take().unwrap();
    let mut shown = Vec::new();
    let mut chunk = [0u8; 4096];
    // Read until the spinner is drawn during the pause (it goes on for up to
    // a minute, far longer than the quarter second before a spinner shows).
    let paused = b"forage-debug: paused after start";
    loop {
        let n = output.read(&mut chunk).unwrap();
        assert!(n > 0, "up ended before its spinner showed in the pause: {}", escaped(&shown));
        shown.extend_from_slice(&chunk[..n]);
        if let Some(at) = shown.windows(paused.len()).position(|w| w == paused) {
            if String::from_utf8_lossy(&shown[at..]).chars().any(|c| ('\u{2800}'..='\u{28ff}').contains(&c)) {
                break;
            }
        }
    }
    let before = shown.len();
    input.write_all(b"\x03").unwrap();
    output.read_to_end(&mut shown).unwrap();
    child.wait().unwrap();
    drop(input);

    let after = &shown[before..];
    let text = String::from_utf8_lossy(after);
    assert!(text.contains(" INFO forage::sandbox: rolling back"), "{}", escaped(after));
    // Each log line starts a line of its own: after a line break, or after
    // the sequence that cleared the spinner's line.
    let mut lines = 0;
    for (at, _) in text.match_indices("Z  INFO ") {
        let start = text[..at].rfind(|c: char| !(c.is_ascii_digit() || "-:.T".contains(c))).map_or(0, |i| i + 1);
        let before = &text[..start];
        assert!(
            before.is_empty() || before.ends_with('\n') || before.ends_with("\x1b[2K"),
            "a log line drawn through the spinner: {}",
            escaped(after)
        );
        lines += 1;
    }
    assert!(lines > 0);
    env.assert_nothing_left();
}
