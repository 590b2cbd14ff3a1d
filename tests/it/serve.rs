//! `forage-ctl serve` on the real engine, spoken to by a real HTTP client
//! (curl): the review loop over a unix socket, refusals that change nothing,
//! the token on TCP, 32 creates at once, three agents fanned out and the best
//! merged, and a client or server that goes away mid-create.

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use serde_json::{json, Value};

use crate::git::{git, repo, repo_state};
use crate::support::*;

/// A running `forage-ctl serve`, stopped (SIGTERM, waited for) when dropped.
struct Served {
    child: Child,
    socket: PathBuf,
}

impl Served {
    /// Serves on a socket in the test's scratch directory, whose root is the
    /// only one allowed.
    fn start(env: &Env, extra: &[&str], vars: &[(&str, &str)]) -> Served {
        let socket = env.path("forage.sock");
        let root = env.dir.path().display().to_string();
        let mut args = vec!["serve", "--socket", socket.to_str().unwrap(), "--root", &root];
        args.extend_from_slice(extra);
        let mut cmd = env.cmd(&args);
        let log = std::fs::File::create(env.path("serve.log")).unwrap();
        cmd.envs(vars.iter().copied()).stderr(log);
        let child = cmd.spawn().unwrap();
        assert!(eventually(60, || socket.exists()), "serve did not listen on {}", socket.display());
        Served { child, socket }
    }

    /// POSTs `body` to /v1/`op` over the socket: the status and the JSON answer.
    fn post(&self, op: &str, body: &Value) -> (u16, Value) {
        curl(&["--unix-socket", self.socket.to_str().unwrap(), &format!("http://forage/v1/{op}")], &body.to_string())
    }

    fn ok(&self, op: &str, body: Value) -> Value {
        let (status, answer) = self.post(op, &body);
        assert_eq!(status, 200, "{op} {body}: {answer}");
        answer
    }

    fn stop(mut self) -> std::process::ExitStatus {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.child.id() as i32), nix::sys::signal::Signal::SIGTERM)
            .unwrap();
        self.child.wait().unwrap()
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs curl with `args`, sending `body` with POST: the status and the
/// answer (JSON, or the raw text as a string).
fn curl(args: &[&str], body: &str) -> (u16, Value) {
    let mut child = Command::new("curl")
        .args(["-sS", "-X", "POST", "--data-binary", "@-", "-H", "Content-Type: application/json"])
        .args(["-w", "\n%{http_code}"])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), body.as_bytes()).unwrap();
    drop(child.stdin.take());
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (answer, status) = text.trim_end().rsplit_once('\n').unwrap_or(("", text.trim()));
    let status = status.parse().unwrap_or_else(|_| panic!("curl {args:?}: {}", describe(&out)));
    (status, serde_json::from_str(answer).unwrap_or_else(|_| Value::String(answer.to_owned())))
}

#[test]
fn create_exec_diff_merge_down_over_http_on_a_unix_socket() {
    let env = Env::new();
    let repo = repo(&env, "repo");
    let name = env.unique("http-loop");
    let served = Served::start(&env, &[], &[]);
    let mode = std::fs::metadata(&served.socket).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "the socket is the user's alone");

    let record = served.ok("create", json!({ "name": name, "workspace": repo, "mode": "git-worktree" }));
    assert_eq!(record["workspace"]["mode"], "git-worktree", "{record}");
    let commit = "cd /workspace && echo b > b.txt && git add b.txt && git commit -qm 'add b.txt'";
    let ran = served.ok("exec", json!({ "name": name, "command": ["sh", "-c", commit] }));
    assert_eq!(ran["exit_code"], 0, "{ran}");
    let diff = served.ok("diff", json!({ "name": name }));
    assert_eq!(diff["files"][0]["path"], "b.txt", "{diff}");
    assert!(served.ok("log", json!({ "name": name })).to_string().contains("add b.txt"));
    assert_eq!(served.ok("list", json!({}))["sandboxes"][0]["name"], name.as_str());
    let merged = served.ok("merge", json!({ "name": name }));
    assert_eq!(merged["landed"], true, "{merged}");
    assert_eq!(git(&repo, &["log", "--format=%s", "-1", "main"]), "add b.txt\n");
    served.ok("down", json!({ "name": name }));

    // A failing operation: forage's error, its code, exit code and status.
    let (status, err) = served.post("status", &json!({ "name": name }));
    assert_eq!((status, err["code"].as_str(), err["exit_code"].as_i64()), (404, Some("not-found"), Some(3)), "{err}");
    // The OpenAPI document is served, and is the checked-in one.
    let out = Command::new("curl")
        .args(["-sS", "--unix-socket", served.socket.to_str().unwrap(), "http://forage/v1/openapi.json"])
        .output()
        .unwrap();
    let served_doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let checked_in: Value = serde_json::from_str(include_str!("../../docs/openapi.json")).unwrap();
    assert_eq!(served_doc, checked_in);
    let socket = served.socket.clone();
    assert!(served.stop().success());
    assert!(!socket.exists(), "serve left its socket");
    env.assert_nothing_left_but_archives();
}

#[test]
fn bad_requests_are_refused_and_change_nothing() {
    let env = Env::new();
    let repo = repo(&env, "repo");
    let before = repo_state(&repo);
    let token_file = env.path("token");
    std::fs::write(&token_file, "a-token-of-the-tests-own-0123456789\n").unwrap();
    let token_arg = token_file.display().to_string();
    let served = Served::start(&env, &["--tcp", "127.0.0.1:0", "--token-file", &token_arg], &[]);
    let name = env.unique("http-bad");

    let big = json!({ "name": name, "workspace": repo, "task": "x".repeat(2 << 20) });
    let (status, err) = served.post("create", &big);
    assert_eq!((status, err["code"].as_str()), (413, Some("too-large")), "{err}");
    let (status, err) = served.post("create", &json!({ "name": "Not A Name", "workspace": repo }));
    assert_eq!((status, err["code"].as_str()), (400, Some("usage")), "{err}");
    assert!(err["message"].as_str().unwrap().contains("Not A Name"), "{err}");
    let (status, err) = served.post("create", &json!({ "name": name, "workspace": "/etc" }));
    assert_eq!((status, err["code"].as_str()), (403, Some("outside-roots")), "{err}");
    assert!(err["message"].as_str().unwrap().contains("--root"), "{err}");
    // A symlink under the root to a directory outside it: judged by where it leads.
    let link = env.path("to-etc");
    std::os::unix::fs::symlink("/etc", &link).unwrap();
    let (status, err) = served.post("create", &json!({ "name": name, "workspace": link }));
    assert_eq!((status, err["code"].as_str()), (403, Some("outside-roots")), "{err}");
    let (status, err) = served.post("create", &json!({ "name": name, "workspace": repo, "bogus": 1 }));
    assert_eq!(status, 400, "{err}");
    assert!(err["message"].as_str().unwrap().contains("bogus"), "{err}");
    let (status, err) = served.post("explode", &json!({}));
    assert_eq!((status, err["code"].as_str()), (404, Some("unknown-operation")), "{err}");
    let (status, _) = curl(&["--unix-socket", served.socket.to_str().unwrap(), "http://forage/v1/list"], "{not json");
    assert_eq!(status, 400);

    // TCP: the token or nothing.
    let port = tcp_port(&env);
    let url = format!("http://127.0.0.1:{port}/v1/list");
    let (status, err) = curl(&[url.as_str()], "{}");
    assert_eq!((status, err["code"].as_str()), (401, Some("unauthorized")), "{err}");
    let (status, _) = curl(&["-H", "Authorization: Bearer a-token-of-the-tests-own-012345678X", url.as_str()], "{}");
    assert_eq!(status, 401, "a wrong token");
    let (status, list) = curl(&["-H", "Authorization: Bearer a-token-of-the-tests-own-0123456789", url.as_str()], "{}");
    assert_eq!((status, list), (200, json!({ "sandboxes": [] })));
    drop(served);

    // Only loopback.
    let err = env.fails(&["serve", "--socket", env.path("other.sock").to_str().unwrap(), "--tcp", "0.0.0.0:0"], 2);
    assert!(err.contains("not a loopback address"), "{err}");
    assert_eq!(repo_state(&repo), before);
    env.assert_nothing_left();
}

/// The port `serve` said it listens on (`and on http://127.0.0.1:PORT …`).
fn tcp_port(env: &Env) -> u16 {
    let said = || std::fs::read_to_string(env.path("serve.log")).unwrap_or_default();
    assert!(eventually(30, || said().contains("and on http://127.0.0.1:")), "{}", said());
    let text = said();
    let rest = text.split("and on http://127.0.0.1:").nth(1).unwrap();
    rest.split(' ').next().unwrap().parse().unwrap()
}

#[test]
fn thirty_two_creates_at_once_all_succeed_and_leave_nothing() {
    let env = Env::new();
    let repo = repo(&env, "repo");
    let served = Served::start(&env, &[], &[]);
    let names: Vec<String> = (0..32).map(|i| env.unique(&format!("http-many-{i}"))).collect();
    std::thread::scope(|s| {
        for name in &names {
            let (served, repo) = (&served, &repo);
            s.spawn(move || {
                served
                    .ok("create", json!({ "name": name, "workspace": repo, "mode": "git-worktree", "no_start": true }))
            });
        }
    });
    let listed = served.ok("list", json!({}));
    assert_eq!(listed["sandboxes"].as_array().unwrap().len(), 32, "{listed}");
    let branches = git(&repo, &["branch", "--list", "forage-*"]);
    assert_eq!(branches.lines().count(), 32, "{branches}");
    std::thread::scope(|s| {
        for name in &names {
            let served = &served;
            s.spawn(move || served.ok("down", json!({ "name": name })));
        }
    });
    assert_eq!(git(&repo, &["branch", "--list", "forage-*"]), "");
    drop(served);
    env.assert_nothing_left_but_archives();
}

/// A client that goes away mid-create: the server cancels it, which rolls
/// back what it made. A server killed mid-create: `gc --force` cleans up.
#[test]
fn a_client_or_server_gone_mid_create_leaves_nothing_gc_cannot_clean() {
    let env = Env::new();
    let repo = repo(&env, "repo");
    let before = repo_state(&repo);
    let served = Served::start(&env, &[], &[("FORAGE_DEBUG_PAUSE_AFTER", "container")]);
    let create = |name: &str| -> Child {
        let body = json!({ "name": name, "workspace": repo, "mode": "git-worktree" }).to_string();
        Command::new("curl")
            .args(["-sS", "-X", "POST", "--data", &body, "--unix-socket", served.socket.to_str().unwrap()])
            .arg("http://forage/v1/create")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    let first = env.unique("http-gone-client");
    let mut client = create(&first);
    assert!(eventually(120, || env.containers().len() == 1), "the create did not reach its container");
    client.kill().unwrap();
    client.wait().unwrap();
    assert!(eventually(120, || env.containers().is_empty() && env.home_files().is_empty()), "not rolled back");
    assert_eq!(repo_state(&repo), before);

    let second = env.unique("http-gone-server");
    let mut client = create(&second);
    assert!(eventually(120, || env.containers().len() == 1), "the create did not reach its container");
    let mut served = served;
    served.child.kill().unwrap();
    served.child.wait().unwrap();
    client.wait().unwrap();
    assert_eq!(env.containers().len(), 1, "killed mid-create, the server left its container");
    env.ok(&["gc", "--force"]);
    env.assert_nothing_left();
    assert_eq!(repo_state(&repo), before);
}

#[test]
fn logs_stream_as_server_sent_events_until_the_agent_exits() {
    let env = Env::new();
    let templates = env.mkdir("config/forage/templates");
    std::fs::write(
        templates.join("talks.yaml"),
        "host_image: {require: [sh, sleep], tools: [sh, sleep]}\n\
         agent: {command: [sh, -c, 'echo one; echo two >&2; sleep 3; echo three']}\n",
    )
    .unwrap();
    let ws = env.mkdir("ws");
    let name = env.unique("http-logs");
    let served = Served::start(&env, &[], &[]);
    served.ok("create", json!({ "name": name, "workspace": ws, "mode": "direct", "template": "talks" }));
    let body = json!({ "name": name, "follow": true }).to_string();
    let out = Command::new("curl")
        .args(["-sSN", "-X", "POST", "--data", &body, "--unix-socket", served.socket.to_str().unwrap()])
        .arg("http://forage/v1/logs")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let events: Vec<(&str, &str)> = text
        .split("\n\n")
        .filter(|e| !e.is_empty())
        .map(|e| {
            let (event, data) = e.split_once('\n').unwrap();
            (event.trim_start_matches("event: "), data.trim_start_matches("data: "))
        })
        .collect();
    // Followed to the agent's end: its three lines (through the agent's
    // terminal, which joins the streams and ends lines with CRLF), then `end`.
    let output: String = events
        .iter()
        .filter(|(e, _)| matches!(*e, "stdout" | "stderr"))
        .map(|(_, d)| serde_json::from_str::<String>(d).unwrap())
        .collect();
    assert_eq!(output, "one\r\ntwo\r\nthree\r\n", "{text}");
    assert_eq!(events.last(), Some(&("end", "{}")), "{text}");
    let (status, err) = served.post("logs", &json!({ "name": "nobody" }));
    assert_eq!((status, err["code"].as_str()), (404, Some("not-found")), "{err}");
    served.ok("down", json!({ "name": name }));
    drop(served);
    env.assert_nothing_left();
}

/// The events of a server-sent event stream: each one's name and its data as JSON.
fn events_of(text: &str) -> Vec<(String, Value)> {
    text.split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|e| {
            let (event, data) = e.split_once('\n').unwrap_or_else(|| panic!("not an event: {e:?}"));
            let data = serde_json::from_str(data.trim_start_matches("data: ")).unwrap();
            (event.trim_start_matches("event: ").to_owned(), data)
        })
        .collect()
}

/// POSTs `body` to a streaming endpoint with curl -N, for its events as they come.
fn stream(served: &Served, op: &str, body: &Value) -> Child {
    Command::new("curl")
        .args(["-sSN", "-X", "POST", "--data", &body.to_string(), "--unix-socket", served.socket.to_str().unwrap()])
        .arg(format!("http://forage/v1/{op}"))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap()
}

/// An agent that waits for the host to create `go` in its (direct) workspace, then exits 3.
const WAITS_FOR_GO: &str = "host_image: {require: [sh, sleep], tools: [sh, sleep]}\n\
    agent: {command: [sh, -c, 'while [ ! -e /workspace/go ]; do sleep 0.2; done; exit 3']}\n";

#[test]
fn exec_and_wait_stream_as_server_sent_events() {
    let env = Env::new();
    std::fs::write(env.mkdir("config/forage/templates").join("waits.yaml"), WAITS_FOR_GO).unwrap();
    let ws = env.mkdir("ws");
    let name = env.unique("http-live");
    let served = Served::start(&env, &[], &[]);
    served.ok("create", json!({ "name": name, "workspace": ws, "mode": "direct", "template": "waits" }));

    // exec: each stream's chunks in the order written, then the exit code.
    let script =
        "echo one; sleep 1; echo two >&2; sleep 1; printf 'thr\\342\\202'; sleep 1; printf '\\254ee\\n'; exit 5";
    let out = stream(&served, "exec/stream", &json!({ "name": name, "command": ["sh", "-c", script] }))
        .wait_with_output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let mut merged: Vec<(String, Value)> = Vec::new();
    for (event, data) in events_of(&text) {
        match merged.last_mut() {
            Some((last, Value::String(so_far))) if *last == event && event != "exit" => {
                so_far.push_str(data.as_str().unwrap())
            }
            _ => merged.push((event, data)),
        }
    }
    let expected = vec![
        ("stdout".to_owned(), json!("one\n")),
        ("stderr".to_owned(), json!("two\n")),
        // A character split between two writes arrives whole.
        ("stdout".to_owned(), json!("thr€ee\n")),
        ("exit".to_owned(), json!({ "exit_code": 5, "timed_out": false, "stdout_bytes": 13, "stderr_bytes": 4 })),
    ];
    assert_eq!(merged, expected, "{text}");
    let out = stream(&served, "exec/stream", &json!({ "name": name, "command": ["sleep", "30"], "timeout_secs": 1 }))
        .wait_with_output()
        .unwrap();
    let events = events_of(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(events.last().unwrap().1["timed_out"], true, "{events:?}");

    // Refusals come before the stream, as the answering endpoints' do.
    let (status, err) = served.post("exec/stream", &json!({ "name": "nobody", "command": ["true"] }));
    assert_eq!((status, err["code"].as_str()), (404, Some("not-found")), "{err}");
    let (status, err) = served.post("exec/stream", &json!({ "name": name, "command": [] }));
    assert_eq!((status, err["code"].as_str()), (400, Some("usage")), "{err}");
    let (status, err) = served.post("wait/stream", &json!({ "names": [name, "nobody"] }));
    assert_eq!((status, err["code"].as_str()), (404, Some("not-found")), "{err}");

    // wait: progress while the agent runs (it exits once told to, after the
    // first progress event), then wait's result.
    let mut waiting =
        stream(&served, "wait/stream", &json!({ "names": [name], "until": "exited", "timeout_secs": 300 }));
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(waiting.stdout.take().unwrap()));
    let mut events = Vec::new();
    while let Some(line) = lines.next() {
        let line = line.unwrap();
        let Some(event) = line.strip_prefix("event: ") else { continue };
        let data = lines.next().unwrap().unwrap();
        let data: Value = serde_json::from_str(data.trim_start_matches("data: ")).unwrap();
        if event == "progress" && events.is_empty() {
            std::fs::write(ws.join("go"), "").unwrap();
        }
        events.push((event.to_owned(), data));
    }
    assert!(waiting.wait().unwrap().success());
    let (last, rest) = events.split_last().unwrap();
    assert_eq!(
        last,
        &("result".to_owned(), json!({ "sandbox": name, "agent": "exited", "exit_code": 3 })),
        "{events:?}"
    );
    assert!(!rest.is_empty() && rest.iter().all(|(e, _)| e == "progress"), "{events:?}");
    assert!(rest[0].1["waited_secs"].as_u64() >= Some(10), "{events:?}");
    assert!(rest[0].1["message"].as_str().unwrap().contains(&name), "{events:?}");

    served.ok("down", json!({ "name": name }));
    drop(served);
    env.assert_nothing_left();
}

/// The volumes and networks the engine under test holds labelled with this
/// test's home, by name (through its API: the docker CLI would ask Docker
/// whatever the engine under test is).
fn labelled(env: &Env) -> (Vec<String>, Vec<String>) {
    use bollard::query_parameters::ListVolumesOptions;
    let label = format!("forage.home={}", env.home.display());
    let filters = Some(HashMap::from([("label".to_owned(), vec![label.clone()])]));
    let volumes = block_on(env.docker().list_volumes(Some(ListVolumesOptions { filters }))).unwrap();
    (volumes.volumes.unwrap_or_default().into_iter().map(|v| v.name).collect(), networks_labelled(&label))
}

#[test]
fn thirty_two_jobs_at_once_all_succeed_on_one_mirror_and_leave_nothing() {
    let env = Env::new();
    std::fs::write(env.mkdir("config/forage/templates").join("job.yaml"), crate::jobs::TEMPLATE).unwrap();
    let repo = repo(&env, "repo");
    let before = repo_state(&repo);
    // Half the jobs ask for cleanup, half leave it to the server's default.
    let served = Served::start(&env, &["--cleanup-on-complete"], &[]);
    let names: Vec<String> = (0..32).map(|i| env.unique(&format!("http-job-{i}"))).collect();
    let answers: Vec<Value> = std::thread::scope(|s| {
        let calls: Vec<_> = names
            .iter()
            .enumerate()
            .map(|(i, name)| {
                let (served, repo) = (&served, &repo);
                let mut job = json!({ "name": name, "repo": repo, "template": "job", "task": name });
                if i % 2 == 0 {
                    job["cleanup"] = json!(true);
                }
                s.spawn(move || served.ok("job", job))
            })
            .collect();
        calls.into_iter().map(|c| c.join().unwrap()).collect()
    });
    let mirrors: Vec<PathBuf> =
        std::fs::read_dir(env.home.join("mirrors")).unwrap().flatten().map(|e| e.path()).collect();
    assert_eq!(mirrors.len(), 1, "{mirrors:?}");
    let mirror = &mirrors[0];
    for (name, answer) in names.iter().zip(&answers) {
        let job = &answer["job"];
        assert_eq!((job["status"].as_str(), job["exit_code"].as_i64()), (Some("done"), Some(0)), "{answer}");
        assert_eq!(job["mirror"], mirror.to_str().unwrap(), "{answer}");
        // Each job's work is on its own branch, kept in the mirror (the job's cleanup keeps it).
        assert_eq!(&git(mirror, &["show", &format!("forage-{name}:job.txt")]), name);
    }
    drop(served);

    // Nothing else is left: no container, volume or network, no sandbox
    // record or workspace, no worktree; FORAGE_HOME holds the mirror, the
    // jobs' contexts and what their cleanup archived, one each; the mirror
    // holds the source's refs and the jobs' branches; the source is as it
    // was; gc finds nothing.
    assert_eq!(env.containers(), Vec::<String>::new());
    assert_eq!(labelled(&env), (Vec::new(), Vec::new()));
    let mut kept: Vec<PathBuf> = env.home_files().into_iter().filter(|f| !f.starts_with(mirror)).collect();
    kept.sort();
    let mut expected: Vec<PathBuf> = names
        .iter()
        .flat_map(|n| [env.home.join(format!("archives/{n}.json")), env.home.join(format!("jobs/{n}/job.json"))])
        .collect();
    expected.sort();
    assert_eq!(kept, expected, "FORAGE_HOME holds more than the jobs' contexts and archives");
    let worktrees = git(mirror, &["worktree", "list", "--porcelain"]);
    assert_eq!(worktrees.lines().filter(|l| l.starts_with("worktree ")).count(), 1, "{worktrees}");
    let mut refs: Vec<String> =
        git(mirror, &["for-each-ref", "--format=%(refname)"]).lines().map(String::from).collect();
    refs.retain(|r| {
        let ours =
            |n: &String| *r == format!("refs/heads/forage-{n}") || r.starts_with(&format!("refs/forage/archive/{n}/"));
        !names.iter().any(ours)
    });
    let source: Vec<String> = git(&repo, &["for-each-ref", "--format=%(refname)"]).lines().map(String::from).collect();
    assert_eq!(refs, source, "the mirror holds more than the source's refs and the jobs' branches and archives");
    assert_eq!(repo_state(&repo), before);
    assert_eq!(env.json(&["gc", "--json"]), json!([]));
    let jobs = env.json(&["jobs", "--json"]);
    assert_eq!(jobs.as_array().unwrap().len(), 32, "{jobs}");
}

/// The "done when", through HTTP: three agents on one repository at
/// once, their diffs reviewed, the best merged; nothing on the host changes but
/// the branch it landed on (and the archives `down` keeps of the others' work).
#[test]
fn three_agents_in_parallel_over_http_the_best_merged_nothing_else_changed() {
    let env = Env::new();
    let repo = repo(&env, "repo");
    let before = crate::git::repo_state_but_archives(&repo);
    let base = git(&repo, &["rev-parse", "main"]).trim().to_owned();
    let names: Vec<String> = ["a", "b", "c"].iter().map(|n| env.unique(&format!("http-fan-{n}"))).collect();
    let served = Served::start(&env, &[], &[]);

    // Three creates in flight at once on one repository, each a client of its own.
    std::thread::scope(|s| {
        let creates: Vec<_> = names
            .iter()
            .map(|n| {
                let (served, repo) = (&served, &repo);
                s.spawn(move || served.post("create", &json!({ "name": n, "workspace": repo, "mode": "git-worktree" })))
            })
            .collect();
        for (n, made) in names.iter().zip(creates) {
            let (status, answer) = made.join().unwrap();
            assert_eq!(status, 200, "create {n}: {answer}");
        }
    });
    crate::mcp::review_and_merge_the_best(&names, |op, args| served.ok(op, args));
    assert!(served.stop().success());
    crate::mcp::only_the_best_landed(&env, &repo, &before, &base);
}
