//! Jobs (`up --repo SOURCE --job`): forage's mirror of the source, shared by
//! the jobs on one source and fetched on each; the job's context, kept after
//! its sandbox goes; a fetch that fails, failing the job and leaving the
//! mirror as it was. The agent is a template's script that commits its task.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::git::{git, repo};
use crate::support::*;

/// An agent that writes its task to job.txt, commits it, and exits.
pub const TEMPLATE: &str = r#"description: jobs tests
host_image:
  require: [sh]
  tools: [sh, cat, git]
agent:
  command: [sh, -c, 'cd /workspace && cat "$1" > job.txt && git add job.txt && git commit -qm "job work" && echo finished', job]
  task: ['{task_file}']
"#;

fn world() -> (Env, PathBuf) {
    let env = Env::new();
    let templates = env.mkdir("config/forage/templates");
    std::fs::write(templates.join("job.yaml"), TEMPLATE).unwrap();
    // It outlives `up`'s start-up watch (a third of the start, seconds on a
    // loaded machine), which would fail `up` for an agent that exits non-zero.
    std::fs::write(
        templates.join("job-fails.yaml"),
        TEMPLATE.replace("echo finished", "sleep 10; exit 3").replace("git]", "git, sleep]"),
    )
    .unwrap();
    let repo = repo(&env, "repo");
    (env, repo)
}

fn mirrors(env: &Env) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(env.home.join("mirrors")) else { return Vec::new() };
    entries.flatten().map(|e| e.path()).collect()
}

fn job<'a>(jobs: &'a Value, name: &str) -> &'a Value {
    jobs.as_array().unwrap().iter().find(|j| j["name"] == name).unwrap_or_else(|| panic!("no job {name} in {jobs}"))
}

fn up_job(env: &Env, name: &str, source: &str, extra: &[&str]) -> std::process::Output {
    let mut args = vec!["up", name, "--repo", source, "--job", "-t", "job", "--task", name];
    args.extend_from_slice(extra);
    env.run(&args)
}

#[test]
fn two_jobs_on_one_source_share_the_mirror_and_keep_their_context() {
    let (env, repo) = world();
    let (a, b) = (env.unique("job-a"), env.unique("job-b"));

    // A: by path, run to its end and cleaned up.
    let out = up_job(&env, &a, repo.to_str().unwrap(), &["--cleanup", "--json"]);
    assert!(out.status.success(), "{}", describe(&out));
    let done: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((done["status"].as_str(), done["exit_code"].as_i64()), (Some("done"), Some(0)), "{done}");
    assert_eq!(done["result"]["commits"][0]["summary"], "job work", "{done}");
    assert_eq!(done["result"]["diff"]["files"][0]["path"], "job.txt", "{done}");
    assert!(done["output_tail"].as_str().unwrap().contains("finished"), "{done}");
    let mirror = mirrors(&env);
    assert_eq!(mirror.len(), 1, "{mirror:?}");
    let mirror = &mirror[0];
    // A's name is taken by its context: refused, the context as it was.
    let context = std::fs::read(env.home.join("jobs").join(&a).join("job.json")).unwrap();
    let err = String::from_utf8(up_job(&env, &a, repo.to_str().unwrap(), &[]).stderr).unwrap();
    assert!(err.contains(&format!("job {a} exists")), "{err}");
    assert_eq!(std::fs::read(env.home.join("jobs").join(&a).join("job.json")).unwrap(), context);

    // The source moves on; B, by file:// URL, is made from the same mirror, fetched.
    std::fs::write(repo.join("a.txt"), "second\n").unwrap();
    git(&repo, &["commit", "-qam", "upstream moves"]);
    let upstream = git(&repo, &["rev-parse", "HEAD"]).trim().to_owned();
    let out = up_job(&env, &b, &format!("file://{}", repo.display()), &[]);
    assert!(out.status.success(), "{}", describe(&out));
    assert_eq!(mirrors(&env), std::slice::from_ref(mirror));
    let branch = format!("forage-{b}");
    git(mirror, &["merge-base", "--is-ancestor", &upstream, &branch]);
    assert!(eventually(120, || env.json(&["wait", &b, "--until", "exited", "--json"])["agent"] == "exited"));
    // Its agent exited 0: the job reads as done while its sandbox is still up,
    // though its context stores `running` until `down` records the result.
    let live = env.json(&["status", &b, "--json"]);
    let seen = |j: &Value| (j["status"].as_str().map(str::to_owned), j["exit_code"].as_i64(), j["sandbox"].as_bool());
    assert_eq!(seen(&live["job"]), (Some("done".into()), Some(0), Some(true)), "{live}");
    let stored: Value =
        serde_json::from_slice(&std::fs::read(env.home.join("jobs").join(&b).join("job.json")).unwrap()).unwrap();
    assert_eq!(stored["status"], "running");
    // An agent that exits non-zero: failed, with its exit code, live and once recorded.
    let c = env.unique("job-c");
    let out = env.run(&["up", &c, "--repo", repo.to_str().unwrap(), "--job", "-t", "job-fails", "--task", "c"]);
    assert!(out.status.success(), "{}", describe(&out));
    assert!(eventually(120, || env.json(&["wait", &c, "--until", "exited", "--json"])["agent"] == "exited"));
    let failed = (Some("failed".into()), Some(3), Some(true));
    assert_eq!(seen(job(&env.json(&["jobs", "--json"]), &c)), failed);
    assert!(env.ok(&["jobs"]).contains("failed (exit code 3)"));
    env.ok(&["down", &b]);
    env.ok(&["down", &c]);
    assert_eq!(seen(&env.json(&["status", &c, "--json"])), (Some("failed".into()), Some(3), Some(false)));

    // Both contexts outlive their sandboxes, through `jobs` and `status`.
    let jobs = env.json(&["jobs", "--json"]);
    for name in [&a, &b] {
        let j = job(&jobs, name);
        assert_eq!((j["status"].as_str(), j["sandbox"].as_bool()), (Some("done"), Some(false)), "{j}");
        assert_eq!(j["task"], name.as_str());
        assert_eq!(j["mirror"], mirror.to_str().unwrap());
        assert!(j["finished_at"].as_u64() >= j["created_at"].as_u64(), "{j}");
    }
    assert_eq!(job(&jobs, &b)["result"]["commits"][0]["summary"], "job work");
    assert_eq!(env.json(&["status", &b, "--json"])["status"], "done");
    // The agents' work stays in the mirror (branches and archives), never in the source.
    assert!(!git(&repo, &["for-each-ref"]).contains("forage"), "the source gained forage's refs");
    let worktrees = git(&repo, &["worktree", "list", "--porcelain"]);
    assert_eq!(worktrees.lines().filter(|l| l.starts_with("worktree ")).count(), 1, "{worktrees}");
    assert_eq!(env.containers(), Vec::<String>::new());
}

#[test]
fn a_fetch_failure_fails_the_job_clearly_and_keeps_the_mirror() {
    let (env, repo) = world();
    let (a, b) = (env.unique("job-ok"), env.unique("job-nofetch"));
    // Refused for what was asked: nothing made, not even the mirror.
    let r = repo.to_str().unwrap();
    env.fails(&["up", &a, "--repo", r, "--job", "-t", "no-such-template"], 3);
    env.fails(&["up", &a, "--repo", "ssh://example.com/app.git", "--job"], 2);
    env.fails(&["up", &a, "--repo", r, "--job", "-t", "job", "--task", "t", "--env", "=x"], 2);
    env.assert_nothing_left();
    let out = up_job(&env, &a, repo.to_str().unwrap(), &["--cleanup"]);
    assert!(out.status.success(), "{}", describe(&out));
    let mirror = mirrors(&env).pop().unwrap();
    let refs = |m: &Path| git(m, &["for-each-ref", "--format=%(refname) %(objectname)"]);
    let kept = refs(&mirror);

    // The source is no repository any more: the fetch fails.
    std::fs::remove_dir_all(repo.join(".git")).unwrap();
    let out = up_job(&env, &b, repo.to_str().unwrap(), &[]);
    assert_eq!(out.status.code(), Some(6), "{}", describe(&out));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("fetching") && err.contains("mirror") && err.contains(repo.to_str().unwrap()), "{err}");
    assert!(err.contains(&format!("jobs/{b}/job.json")), "{err}");

    let jobs = env.json(&["jobs", "--json"]);
    let failed = job(&jobs, &b);
    assert_eq!(failed["status"], "failed", "{failed}");
    assert!(failed["error"].as_str().unwrap().contains("fetching"), "{failed}");
    // The mirror is as it was, and whole; no sandbox was made.
    assert_eq!(refs(&mirror), kept);
    git(&mirror, &["fsck", "--no-progress"]);
    assert_eq!(env.json(&["list", "--json"]), serde_json::json!([]));
    assert!(!env.home.join("workspaces").join(&b).exists());
    assert_eq!(env.containers(), Vec::<String>::new());
}

#[test]
fn gc_keeps_the_newest_finished_job_contexts() {
    let env = Env::new();
    // Contexts as `up --job` leaves them, written here: a hundred and two
    // finished jobs, and a queued one (never pruned).
    let write = |name: &str, status: &str, created_at: u64| {
        let dir = env.home.join("jobs").join(name);
        std::fs::create_dir_all(&dir).unwrap();
        let job = serde_json::json!({
            "name": name, "source": "file:///nowhere", "mirror": "/nowhere", "branch": null, "template": "shell",
            "task": null, "status": status, "cleanup": false, "created_at": created_at, "started_at": null,
            "finished_at": null, "error": null, "exit_code": null, "output_tail": null, "result": null,
        });
        std::fs::write(dir.join("job.json"), job.to_string()).unwrap();
    };
    for i in 0..102 {
        write(&format!("j{i:03}"), if i % 2 == 0 { "done" } else { "failed" }, 1_000 + i);
    }
    write("early", "queued", 1);
    let found = env.json(&["gc", "--json"]);
    let old: Vec<&str> = found
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["kind"] == "old-job")
        .map(|f| f["subject"].as_str().unwrap())
        .collect();
    assert_eq!(old.len(), 2, "{found}");
    assert!(old[0].ends_with("jobs/j000") && old[1].ends_with("jobs/j001"), "{old:?}");
    assert_eq!(env.json(&["jobs", "--json"]).as_array().unwrap().len(), 103, "gc without --force removes nothing");
    env.ok(&["gc", "--force"]);
    let names: Vec<String> = env
        .json(&["jobs", "--json"])
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names.len(), 101);
    assert!(
        names.contains(&"early".to_owned())
            && names.contains(&"j002".to_owned())
            && !names.contains(&"j001".to_owned())
    );
}

#[test]
fn concurrent_jobs_on_a_new_source_clone_it_once_and_all_succeed() {
    let (env, repo) = world();
    let names: Vec<String> = (0..4).map(|i| env.unique(&format!("job-c{i}"))).collect();
    let source = repo.to_str().unwrap().to_owned();
    let outs: Vec<std::process::Output> = std::thread::scope(|s| {
        let runs: Vec<_> =
            names.iter().map(|n| s.spawn(|| up_job(&env, n, &source, &["--cleanup", "--json"]))).collect();
        runs.into_iter().map(|r| r.join().unwrap()).collect()
    });
    for (name, out) in names.iter().zip(&outs) {
        assert!(out.status.success(), "{name}: {}", describe(out));
        let job: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(job["status"], "done", "{job}");
    }
    let mirror = mirrors(&env);
    assert_eq!(mirror.len(), 1, "{mirror:?}");
    // Each job's branch, in the one mirror, holds its own work.
    for name in &names {
        assert_eq!(&git(&mirror[0], &["show", &format!("forage-{name}:job.txt")]), name);
    }
    assert_eq!(env.containers(), Vec::<String>::new());
}

/// A server this test starts, killed when the test ends.
struct Server(std::process::Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// git's smart HTTP over HTTPS on 127.0.0.1 (tests/it/fixtures/git_http_server.py),
/// serving the bare repositories under `root` with a certificate of its own:
/// the server, its port, and the certificate (the only root that trusts it).
fn https_git_server(env: &Env, root: &Path) -> (Server, u16, PathBuf) {
    let dir = env.mkdir("https");
    let (cert, key, port_file) = (dir.join("cert.pem"), dir.join("key.pem"), dir.join("port"));
    let made = std::process::Command::new("openssl")
        .args(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1"])
        .args(["-addext", "subjectAltName=IP:127.0.0.1", "-keyout"])
        .args([&key, Path::new("-out"), &cert])
        .output()
        .unwrap();
    assert!(made.status.success(), "{}", describe(&made));
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/fixtures/git_http_server.py");
    let child = std::process::Command::new("python3")
        .args([script.as_path(), root, &cert, &key, &port_file])
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(dir.join("log")).unwrap())
        .spawn()
        .unwrap();
    let server = Server(child);
    assert!(eventually(30, || port_file.exists()), "the HTTPS git server did not start");
    let port = std::fs::read_to_string(&port_file).unwrap().parse().unwrap();
    (server, port, cert)
}

/// `git daemon` serving the bare repositories under `root` on 127.0.0.1.
fn git_daemon(root: &Path) -> (Server, u16) {
    // A port free a moment ago; the daemon's --reuseaddr takes it at once.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    // git-daemon itself, not `git daemon`, which would run it as a child that
    // outlives the kill below.
    let exec_path = std::process::Command::new("git").arg("--exec-path").output().unwrap();
    let exec_path = PathBuf::from(String::from_utf8(exec_path.stdout).unwrap().trim());
    let child = std::process::Command::new(exec_path.join("git-daemon"))
        .args(["--listen=127.0.0.1", &format!("--port={port}"), "--export-all", "--reuseaddr"])
        .arg(format!("--base-path={}", root.display()))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let server = Server(child);
    assert!(eventually(30, || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()), "git daemon did not start");
    (server, port)
}

#[test]
fn jobs_fetch_repositories_over_https_and_git_urls() {
    let (env, repo) = world();
    let served = env.mkdir("served");
    git(&served, &["clone", "-q", "--bare", repo.to_str().unwrap(), "app.git"]);
    let source_head = git(&repo, &["rev-parse", "HEAD"]);
    let (_https, port, cert) = https_git_server(&env, &served);
    let url = format!("https://127.0.0.1:{port}/app.git");
    let (a, b, c) = (env.unique("job-https"), env.unique("job-untrusted"), env.unique("job-git"));

    // Trusted through SSL_CERT_FILE, as the system's roots would be: the job runs.
    let mut up =
        env.cmd(&["up", &a, "--repo", &url, "--job", "-t", "job", "--task", "over https", "--cleanup", "--json"]);
    let out = up.env("SSL_CERT_FILE", &cert).output().unwrap();
    assert!(out.status.success(), "{}", describe(&out));
    let done: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((done["status"].as_str(), done["source"].as_str()), (Some("done"), Some(url.as_str())), "{done}");
    let mirror = mirrors(&env);
    assert_eq!(mirror.len(), 1, "{mirror:?}");
    let refs = |m: &Path| git(m, &["for-each-ref", "--format=%(refname) %(objectname)"]);
    assert_eq!(git(&mirror[0], &["rev-parse", "main"]), source_head);
    let kept = refs(&mirror[0]);

    // A certificate nothing trusts: the fetch fails, saying so, the mirror as it was.
    let out = up_job(&env, &b, &url, &[]);
    assert_eq!(out.status.code(), Some(6), "{}", describe(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&url) && err.contains("certificate") && err.contains("SSL_CERT_FILE"), "{err}");
    assert_eq!(refs(&mirror[0]), kept);
    assert_eq!(job(&env.json(&["jobs", "--json"]), &b)["status"], "failed");

    // git:// (git daemon): a mirror of its own, the job done.
    let (_daemon, port) = git_daemon(&served);
    let git_url = format!("git://127.0.0.1:{port}/app.git");
    let out = up_job(&env, &c, &git_url, &["--cleanup", "--json"]);
    assert!(out.status.success(), "{}", describe(&out));
    let done: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(done["result"]["commits"][0]["summary"], "job work", "{done}");
    assert_eq!(mirrors(&env).len(), 2);
    assert_eq!(env.containers(), Vec::<String>::new());
}

#[test]
fn a_url_with_credentials_or_an_unknown_scheme_is_refused_and_never_written() {
    let env = Env::new();
    let name = env.unique("job-cred");
    for (url, secret) in [
        ("https://me:s3cr3t-token@example.com/app.git", "s3cr3t-token"),
        ("https://ghp_s3cr3tTOKEN@example.com/app.git", "ghp_s3cr3tTOKEN"),
    ] {
        let err = env.fails(&["up", &name, "--repo", url, "--job"], 2);
        assert!(err.contains("credentials") && err.contains("***@example.com"), "{err}");
        assert!(!err.contains(secret), "the secret was printed: {err}");
    }
    for url in ["ssh://git@example.com/app.git", "git@example.com:app.git", "ftp://example.com/app.git"] {
        let err = env.fails(&["up", &name, "--repo", url, "--job"], 2);
        assert!(err.contains("https://") && err.contains("clone it yourself"), "{err}");
    }
    let err = env.fails(&["up", &name, "--repo", "https:///app.git", "--job"], 2);
    assert!(err.contains("needs a host"), "{err}");
    // Without --job a URL is no checkout: said so, the token still unprinted.
    let err = env.fails(&["up", &name, "--repo", "https://ghp_s3cr3tTOKEN@example.com/app.git"], 2);
    assert!(err.contains("add --job") && !err.contains("s3cr3t"), "{err}");
    env.assert_nothing_left();
    assert!(!env.home.join("mirrors").exists() && !env.home.join("jobs").join(&name).exists());
}
