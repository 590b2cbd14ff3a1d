//! Host paths after `up` (SPEC §3a, "Paths are pinned"): every path the engine
//! mounts is proved to be the object forage checked, before every start; secret
//! files are copied once and never read again; no sandbox's agent can write
//! beneath another's mounts; directories holding other programs' doors,
//! credentials or autostart locations are refused; and nothing an agent leaves
//! in a workspace is setuid or setgid on the host.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::support::*;
use crate::templates::{shell_image, write};

fn inside(env: &Env, name: &str, script: &str) -> String {
    env.ok(&["exec", name, "--", "sh", "-c", script])
}

fn is_running(name: &str) -> bool {
    inspect(&format!("forage-{name}")).and_then(|c| c.state).and_then(|s| s.running) == Some(true)
}

/// The host paths the container mounts, as the engine has them.
fn mount_sources(name: &str) -> Vec<String> {
    let c = inspect(&format!("forage-{name}")).unwrap();
    c.mounts.unwrap_or_default().into_iter().filter_map(|m| m.source).collect()
}

#[test]
fn a_path_checked_at_up_is_proved_the_same_object_before_every_start() {
    let env = Env::new();
    let image = shell_image(&env);
    let ws = env.mkdir("ws");
    write(&ws.join("data/readme"), "data\n");
    // A template whose read-only mount lies inside the workspace its agent writes.
    let dir = env.path("tpl");
    write(
        &dir.join("inner.yaml"),
        &format!(
            "image: {image}\nagent: {{command: [sleep, '1000']}}\nmounts: [{{source: {}, target: /data, read_only: true}}]\n",
            ws.join("data").display()
        ),
    );
    let run = |args: &[&str]| env.cmd(args).env("FORAGE_TEMPLATES_PATH", &dir).output().unwrap();
    let name = env.unique("pin");
    let out = run(&["up", &name, "-t", "inner", "--workspace", ws.to_str().unwrap()]);
    assert!(out.status.success(), "{}", describe(&out));
    assert_eq!(inside(&env, &name, "cat /data/readme"), "data\n");

    // The attack, from inside: the mounted directory swapped for a symlink to
    // the host's /run, where the engine's socket is.
    let said = inside(&env, &name, "cd /workspace && mv data data.real && ln -s /run data && echo SWAPPED");
    assert_eq!(said, "SWAPPED\n");
    assert_eq!(std::fs::read_link(ws.join("data")).unwrap(), Path::new("/run"), "the swap took effect");

    // Every way to start a container on it is refused, and none starts.
    let err = env.fails(&["restart", &name], 6);
    assert!(err.contains(&format!("{} is now a symlink", ws.join("data").display())), "{err}");
    assert!(!is_running(&name));
    let err = env.fails(&["start", &name], 6);
    assert!(err.contains("is now a symlink"), "{err}");
    let out = run(&["reset", &name]);
    assert!(!out.status.success(), "{}", describe(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/run"), "{}", describe(&out));
    assert!(!mount_sources(&name).iter().any(|s| s == "/run" || s == "/var/run"), "{:?}", mount_sources(&name));
    assert!(!is_running(&name));

    // Put back (the same directory): it starts again.
    std::fs::remove_file(ws.join("data")).unwrap();
    std::fs::rename(ws.join("data.real"), ws.join("data")).unwrap();
    env.ok(&["start", &name]);
    assert_eq!(inside(&env, &name, "cat /data/readme"), "data\n");

    // The workspace itself replaced by another directory of that name.
    env.ok(&["stop", &name]);
    std::fs::rename(&ws, env.path("ws-old")).unwrap();
    std::fs::create_dir(&ws).unwrap();
    let err = env.fails(&["start", &name], 6);
    assert!(err.contains(&ws.display().to_string()) && err.contains("replaced"), "{err}");
    std::fs::remove_dir(&ws).unwrap();
    std::fs::rename(env.path("ws-old"), &ws).unwrap();
    env.ok(&["start", &name]);

    // A socket the agent bound itself, left in its workspace: nothing listens
    // once the agent is stopped, and the sandbox starts again.
    static_program(&write(&env.path("bind.c"), BIND_SOCKET), &ws.join("bind"));
    assert_eq!(inside(&env, &name, "/workspace/bind /workspace/agent.sock"), "BOUND\n");
    use std::os::unix::fs::FileTypeExt;
    assert!(std::fs::symlink_metadata(ws.join("agent.sock")).unwrap().file_type().is_socket());
    env.ok(&["restart", &name]);
    assert!(is_running(&name));

    // A program on the host opens a door in the workspace after `up`: the
    // guard's verdict is asked again at every start.
    let door = ws.join("run/app.sock");
    std::fs::create_dir_all(door.parent().unwrap()).unwrap();
    let listener = std::os::unix::net::UnixListener::bind(&door).unwrap();
    let err = env.fails(&["restart", &name], 2);
    assert!(err.contains(&door.display().to_string()) && err.contains("socket"), "{err}");
    assert!(!is_running(&name));
    drop(listener);
    std::fs::remove_file(&door).unwrap();
    env.ok(&["start", &name]);

    env.ok(&["down", &name]);
    env.assert_nothing_left();
}

#[test]
fn secret_files_are_copied_at_up_and_never_read_again() {
    let env = Env::new();
    let image = shell_image(&env);
    let dir = env.path("tpl");
    write(&dir.join("keyed.yaml"), &format!("image: {image}\nagent: {{command: [sleep, '1000']}}\n"));
    let run = |args: &[&str]| env.cmd(args).env("FORAGE_TEMPLATES_PATH", &dir).output().unwrap();
    let ws = env.mkdir("ws");

    // A secret file the agent could write is refused: it could be a symlink to
    // a private key by the time `up` reads it, or after.
    let in_ws = write(&ws.join("api.key"), "in-the-workspace");
    let name = env.unique("sec");
    let out = run(&[
        "up",
        &name,
        "-t",
        "keyed",
        "--workspace",
        ws.to_str().unwrap(),
        "--secret",
        &format!("api={}", in_ws.display()),
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("which this sandbox's agent writes"), "{}", describe(&out));
    env.assert_nothing_left();

    // Given from outside: copied, and the container mounts the copy.
    let key = write(&env.path("keys/api"), "the-real-value");
    let out = run(&[
        "up",
        &name,
        "-t",
        "keyed",
        "--workspace",
        ws.to_str().unwrap(),
        "--secret",
        &format!("api={}", key.display()),
    ]);
    assert!(out.status.success(), "{}", describe(&out));
    let copy = env.home.join("secrets").join(&name).join("api");
    assert_eq!(std::fs::metadata(&copy).unwrap().permissions().mode() & 0o777, 0o600);
    assert!(mount_sources(&name).contains(&copy.display().to_string()), "{:?}", mount_sources(&name));
    assert!(!mount_sources(&name).contains(&key.display().to_string()));

    // Another sandbox's secret inside this one's workspace: refused too.
    let other = env.unique("sec2");
    let ws2 = env.mkdir("ws2");
    let out = run(&[
        "up",
        &other,
        "-t",
        "keyed",
        "--workspace",
        ws2.to_str().unwrap(),
        "--secret",
        &format!("api={}", in_ws.display()),
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(&format!("sandbox {name}'s agent writes")),
        "{}",
        describe(&out)
    );

    // The file it came from, swapped for a symlink to another secret: the
    // sandbox keeps the value it was given, through restart and reset.
    let elsewhere = write(&env.path("keys/private-key"), "never-to-be-mounted");
    std::fs::remove_file(&key).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &key).unwrap();
    env.ok(&["restart", &name]);
    assert_eq!(inside(&env, &name, "cat /run/secrets/api"), "the-real-value");
    let out = run(&["reset", &name]);
    assert!(out.status.success(), "{}", describe(&out));
    assert_eq!(inside(&env, &name, "cat /run/secrets/api"), "the-real-value");

    env.ok(&["down", &name]);
    assert!(!copy.exists() && !copy.parent().unwrap().exists(), "down removes the copies");
    env.assert_nothing_left();
}

#[test]
fn no_sandboxs_agent_can_write_beneath_another_sandboxs_mounts() {
    let env = Env::new();
    let outer = env.mkdir("outer");
    let inner = env.mkdir("outer/inner");
    let (a, b) = (env.unique("outer"), env.unique("inner"));
    env.ok(&["up", &a, "--workspace", outer.to_str().unwrap(), "--no-start"]);
    // Nested direct workspaces, either way round.
    let err = env.fails(&["up", &b, "--workspace", inner.to_str().unwrap(), "--no-start"], 4);
    assert!(err.contains(&format!("written by sandbox {a}'s agent")), "{err}");
    env.ok(&["down", &a]);
    env.ok(&["up", &b, "--workspace", inner.to_str().unwrap(), "--no-start"]);
    let err = env.fails(&["up", &a, "--workspace", outer.to_str().unwrap(), "--no-start"], 4);
    assert!(err.contains(&format!("that sandbox {b} mounts")), "{err}");
    env.ok(&["down", &b]);

    // A direct sandbox over a repository, and a git sandbox borrowing its objects.
    let repo = crate::git::repo(&env, "repo");
    let direct = env.unique("direct");
    env.ok(&["up", &direct, "--workspace", repo.to_str().unwrap(), "--no-start"]);
    let before = crate::git::repo_state(&repo);
    let err = env.fails(&["up", &b, "--git-worktree", repo.to_str().unwrap(), "--no-start"], 4);
    assert!(err.contains(".git/objects") && err.contains(&direct), "{err}");
    assert_eq!(crate::git::repo_state(&repo), before, "nothing of the refused sandbox was made");
    env.ok(&["down", &direct]);
    env.assert_nothing_left();
}

#[test]
fn directories_holding_other_programs_doors_credentials_or_autostart_are_refused() {
    let env = Env::new();
    // A terminal multiplexer's socket, as tmux keeps it.
    let shared = env.mkdir("shared");
    let socket = shared.join("tmux-1000/default");
    std::fs::create_dir_all(socket.parent().unwrap()).unwrap();
    let _tmux = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let err = env.fails(&["up", "door", "--workspace", shared.to_str().unwrap()], 2);
    assert!(err.contains(&socket.display().to_string()), "{err}");
    // /tmp itself, with FORAGE_HOME elsewhere (else that is the first refusal;
    // the test's own scratch directory, and perhaps the checkout, are in /tmp).
    let elsewhere = PathBuf::from("/var/tmp").join(env.unique("forage-it-home"));
    let out = env.cmd(&["up", "door", "--workspace", "/tmp"]).env("FORAGE_HOME", &elsewhere).output().unwrap();
    let _ = std::fs::remove_dir_all(&elsewhere);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("other programs' and users' sockets"), "{}", describe(&out));

    // The user's credentials and what their shell, desktop and git run.
    let home = env.mkdir("home");
    for rel in [".ssh", ".config/systemd/user", ".local/bin", ".gnupg", ".kube", ".docker"] {
        std::fs::create_dir_all(home.join(rel)).unwrap();
    }
    write(&home.join(".bashrc"), "# the user's\n");
    let as_user = |args: &[&str]| env.cmd(args).env("HOME", &home).output().unwrap();
    for rel in [".ssh", ".config", ".config/systemd/user", ".local/bin", ".local", ".gnupg", ".kube", ".docker"] {
        let path = home.join(rel);
        let out = as_user(&["up", "creds", "--workspace", path.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2), "{rel}: {}", describe(&out));
        assert!(String::from_utf8_lossy(&out.stderr).contains("refusing"), "{rel}: {}", describe(&out));
    }
    // Other users' homes, the system's spool and add-on programs.
    for path in ["/root", "/opt", "/var/spool"].map(PathBuf::from).iter().filter(|p| p.is_dir()) {
        let out = as_user(&["up", "system", "--workspace", path.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2), "{}: {}", path.display(), describe(&out));
    }
    // The same for a template's writable mount; read-only, a credential is the
    // template author's choice.
    let dir = env.path("tpl");
    let ws = env.mkdir("ws");
    for (name, rel, read_only, code) in [("w", ".config", false, 2), ("shell", ".bashrc", false, 2)] {
        write(
            &dir.join(format!("{name}.yaml")),
            &format!(
                "host_image: {{require: [sh], tools: [sh]}}\nagent: {{command: [sh]}}\nmounts: [{{source: {}, target: /x, read_only: {read_only}}}]\n",
                home.join(rel).display()
            ),
        );
        let out = env
            .cmd(&["up", name, "-t", name, "--workspace", ws.to_str().unwrap(), "--no-start"])
            .env("HOME", &home)
            .env("FORAGE_TEMPLATES_PATH", &dir)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(code), "{name}: {}", describe(&out));
        assert!(String::from_utf8_lossy(&out.stderr).contains("forage never hands an agent"), "{}", describe(&out));
    }
    env.assert_nothing_left();
}

/// Binds a Unix socket at the path it is given and exits, leaving the file.
const BIND_SOCKET: &str = r#"
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
int main(int argc, char **argv) {
    struct sockaddr_un a = { .sun_family = AF_UNIX };
    strncpy(a.sun_path, argv[1], sizeof a.sun_path - 1);
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    if (bind(s, (struct sockaddr *)&a, sizeof a) != 0) { perror("bind"); return 1; }
    puts("BOUND");
    return 0;
}
"#;

/// A program that tries every way to leave a setuid or setgid file behind,
/// printing what each call returned, and a plain file as proof it ran.
const SET_ID_PROBE: &str = r#"
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
struct how { unsigned long long flags, mode, resolve; };
static void said(const char *what, long r) { printf("%s %s\n", what, r < 0 ? strerror(errno) : "ok"); }
int main(void) {
    said("plain", open("plain", O_CREAT | O_WRONLY, 0755));
    said("open-setuid", open("open-setuid", O_CREAT | O_WRONLY, 04755));
    said("openat-setgid", openat(AT_FDCWD, "openat-setgid", O_CREAT | O_WRONLY, 02755));
    said("creat-setuid", creat("creat-setuid", 04755));
    struct how h = { O_CREAT | O_WRONLY, 04755, 0 };
    said("openat2-setuid", syscall(SYS_openat2, AT_FDCWD, "openat2-setuid", &h, sizeof h));
    said("mknod-setuid", mknod("mknod-setuid", S_IFREG | 04755, 0));
    said("chmod-setuid", chmod("plain", 04755));
    int fd = open("plain", O_RDONLY);
    said("fchmod-setgid", fchmod(fd, 02755));
    said("fchmodat-setuid", fchmodat(AT_FDCWD, "plain", 06755, 0));
    said("chmod-plain", chmod("plain", 0700));
    return 0;
}
"#;

#[test]
fn nothing_the_agent_leaves_in_a_workspace_is_setuid_or_setgid_on_the_host() {
    let env = Env::new();
    let ws = env.mkdir("ws");
    let source = write(&env.path("probe.c"), SET_ID_PROBE);
    static_program(&source, &ws.join("probe"));
    let name = env.unique("setid");
    env.ok(&["up", &name, "--workspace", ws.to_str().unwrap()]);
    let said = inside(&env, &name, "cd /workspace && ./probe; cp /bin/sh ./sh && chmod u+s ./sh; echo chmod-sh $?");
    // The attack ran: every file was made, the plain mode change worked.
    assert!(said.contains("plain ok") && said.contains("chmod-plain ok"), "{said}");
    for file in ["plain", "sh"] {
        assert!(ws.join(file).exists(), "{file} was not made: {said}");
    }
    assert!(said.contains("openat2-setuid Function not implemented"), "{said}");
    for refused in [
        "chmod-setuid",
        "fchmod-setgid",
        "fchmodat-setuid",
        "mknod-setuid",
        "open-setuid",
        "openat-setgid",
        "creat-setuid",
    ] {
        assert!(said.contains(&format!("{refused} Operation not permitted")), "{refused}: {said}");
    }
    assert!(!said.contains("chmod-sh 0"), "{said}");
    // On the host, nothing in the workspace is setuid or setgid.
    for entry in std::fs::read_dir(&ws).unwrap().flatten() {
        let mode = entry.metadata().unwrap().mode();
        assert_eq!(mode & 0o6000, 0, "{} is {mode:o} on the host", entry.path().display());
    }
    env.ok(&["down", &name]);
    env.assert_nothing_left();
}

#[test]
fn a_template_an_agent_can_write_is_never_read() {
    let env = Env::new();
    let image = shell_image(&env);
    let proj = env.mkdir("proj");
    let templates = proj.join(".forage");
    write(&templates.join("team.yaml"), &format!("image: {image}\nagent: {{command: [sleep, '1000']}}\n"));
    let with_templates = |args: &[&str]| env.cmd(args).env("FORAGE_TEMPLATES_PATH", &templates).output().unwrap();
    // A sandbox made from the project's template while no agent writes the project.
    let (team, direct) = (env.unique("team"), env.unique("direct"));
    let out = with_templates(&["up", &team, "-t", "team", "--workspace", env.mkdir("ws").to_str().unwrap()]);
    assert!(out.status.success(), "{}", describe(&out));
    // Then a direct sandbox on the project, whose agent rewrites that template
    // to mount what it wants (the user's keys, read-only: a template's choice).
    env.ok(&["up", &direct, "--workspace", proj.to_str().unwrap()]);
    let keys = env.mkdir("keys");
    write(&keys.join("id"), "private");
    let evil = format!("image: {image}\\nagent: {{command: [sleep, \\\"1000\\\"]}}\\nmounts: [{{source: {}, target: /keys, read_only: true}}]\\n", keys.display());
    let said = inside(&env, &direct, &format!("printf '{evil}' > /workspace/.forage/team.yaml && echo REWRITTEN"));
    assert_eq!(said, "REWRITTEN\n");
    assert!(std::fs::read_to_string(templates.join("team.yaml")).unwrap().contains("/keys"), "the rewrite took effect");

    // reset reads the template again: refused, naming the writer; nothing changes.
    let before = mount_sources(&team);
    let out = with_templates(&["reset", &team]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("sandbox {direct}'s agent writes")) && err.contains("team.yaml"), "{err}");
    assert_eq!(mount_sources(&team), before);
    assert!(!mount_sources(&team).iter().any(|s| s.contains("keys")));
    // And no new sandbox is made from it.
    let out = with_templates(&["up", "another", "-t", "team", "--workspace", env.mkdir("ws3").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));

    env.ok(&["down", &team, &direct]);
    env.assert_nothing_left();
}
