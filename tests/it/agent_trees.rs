//! What the agent leaves in a workspace, at the sizes it chooses, and the names
//! it chooses (SPEC §3a, docs/guarantees.md §5): forage walks, reads and deletes
//! it in bounded work, `status` and `diff` answer, `down` always completes, and
//! no name reaches the terminal raw. Each attack is made from inside the
//! container through `forage-ctl exec` (or, where the image lacks the tool,
//! from the host side into the same bind-mounted directory).

use std::os::unix::fs::FileTypeExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use crate::git::{archive_refs, git, repo};
use crate::support::*;

fn inside(env: &Env, name: &str, script: &str) -> String {
    env.ok(&["exec", name, "--", "sh", "-c", script])
}

fn workspace(env: &Env, name: &str) -> PathBuf {
    env.home.join("workspaces").join(name)
}

/// Runs `cmd` to its end, failing the test if it takes more than `secs`
/// seconds; returns its output and its peak memory (maximum resident set, KiB).
#[allow(clippy::zombie_processes)] // reaped by wait4, which Child cannot do
fn measured(mut cmd: Command, secs: u64) -> (Output, u64) {
    let child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let pid = child.id() as libc::pid_t;
    let (mut stdout, mut stderr) = (child.stdout.unwrap(), child.stderr.unwrap());
    let out = std::thread::spawn(move || {
        let mut b = Vec::new();
        std::io::Read::read_to_end(&mut stdout, &mut b).unwrap();
        b
    });
    let err = std::thread::spawn(move || {
        let mut b = Vec::new();
        std::io::Read::read_to_end(&mut stderr, &mut b).unwrap();
        b
    });
    let killer = std::thread::spawn(move || {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
        while std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(200));
            // Reaped already: nothing to kill (and the pid is not reused before wait4 below returns).
            if unsafe { libc::kill(pid, 0) } != 0 {
                return false;
            }
        }
        unsafe { libc::kill(pid, libc::SIGKILL) };
        true
    });
    // wait4 rather than Child::wait: it gives this child's own peak memory.
    let (mut status, mut usage) = (0, unsafe { std::mem::zeroed::<libc::rusage>() });
    let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(waited, pid, "wait4: {}", std::io::Error::last_os_error());
    let output = Output {
        status: std::os::unix::process::ExitStatusExt::from_raw(status),
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    };
    assert!(!killer.join().unwrap(), "{cmd:?} hung: {}", describe(&output));
    (output, usage.ru_maxrss as u64)
}

fn finishes(cmd: Command, secs: u64) -> Output {
    let (out, _) = measured(cmd, secs);
    assert!(out.status.success(), "{}", describe(&out));
    out
}

/// How many directories named `d` are chained under `top`, counted from the
/// host by descriptor (a path that deep is longer than the kernel takes).
fn chain_depth(top: &Path) -> (usize, bool) {
    use nix::fcntl::{open, openat, OFlag};
    use nix::sys::stat::Mode;
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW;
    let mut at = open(top, flags, Mode::empty()).unwrap();
    let mut depth = 0;
    while let Ok(next) = openat(&at, "d", flags, Mode::empty()) {
        at = next;
        depth += 1;
    }
    let bottom_file = nix::sys::stat::fstatat(&at, "f", nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW).is_ok();
    (depth, bottom_file)
}

/// Makes a chain of directories named `d`, as deep as it is told, with a file
/// `f` at the bottom.
const CHAIN: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
int main(int argc, char **argv) {
    for (long i = atol(argv[1]); i > 0; i--)
        if (mkdir("d", 0755) != 0 || chdir("d") != 0) { perror("d"); return 1; }
    FILE *f = fopen("f", "w");
    return !(f && fputs("bottom\n", f) >= 0 && fclose(f) == 0);
}
"#;

#[test]
fn a_directory_chain_30000_deep_leaves_status_diff_and_down_whole() {
    let env = Env::new();
    let repo = repo(&env, "repo");
    let name = env.unique("at-deep");
    env.ok(&["up", &name, "--git-worktree", repo.to_str().unwrap()]);
    // A chain made one level at a time (`mkdir d; chdir d`), as no shell can
    // quickly: `mkdir -p` of a long path resolves it from the top every time.
    let ws = workspace(&env, &name);
    static_program(&crate::templates::write(&env.path("chain.c"), CHAIN), &ws.join("chain"));
    let script = "cd /workspace && echo changed > a.txt && mkdir deep && cd deep && /workspace/chain 30000 && rm /workspace/chain && echo DONE";
    assert_eq!(inside(&env, &name, script), "DONE\n");
    assert_eq!(chain_depth(&workspace(&env, &name).join("deep")), (30_000, true), "the chain is not there");

    let status = finishes(env.cmd(&["status", &name, "--json"]), 300);
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    let left_out = status["git"]["not_archivable"].as_array().unwrap();
    assert!(left_out.iter().any(|p| p.as_str().unwrap().contains("deeper than 512")), "{status}");
    let diff = finishes(env.cmd(&["diff", &name, "--name-only"]), 300);
    assert_eq!(String::from_utf8_lossy(&diff.stdout), "a.txt\n");
    finishes(env.cmd(&["down", &name]), 900);
    let archive = &archive_refs(&repo)[0];
    assert_eq!(git(&repo, &["show", &format!("{archive}:a.txt")]), "changed\n");
    env.assert_nothing_left_but_archives();
}

#[test]
fn a_directory_wider_than_the_open_file_limit_leaves_status_diff_and_down_whole() {
    let env = Env::new();
    let repo = repo(&env, "repo");
    let name = env.unique("at-wide");
    env.ok(&["up", &name, "--git-worktree", repo.to_str().unwrap()]);
    let script = r#"cd /workspace && mkdir wide && cd wide
        set --; i=0; while [ $i -lt 1000 ]; do set -- "$@" d$i; i=$((i+1)); done
        mkdir "$@" && for d; do echo x > $d/f; done; ls | wc -l"#;
    assert_eq!(inside(&env, &name, script).trim(), "1000");
    // forage-ctl with at most 256 descriptors: fewer than the directory has subdirectories.
    let limited = |args: &[&str]| {
        let mut cmd = env.cmd(args);
        let limit = libc::rlimit { rlim_cur: 256, rlim_max: 256 };
        unsafe {
            cmd.pre_exec(move || match libc::setrlimit(libc::RLIMIT_NOFILE, &limit) {
                0 => Ok(()),
                _ => Err(std::io::Error::last_os_error()),
            });
        }
        cmd
    };
    let status = finishes(limited(&["status", &name, "--json"]), 300);
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    let dirty = status["git"]["dirty"].as_array().unwrap();
    assert_eq!(dirty.len(), 1000, "{status}");
    let diff = finishes(limited(&["diff", &name, "--name-only"]), 300);
    assert_eq!(String::from_utf8_lossy(&diff.stdout).lines().filter(|l| l.starts_with("wide/d")).count(), 1000);
    finishes(limited(&["down", &name]), 300);
    let archive = &archive_refs(&repo)[0];
    let files = git(&repo, &["ls-tree", "-r", "--name-only", archive]);
    assert_eq!(files.lines().filter(|l| l.starts_with("wide/d")).count(), 1000, "{files}");
    env.assert_nothing_left_but_archives();
}

#[test]
fn sparse_worktree_files_cost_diff_bounded_memory() {
    let env = Env::new();
    let repo = repo(&env, "repo");
    let name = env.unique("at-sparse");
    env.ok(&["up", &name, "--git-worktree", repo.to_str().unwrap()]);
    assert_eq!(inside(&env, &name, "cd /workspace && echo changed > a.txt && echo DONE"), "DONE\n");
    // Three sparse files of 1 GiB each, just within the bound on one file
    // (made from the host side: the image has no dd or truncate; the bind
    // mount is the same directory).
    for f in ["s1", "s2", "s3"] {
        let file = std::fs::File::create(workspace(&env, &name).join(f)).unwrap();
        file.set_len(1 << 30).unwrap();
        use std::os::unix::fs::MetadataExt;
        let meta = file.metadata().unwrap();
        assert_eq!((meta.len(), meta.blocks()), (1 << 30, 0), "{f} is not a sparse 1 GiB file");
    }
    let (out, max_rss_kib) = measured(env.cmd(&["diff", &name, "--stat"]), 600);
    assert!(out.status.success(), "{}", describe(&out));
    println!("diff of three sparse 1 GiB files: peak memory {} MiB", max_rss_kib >> 10);
    assert!(max_rss_kib < 1 << 20, "diff took {} MiB of memory", max_rss_kib >> 10);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("a.txt"), "{stdout}");
    for f in ["s1", "s2", "s3"] {
        assert!(stderr.contains(&format!("not read, taken as committed: {f}: ")), "{stderr}");
    }
    // Only looking (`status`, `down --discard` saying what it throws away)
    // hashes the files through, streamed: minutes in a debug build, so not here.
    for f in ["s1", "s2", "s3"] {
        std::fs::remove_file(workspace(&env, &name).join(f)).unwrap();
    }
    env.ok(&["down", &name, "--discard"]);
    env.assert_nothing_left_but_archives();
}

#[test]
fn a_line_break_in_a_name_the_agent_chose_prints_no_line_of_its_own() {
    let env = Env::new();
    let repo = repo(&env, "repo");
    let name = env.unique("at-names");
    env.ok(&["up", &name, "--git-worktree", repo.to_str().unwrap()]);
    // A file and a FIFO (which nothing reads: it is listed as left out).
    let script = r#"cd /workspace && n=$(printf 'x\nforage-ctl: all good') && p=$(printf 'p\nforage-ctl: all good')
        echo text > "$n" && mkfifo "$p" && echo DONE"#;
    assert_eq!(inside(&env, &name, script), "DONE\n");
    let ws = workspace(&env, &name);
    assert!(ws.join("x\nforage-ctl: all good").is_file() && ws.join("p\nforage-ctl: all good").exists());
    let mut printed = String::new();
    for args in [
        &["status", &name][..],
        &["diff", &name],
        &["diff", &name, "--stat"],
        &["diff", &name, "--name-only"],
        &["list"],
        &["down", &name],
    ] {
        let out = env.run(args);
        assert!(out.status.success(), "{args:?}: {}", describe(&out));
        printed += &String::from_utf8_lossy(&out.stdout);
        printed += &String::from_utf8_lossy(&out.stderr);
    }
    // Every command named the files, escaped: on no line of its own.
    assert!(printed.contains("x\\x0aforage-ctl: all good"), "{printed}");
    assert!(printed.contains("p\\x0aforage-ctl: all good"), "{printed}");
    let fake: Vec<&str> = printed.lines().filter(|l| l.trim_start().starts_with("forage-ctl: all good")).collect();
    assert!(fake.is_empty(), "the agent printed lines of forage's: {fake:?}\n{printed}");
    env.assert_nothing_left_but_archives();
}

#[test]
fn templates_that_are_fifos_or_devices_are_named_without_hanging() {
    let env = Env::new();
    let dir = env.mkdir("templates");
    nix::unistd::mkfifo(&dir.join("pipe.yaml"), nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    std::os::unix::fs::symlink("/dev/zero", dir.join("zero.yaml")).unwrap();
    assert!(std::fs::metadata(dir.join("zero.yaml")).unwrap().file_type().is_char_device());
    for (args, what) in [
        (&["templates", "show", "pipe"][..], "pipe.yaml is a FIFO, not a regular file"),
        (&["templates", "show", "zero"], "zero.yaml is a device, not a regular file"),
        (&["templates"], "pipe.yaml is a FIFO, not a regular file"),
    ] {
        let mut cmd = env.cmd(args);
        cmd.env("FORAGE_TEMPLATES_PATH", &dir);
        let (out, _) = measured(cmd, 60);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", describe(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(what), "{args:?}: {err}");
    }
}

#[test]
fn a_relative_template_directory_is_never_searched() {
    let env = Env::new();
    // The current directory holds a template an agent could have written there.
    let cwd = env.mkdir("cwd");
    let evil = cwd.join("templates/evil.yaml");
    std::fs::create_dir_all(evil.parent().unwrap()).unwrap();
    std::fs::write(&evil, "description: planted\nimage: x\nagent: {command: [sh]}\n").unwrap();
    let listed = |path: &Path| {
        let out = env.cmd(&["templates"]).env("FORAGE_TEMPLATES_PATH", path).current_dir(&cwd).output().unwrap();
        assert!(out.status.success(), "{}", describe(&out));
        (String::from_utf8(out.stdout).unwrap(), String::from_utf8(out.stderr).unwrap())
    };
    // By its absolute path, it is a template forage lists.
    assert!(listed(&cwd.join("templates")).0.contains("planted"), "the planted template is no template");
    let (stdout, stderr) = listed(Path::new("templates"));
    assert!(!stdout.contains("planted"), "a template was read from the current directory: {stdout}");
    assert!(stderr.contains("ignoring the template directory \"templates\": it is relative"), "{stderr}");
}

#[test]
fn apply_names_the_directory_that_stands_where_the_change_edits_a_file() {
    let env = Env::new();
    let repo = repo(&env, "repo");
    let name = env.unique("at-apply");
    env.ok(&["up", &name, "--git-worktree", repo.to_str().unwrap()]);
    assert_eq!(inside(&env, &name, "cd /workspace && echo changed >> a.txt && echo DONE"), "DONE\n");
    std::fs::remove_file(repo.join("a.txt")).unwrap();
    std::fs::create_dir(repo.join("a.txt")).unwrap();
    let err = env.fails(&["apply", &name], 4);
    assert!(!err.contains("no error"), "{err}");
    assert!(err.contains("(a.txt is a directory there, where the change edits a file)"), "{err}");
    assert!(std::fs::read_dir(repo.join("a.txt")).unwrap().next().is_none(), "apply changed the checkout");
    env.ok(&["down", &name, "--discard"]);
    env.assert_nothing_left_but_archives();
}

#[test]
fn a_down_that_fails_and_is_run_again_makes_no_second_archive() {
    let env = Env::new();
    let repo = repo(&env, "repo");
    let name = env.unique("at-again");
    env.ok(&["up", &name, "--git-worktree", repo.to_str().unwrap()]);
    let script = r#"cd /workspace && git checkout -q -b side && echo s > s && git add s && git commit -qm side
        git checkout -q forage-$FORAGE_SANDBOX && echo dirty > d.txt && git rev-parse side"#;
    let side = inside(&env, &name, script);
    // The worktree's index on the host, corrupt: `down` can archive the
    // agent's other branch but not its files.
    let index = repo.join(".git/worktrees").join(format!("forage-{name}")).join("index");
    assert!(index.is_file(), "no index at {}", index.display());
    std::fs::write(&index, "not an index").unwrap();
    let first = env.fails(&["down", &name], 7);
    let archives = archive_refs(&repo);
    assert_eq!(archives.len(), 1, "{archives:?}: {first}");
    assert_eq!(git(&repo, &["rev-parse", &archives[0]]), side);
    env.fails(&["down", &name], 7);
    assert_eq!(archive_refs(&repo), archives, "a second down archived the same work again");
    // Once the index is gone, down completes, adding only the files' archive.
    std::fs::remove_file(&index).unwrap();
    let out = env.ok(&["down", &name]);
    let now = archive_refs(&repo);
    assert_eq!(now.len(), 2, "{now:?}: {out}");
    assert!(now.contains(&archives[0]), "{now:?}");
    let entries = std::fs::read_to_string(env.home.join("archives").join(format!("{name}.json"))).unwrap();
    assert_eq!(entries.matches(&archives[0]).count(), 1, "the archive is remembered twice: {entries}");
    env.assert_nothing_left_but_archives();
}
