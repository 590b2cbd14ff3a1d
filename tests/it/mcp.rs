//! `forage-ctl mcp`: a real MCP client (rmcp's, over stdio) against the built
//! binary and the real engine; and, where a test needs to say what no SDK
//! client would (a malformed request, a client that vanishes mid-call), raw
//! JSON-RPC lines on the server's stdin.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Stdio};

use rmcp::model::CallToolRequestParams;
use rmcp::service::{RunningService, ServiceError};
use rmcp::transport::TokioChildProcess;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{json, Value};

use crate::git::{git, repo, repo_state};
use crate::support::*;

type Client = RunningService<RoleClient, ()>;

/// An MCP session with `forage-ctl mcp` of this test's FORAGE_HOME.
fn connect(env: &Env) -> Client {
    connect_with(env, &[])
}

/// `connect`, the server started with `flags`.
fn connect_with(env: &Env, flags: &[&str]) -> Client {
    block_on(async {
        let args: Vec<&str> = ["mcp"].iter().chain(flags).copied().collect();
        let cmd = tokio::process::Command::from(env.cmd(&args));
        let (transport, _) = TokioChildProcess::builder(cmd).stderr(Stdio::inherit()).spawn().unwrap();
        ().serve(transport).await.expect("an MCP session with forage-ctl mcp")
    })
}

fn send(client: &Client, tool: &str, args: Value) -> Result<rmcp::model::CallToolResult, ServiceError> {
    let args = args.as_object().expect("arguments are an object").clone();
    block_on(client.call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(args)))
}

/// Calls `tool`: its structured result, `Err` holding forage's error for a
/// tool that failed (`isError`).
fn call(client: &Client, tool: &str, args: Value) -> Result<Value, Value> {
    let result = send(client, tool, args.clone()).unwrap_or_else(|e| panic!("{tool} {args}: {e}"));
    let value = result.structured_content.unwrap_or_else(|| panic!("{tool} {args}: no structured content"));
    if result.is_error == Some(true) {
        Err(value)
    } else {
        Ok(value)
    }
}

fn ok(client: &Client, tool: &str, args: Value) -> Value {
    call(client, tool, args.clone()).unwrap_or_else(|e| panic!("{tool} {args} failed: {e}"))
}

/// The JSON-RPC error a call got (and that it got one, not a result).
fn rpc_error(client: &Client, tool: &str, args: Value) -> rmcp::ErrorData {
    match send(client, tool, args.clone()) {
        Err(ServiceError::McpError(e)) => e,
        other => panic!("{tool} {args}: expected a JSON-RPC error, got {other:?}"),
    }
}

#[test]
fn tools_are_listed_with_their_input_schemas() {
    let env = Env::new();
    let client = connect(&env);
    let tools = block_on(client.list_all_tools()).unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(
        names,
        [
            "create", "list", "status", "exec", "wait", "diff", "log", "merge", "apply", "down", "job", "jobs",
            "archives"
        ]
    );
    for t in &tools {
        assert_eq!(t.input_schema["type"], "object", "{}: {:?}", t.name, t.input_schema);
        assert!(t.description.as_deref().is_some_and(|d| !d.is_empty()), "{} has no description", t.name);
    }
    let create = tools.iter().find(|t| t.name == "create").unwrap();
    let required: Vec<&str> =
        create.input_schema["required"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    assert_eq!(required, ["name", "workspace"]);
    let props = create.input_schema["properties"].as_object().unwrap();
    for field in ["template", "mode", "task", "base", "branch", "network", "env"] {
        assert!(props.contains_key(field), "create takes no {field}: {props:?}");
    }
    let exec = tools.iter().find(|t| t.name == "exec").unwrap();
    assert_eq!(exec.input_schema["properties"]["command"]["type"], "array");
    let diff = tools.iter().find(|t| t.name == "diff").unwrap();
    assert_eq!(diff.annotations.as_ref().and_then(|a| a.read_only_hint), Some(true));
    block_on(client.cancel()).unwrap();
    env.assert_nothing_left();
}

#[test]
fn create_exec_diff_merge_down_on_a_git_repository() {
    let env = Env::new();
    let repo = repo(&env, "repo");
    let name = env.unique("mcp-loop");
    let client = connect(&env);

    let record = ok(&client, "create", json!({ "name": name, "workspace": repo, "mode": "git-worktree" }));
    assert_eq!(record["name"], name.as_str(), "{record}");
    assert_eq!(record["workspace"]["mode"], "git-worktree", "{record}");
    assert_eq!(std::fs::read_to_string(env.home.join("workspaces").join(&name).join("a.txt")).unwrap(), "original\n");

    // The agent's work, through exec: a commit, then output past the cap.
    let commit = "cd /workspace && echo b > b.txt && git add b.txt && git commit -qm 'add b.txt' \
                  && head -c 3000000 /dev/zero | tr '\\0' x && echo done >&2";
    let ran = ok(&client, "exec", json!({ "name": name, "command": ["sh", "-c", commit] }));
    assert_eq!(ran["exit_code"], 0, "{}", ran["stderr"]);
    assert_eq!((ran["stdout"]["truncated"].as_bool(), ran["stdout"]["bytes"].as_u64()), (Some(true), Some(3_000_000)));
    assert_eq!(ran["stdout"]["text"].as_str().unwrap().len(), 1 << 20);
    assert_eq!((ran["stderr"]["text"].as_str(), ran["stderr"]["truncated"].as_bool()), (Some("done\n"), Some(false)));
    let failed = ok(&client, "exec", json!({ "name": name, "command": ["sh", "-c", "echo no >&2; exit 3"] }));
    assert_eq!((failed["exit_code"].as_i64(), failed["stderr"]["text"].as_str()), (Some(3), Some("no\n")));
    let slow = ok(
        &client,
        "exec",
        json!({ "name": name, "command": ["sh", "-c", "echo started; sleep 30"], "timeout_secs": 2 }),
    );
    assert_eq!((slow["timed_out"].as_bool(), slow["exit_code"].as_i64()), (Some(true), None), "{slow}");
    assert_eq!(slow["stdout"]["text"], "started\n");

    // Reviewed as `diff --json` and `log --json` show it.
    let diff = ok(&client, "diff", json!({ "name": name }));
    let files: Vec<&str> = diff["files"].as_array().unwrap().iter().map(|f| f["path"].as_str().unwrap()).collect();
    assert_eq!(files, ["b.txt"], "{diff}");
    assert_eq!(diff["files"][0]["status"], "added");
    let log = ok(&client, "log", json!({ "name": name }));
    assert!(log.to_string().contains("add b.txt"), "{log}");
    let listed = ok(&client, "list", json!({}));
    assert_eq!(listed["sandboxes"][0]["name"], name.as_str(), "{listed}");

    // Landed on the user's branch, in their checkout.
    let merged = ok(&client, "merge", json!({ "name": name }));
    assert_eq!(merged["landed"], true, "{merged}");
    assert_eq!(git(&repo, &["log", "--format=%s", "-1", "main"]), "add b.txt\n");
    assert_eq!(std::fs::read_to_string(repo.join("b.txt")).unwrap(), "b\n");

    let down = ok(&client, "down", json!({ "name": name }));
    assert_eq!(down["name"], name.as_str(), "{down}");
    // A failing tool: forage's error, with a stable code and the CLI's exit code.
    let err = call(&client, "status", json!({ "name": name })).unwrap_err();
    assert_eq!((err["code"].as_str(), err["exit_code"].as_i64()), (Some("not-found"), Some(3)), "{err}");
    assert!(err["message"].as_str().unwrap().contains(&name), "{err}");
    block_on(client.cancel()).unwrap();
    env.assert_nothing_left_but_archives();
}

#[test]
fn bad_requests_get_a_json_rpc_error_and_change_nothing() {
    let env = Env::new();
    let repo = repo(&env, "repo");
    let before = repo_state(&repo);
    let name = env.unique("mcp-bad");
    let client = connect(&env);

    let e = rpc_error(&client, "no-such-tool", json!({}));
    assert_eq!(e.code.0, -32602);
    assert!(e.message.contains("no-such-tool") && e.message.contains("create"), "{}", e.message);
    // A field the tool does not take, a missing one, a wrong type.
    let e = rpc_error(&client, "create", json!({ "name": name, "workspace": repo, "bogus": 1 }));
    assert!(e.message.contains("bogus"), "{}", e.message);
    let e = rpc_error(&client, "create", json!({ "name": name }));
    assert!(e.message.contains("workspace"), "{}", e.message);
    let e = rpc_error(&client, "exec", json!({ "name": name, "command": "ls" }));
    assert!(e.message.contains("command") || e.message.contains("sequence"), "{}", e.message);
    // forage's own checks: usage errors, with forage's error as data.
    let e = rpc_error(&client, "create", json!({ "name": "Bad Name", "workspace": repo }));
    assert!(e.message.contains("Bad Name"), "{}", e.message);
    assert_eq!(e.data.as_ref().map(|d| (d["code"].clone(), d["exit_code"].clone())), Some((json!("usage"), json!(2))));
    let e = rpc_error(&client, "create", json!({ "name": name, "workspace": "repo" }));
    assert!(e.message.contains("relative") && e.message.contains("absolute"), "{}", e.message);
    let e = rpc_error(&client, "create", json!({ "name": name, "workspace": repo, "mode": "svn" }));
    assert!(e.message.contains("svn"), "{}", e.message);
    // A workspace that is no repository fails the tool, not the protocol.
    let nowhere = env.path("nowhere");
    let err = call(&client, "create", json!({ "name": name, "workspace": nowhere })).unwrap_err();
    assert!(err["message"].as_str().unwrap().contains("nowhere"), "{err}");
    assert_eq!(ok(&client, "list", json!({}))["sandboxes"], json!([]));
    block_on(client.cancel()).unwrap();

    // What no SDK client sends: a line that is no JSON, a call without a
    // tool name, a call whose params are no object. Each is answered as
    // JSON-RPC 2.0 asks, and the server goes on.
    let mut raw = RawSession::start(&env, &[]);
    raw.line("this is not json");
    let parse = raw.until(|m| m["id"].is_null());
    assert_eq!(parse["error"]["code"], -32700, "{parse}");
    raw.line(r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"arguments":{}}}"#);
    raw.line(r#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":5}"#);
    raw.line(r#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"list","arguments":{}}}"#);
    let seven = raw.answer(7);
    assert!(seven["error"]["code"].as_i64().is_some(), "{seven}");
    assert_eq!(raw.answer(9)["error"]["code"], -32600);
    assert_eq!(raw.answer(8)["result"]["structuredContent"]["sandboxes"], json!([]));
    raw.close();

    assert_eq!(repo_state(&repo), before);
    env.assert_nothing_left();
}

/// A client that goes away while `create` runs: the server cancels the call,
/// which rolls back everything it had made, and then exits; `gc` finds nothing.
#[test]
fn a_client_that_disconnects_mid_create_leaves_nothing() {
    let env = Env::new();
    let repo = repo(&env, "repo");
    let before = repo_state(&repo);
    for step in ["record", "container"] {
        let name = env.unique(&format!("mcp-gone-{step}"));
        let mut raw = RawSession::start(&env, &[("FORAGE_DEBUG_PAUSE_AFTER", step)]);
        let create = json!({
            "jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {
                "name": "create",
                "arguments": { "name": name, "workspace": repo, "mode": "git-worktree" },
                "_meta": { "progressToken": "up-1" }
            }
        });
        raw.line(&create.to_string());
        // Progress reaches the client while the call runs, up to the pause.
        raw.until(|m| {
            m["method"] == "notifications/progress"
                && m["params"]["progressToken"] == "up-1"
                && m["params"]["message"].as_str().is_some_and(|s| s.contains(&format!("paused after {step}")))
        });
        // Something was made for the rollback to undo.
        assert!(!env.home_files().is_empty(), "{step}: nothing made yet");
        if step == "container" {
            assert_eq!(env.containers().len(), 1, "{step}");
        }
        raw.close();
        let status = raw.wait();
        assert!(status.success(), "{step}: the server exited with {status}");
        // Rolled back by the server itself, before gc.
        env.assert_nothing_left();
        let gc = env.json(&["gc", "--json"]);
        assert!(!gc.to_string().contains(&name), "{step}: gc found what the call left: {gc}");
        assert_eq!(repo_state(&repo), before, "{step}");
    }
}

/// `forage-ctl mcp` spoken to line by line.
struct RawSession {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    /// Messages read while looking for another.
    seen: Vec<Value>,
}

impl RawSession {
    /// Starts the server and completes the MCP handshake.
    fn start(env: &Env, vars: &[(&str, &str)]) -> Self {
        let mut cmd = env.cmd(&["mcp"]);
        cmd.envs(vars.iter().copied()).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::inherit());
        let mut child = cmd.spawn().unwrap();
        let (stdin, stdout) = (child.stdin.take(), BufReader::new(child.stdout.take().unwrap()));
        let mut raw = RawSession { child, stdin, stdout, seen: Vec::new() };
        let init = json!({
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": { "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": { "name": "it", "version": "0" } }
        });
        raw.line(&init.to_string());
        raw.answer(1);
        raw.line(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
        raw
    }

    fn line(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("the session is open");
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
    }

    /// The first message that matches, of those read before (answers need
    /// not come in the order asked) or read now; panics if the server closes first.
    fn until(&mut self, wanted: impl Fn(&Value) -> bool) -> Value {
        if let Some(at) = self.seen.iter().position(&wanted) {
            return self.seen.remove(at);
        }
        loop {
            let mut line = String::new();
            if self.stdout.read_line(&mut line).unwrap() == 0 {
                panic!("the server closed stdout; it had sent {:?}", self.seen);
            }
            let message: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
            if wanted(&message) {
                return message;
            }
            self.seen.push(message);
        }
    }

    fn answer(&mut self, id: u64) -> Value {
        self.until(|m| m["id"] == id)
    }

    /// The client goes away: its end of stdin closes.
    fn close(&mut self) {
        self.stdin.take();
    }

    fn wait(mut self) -> std::process::ExitStatus {
        self.close();
        self.exited()
    }

    /// Waits for the server to exit, the session left as it is.
    fn exited(&mut self) -> std::process::ExitStatus {
        let mut status = None;
        assert!(eventually(180, || {
            status = self.child.try_wait().unwrap();
            status.is_some()
        }));
        status.unwrap()
    }
}

impl Drop for RawSession {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_job_through_mcp_keeps_its_context_after_cleanup() {
    let env = Env::new();
    std::fs::write(env.mkdir("config/forage/templates").join("job.yaml"), crate::jobs::TEMPLATE).unwrap();
    let repo = repo(&env, "repo");
    let name = env.unique("mcp-job");
    let client = connect(&env);
    let args = json!({ "name": name, "repo": repo, "template": "job", "task": "the task", "cleanup": true });
    let done = ok(&client, "job", args);
    let job = &done["job"];
    assert_eq!((job["status"].as_str(), job["exit_code"].as_i64()), (Some("done"), Some(0)), "{done}");
    assert_eq!(job["result"]["commits"][0]["summary"], "job work", "{done}");
    // After its sandbox went: through `status` and `jobs`.
    let status = ok(&client, "status", json!({ "name": name }));
    assert_eq!((status["job"]["task"].as_str(), status["job"]["sandbox"].as_bool()), (Some("the task"), Some(false)));
    let jobs = ok(&client, "jobs", json!({}));
    assert_eq!(jobs["jobs"][0]["name"], name.as_str(), "{jobs}");
    // A repository given by a relative path is refused, with nothing made.
    let e = rpc_error(&client, "job", json!({ "name": "other", "repo": "repo" }));
    assert!(e.message.contains("absolute"), "{}", e.message);
    assert_eq!(ok(&client, "jobs", json!({}))["jobs"].as_array().unwrap().len(), 1);
    block_on(client.cancel()).unwrap();
    assert_eq!(env.containers(), Vec::<String>::new());

    // A server started with --cleanup-on-complete cleans up a job that does
    // not say; one that says `cleanup: false` keeps its sandbox.
    let client = connect_with(&env, &["--cleanup-on-complete"]);
    let (cleaned, kept) = (env.unique("mcp-job-default"), env.unique("mcp-job-kept"));
    let done = ok(&client, "job", json!({ "name": cleaned, "repo": repo, "template": "job", "task": "t" }));
    assert_eq!(
        (done["job"]["status"].as_str(), done["job"]["sandbox"].as_bool()),
        (Some("done"), Some(false)),
        "{done}"
    );
    let up =
        ok(&client, "job", json!({ "name": kept, "repo": repo, "template": "job", "task": "t", "cleanup": false }));
    assert_eq!((up["job"]["status"].as_str(), up["job"]["sandbox"].as_bool()), (Some("running"), Some(true)), "{up}");
    assert_eq!(env.containers().len(), 1);
    ok(&client, "down", json!({ "name": kept }));
    block_on(client.cancel()).unwrap();
    assert_eq!(env.containers(), Vec::<String>::new());
}

/// The issue's "done when": an orchestrator runs three agents on one
/// repository at once, reviews their diffs, and merges the best; nothing on
/// the host changes but the branch it landed on (and the archives `down`
/// keeps of the others' work).
#[test]
fn three_agents_in_parallel_the_best_merged_nothing_else_changed() {
    let env = Env::new();
    let repo = repo(&env, "repo");
    let before = crate::git::repo_state_but_archives(&repo);
    let base = git(&repo, &["rev-parse", "main"]).trim().to_owned();
    let names: Vec<String> = ["a", "b", "c"].iter().map(|n| env.unique(&format!("mcp-fan-{n}"))).collect();
    let client = connect(&env);

    // Three creates in flight at once on one repository.
    let creates = names.iter().map(|n| {
        let args = json!({ "name": n, "workspace": repo, "mode": "git-worktree" });
        client.call_tool(CallToolRequestParams::new("create").with_arguments(args.as_object().unwrap().clone()))
    });
    for (n, made) in names.iter().zip(block_on(futures_util::future::join_all(creates))) {
        let made = made.unwrap_or_else(|e| panic!("create {n}: {e}"));
        assert_ne!(made.is_error, Some(true), "create {n}: {:?}", made.structured_content);
    }
    review_and_merge_the_best(&names, |op, args| ok(&client, op, args));
    block_on(client.cancel()).unwrap();
    only_the_best_landed(&env, &repo, &before, &base);
}

/// The fan-out's review, through `call` (an MCP tool or an HTTP endpoint):
/// each sandbox of `names` commits an answer of one more line than the last,
/// the diffs are compared, the shortest is squash-merged, and all go down.
pub fn review_and_merge_the_best(names: &[String], call: impl Fn(&str, Value) -> Value) {
    for (i, n) in names.iter().enumerate() {
        let lines: Vec<String> = (1..=i + 1).map(|k| k.to_string()).collect();
        let work = format!(
            "cd /workspace && printf '{}\\n' > answer.txt && git add . && git commit -qm 'answer {i}'",
            lines.join("\\n")
        );
        assert_eq!(call("exec", json!({ "name": n, "command": ["sh", "-c", work] }))["exit_code"], 0);
    }
    // Reviewed: the shortest answer is the best.
    let sizes: Vec<u64> =
        names.iter().map(|n| call("diff", json!({ "name": n }))["files"][0]["additions"].as_u64().unwrap()).collect();
    assert_eq!(sizes, [1, 2, 3]);
    let merged = call("merge", json!({ "name": names[0], "how": "squash", "message": "the best answer" }));
    assert_eq!(merged["landed"], true, "{merged}");
    for n in names {
        call("down", json!({ "name": n }));
    }
}

/// After the fan-out: `main` holds the best answer and nothing else changed
/// (refs and worktrees as `before`, but for main at the landed commit from `base`).
pub fn only_the_best_landed(env: &Env, repo: &std::path::Path, before: &str, base: &str) {
    assert_eq!(git(repo, &["log", "--format=%s", "main"]), "the best answer\ninitial\n");
    assert_eq!(std::fs::read_to_string(repo.join("answer.txt")).unwrap(), "1\n");
    let main = git(repo, &["rev-parse", "main"]).trim().to_owned();
    assert_eq!(crate::git::repo_state_but_archives(repo), before.replace(base, &main));
    assert_eq!(git(repo, &["status", "--porcelain"]), "");
    env.assert_nothing_left_but_archives();
}

/// A server killed (SIGKILL) in the middle of `create` leaves what a killed
/// `up` leaves, which `gc --force` cleans up.
#[test]
fn a_server_killed_mid_create_leaves_nothing_gc_cannot_clean() {
    let env = Env::new();
    let repo = repo(&env, "repo");
    let before = crate::git::repo_state_but_archives(&repo);
    let name = env.unique("mcp-killed");
    let mut raw = RawSession::start(&env, &[("FORAGE_DEBUG_KILL_AFTER", "container")]);
    let create = json!({
        "jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": { "name": "create", "arguments": { "name": name, "workspace": repo, "mode": "git-worktree" } }
    });
    raw.line(&create.to_string());
    // The client stays connected: the server dies by itself, after the container step.
    let status = raw.exited();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(9), "{status}");
    assert_eq!(env.containers().len(), 1, "killed after the container was made");
    env.ok(&["gc", "--force"]);
    env.assert_nothing_left_but_archives();
    assert_eq!(crate::git::repo_state_but_archives(&repo), before);
}

/// `wait` tells a client that asked for progress how long it has waited,
/// then answers `timed-out` when its timeout passes.
#[test]
fn wait_reports_progress_until_its_timeout() {
    let env = Env::new();
    let repo = repo(&env, "repo");
    let name = env.unique("mcp-wait");
    let mut raw = RawSession::start(&env, &[]);
    let call = |id: u64, tool: &str, args: Value, token: Option<&str>| {
        let mut params = json!({ "name": tool, "arguments": args });
        if let Some(t) = token {
            params["_meta"] = json!({ "progressToken": t });
        }
        json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params }).to_string()
    };
    raw.line(&call(2, "create", json!({ "name": name, "workspace": repo }), None));
    assert_eq!(raw.answer(2)["result"]["isError"], false);
    let wait = json!({ "names": [name], "until": "exited", "timeout_secs": 12 });
    raw.line(&call(3, "wait", wait, Some("w")));
    let progress = raw.until(|m| m["method"] == "notifications/progress");
    assert_eq!(progress["params"]["progressToken"], "w");
    assert!(progress["params"]["message"].as_str().unwrap().contains(&format!("waiting for {name}")), "{progress}");
    assert_eq!(raw.answer(3)["result"]["structuredContent"]["agent"], "timed-out");
    raw.line(&call(4, "down", json!({ "name": name }), None));
    assert_eq!(raw.answer(4)["result"]["isError"], false);
    assert!(raw.wait().success());
    env.assert_nothing_left_but_archives();
}
