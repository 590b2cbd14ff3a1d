#!/usr/bin/env python3
"""forage as a service against the CLI, in one run. Called by
benches/service.sh, which builds forage-ctl first.

  create  time from request to a running sandbox: a long-lived
          `forage-ctl mcp` (a minimal JSON-RPC client over its stdio) and a
          long-lived `forage-ctl serve` (HTTP over its unix socket), against
          the CLI's `up`, on the same repository, image and template; the
          three sides alternate run by run.
  jobs    32 jobs at once through HTTP (`POST /v1/job`, one thread each)
          against 32 CLI `up --repo … --job` one after another; the sides
          alternate round by round.
  memory  the RSS of a fresh `serve` with 100 sandboxes: idle, and after a `list`.

After every timed run the side is checked, untimed, to have done the whole
job (every container running, its record, branch and worktree there, each
job's context `running`); a side that did not stops the benchmark with an
error. Results go to RESULTS/service.json; report.py writes them into
docs/benchmarks.md.
"""
import http.client
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time

F = os.environ["FORAGE_CTL"]
WORK = os.environ["WORK"]
HOME = os.environ["FORAGE_HOME"]
RESULTS = os.path.join(WORK, "results")
RUNS = int(os.environ.get("RUNS", "10"))
JOBS = int(os.environ.get("JOBS", "32"))
JOB_RUNS = int(os.environ.get("JOB_RUNS", "3"))
SANDBOXES = int(os.environ.get("SANDBOXES", "100"))
SOCKET = os.path.join(WORK, "forage.sock")


class Failed(Exception):
    pass


def run(argv, check=True):
    out = subprocess.run(argv, capture_output=True, text=True)
    if check and out.returncode != 0:
        raise Failed(f"`{' '.join(argv)}` exited {out.returncode}:\n{out.stdout[-2000:]}{out.stderr[-2000:]}")
    return out.stdout


def attempt(argv):
    """A cleanup step: tried, its failure ignored (the next step still runs)."""
    subprocess.run(argv, capture_output=True)


def make_repo(path, files=50):
    run(["git", "init", "-q", "-b", "main", path])
    for i in range(files):
        with open(os.path.join(path, f"f{i}.txt"), "w") as f:
            f.write(f"file {i}\n" * 3)
    run(["git", "-C", path, "add", "-A"])
    run(["git", "-C", path, "-c", "user.name=bench", "-c", "user.email=bench@example.com", "commit", "-qm", "bench repo"])


# --- the clients ---------------------------------------------------------------

class UnixHTTP(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("forage", timeout=600)
        self.socket_path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(self.socket_path)


def post(op, body):
    """One request to `serve`, on a connection of its own (as curl makes one)."""
    conn = UnixHTTP(SOCKET)
    try:
        conn.request("POST", f"/v1/{op}", json.dumps(body), {"Content-Type": "application/json"})
        answer = conn.getresponse()
        data = answer.read()
    finally:
        conn.close()
    if answer.status != 200:
        raise Failed(f"POST /v1/{op} {body}: {answer.status} {data[:2000]!r}")
    return json.loads(data)


class Mcp:
    """A minimal MCP client: JSON-RPC, one message a line, over the server's stdio."""

    def __init__(self):
        self.proc = subprocess.Popen([F, "mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.next_id = 0
        self.request("initialize", {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}})
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def send(self, message):
        self.proc.stdin.write(json.dumps(message) + "\n")
        self.proc.stdin.flush()

    def request(self, method, params):
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise Failed(f"forage-ctl mcp closed its stdout during {method}")
            message = json.loads(line)
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise Failed(f"{method}: {message['error']}")
                return message["result"]

    def call(self, tool, arguments):
        result = self.request("tools/call", {"name": tool, "arguments": arguments})
        if result.get("isError"):
            raise Failed(f"{tool} {arguments}: {result.get('structuredContent')}")
        return result["structuredContent"]

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def start_serve():
    log = open(os.path.join(WORK, "serve.log"), "a")
    proc = subprocess.Popen([F, "serve", "--socket", SOCKET, "--root", WORK], stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    for _ in range(600):
        if os.path.exists(SOCKET):
            return proc
        time.sleep(0.1)
    raise Failed("serve did not listen")


def stop_serve(proc):
    proc.terminate()
    proc.wait(timeout=120)


def rss_kib(pid, field="VmRSS"):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise Failed(f"no {field} for {pid}")


# --- what each side must have done -------------------------------------------

def running(names):
    out = run(["docker", "ps", "--format", "{{.Names}}"]).split()
    missing = [n for n in names if f"forage-{n}" not in out]
    if missing:
        raise Failed(f"containers not running: {missing}")


def up_done(repo, names):
    """Each sandbox whole: its container running, its record, branch and worktree."""
    running(names)
    for n in names:
        status = json.loads(run([F, "status", n, "--json"]))
        if status.get("record", {}).get("name") != n:
            raise Failed(f"no record of {n}: {status}")
    heads = run(["git", "-C", repo, "for-each-ref", "--format=%(refname:short)", "refs/heads"]).split()
    missing = [n for n in names if f"forage-{n}" not in heads]
    if missing:
        raise Failed(f"branches missing in {repo}: {missing}")
    trees = run(["git", "-C", repo, "worktree", "list", "--porcelain"])
    missing = [n for n in names if f"worktree {os.path.realpath(os.path.join(HOME, 'workspaces', n))}" not in trees]
    if missing:
        raise Failed(f"worktrees missing in {repo}: {missing}")


def jobs_running(names):
    running(names)
    contexts = {j["name"]: j for j in json.loads(run([F, "jobs", "--json"]))}
    wrong = [n for n in names if contexts.get(n, {}).get("status") != "running"]
    if wrong:
        raise Failed(f"jobs not running: {[(n, contexts.get(n, {}).get('status')) for n in wrong]}")


def down_all():
    attempt([F, "down", "--all", "--discard", "-q"])


def forget_jobs(names):
    for n in names:
        shutil.rmtree(os.path.join(HOME, "jobs", n), ignore_errors=True)


# --- the rows -------------------------------------------------------------------

def create_row(repo, mcp):
    print(f"==> create: CLI `up` vs HTTP vs MCP, {RUNS} runs each (and a warm-up)", flush=True)
    body = lambda n: {"name": n, "workspace": repo, "mode": "git-worktree"}
    sides = {
        "cli": lambda n: run([F, "up", n, "--git-worktree", repo, "-q"]),
        "http": lambda n: post("create", body(n)),
        "mcp": lambda n: mcp.call("create", body(n)),
    }
    times = {side: [] for side in sides}
    for i in range(RUNS + 1):
        for side, create in sides.items():
            name = f"{side}{i}"
            start = time.perf_counter()
            try:
                create(name)
                took = time.perf_counter() - start
                up_done(repo, [name])
            except Failed as e:
                down_all()
                sys.exit(f"benchmark create, {side} side, run {i + 1}: {e}")
            attempt([F, "down", name, "--discard", "-q"])
            if i > 0:
                times[side].append(took)
    for side, ts in times.items():
        print(f"    {side}: median {statistics.median(ts) * 1000:.0f} ms", flush=True)
    return times


def jobs_row(repo):
    print(f"==> jobs: {JOBS} at once through HTTP vs {JOBS} CLI `up --job` one after another, {JOB_RUNS} rounds", flush=True)
    # The mirror first, so that every timed job fetches it and none clones it.
    run([F, "up", "mirror", "--repo", repo, "--job", "-q"])
    run([F, "down", "mirror", "--discard", "-q"])
    forget_jobs(["mirror"])

    def concurrent(names):
        failures = []

        def one(n):
            try:
                post("job", {"name": n, "repo": repo})
            except Failed as e:
                failures.append(str(e))

        threads = [threading.Thread(target=one, args=(n,)) for n in names]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if failures:
            raise Failed(f"{len(failures)} of {len(names)} jobs failed, the first: {failures[0]}")

    def sequential(names):
        for n in names:
            run([F, "up", n, "--repo", repo, "--job", "-q"])

    times = {"http": [], "cli": []}
    for r in range(JOB_RUNS):
        for side, make in [("http", concurrent), ("cli", sequential)]:
            names = [f"{side}-j{r}-{i}" for i in range(JOBS)]
            start = time.perf_counter()
            try:
                make(names)
                took = time.perf_counter() - start
                jobs_running(names)
            except Failed as e:
                down_all()
                sys.exit(f"benchmark jobs, {side} side, round {r + 1}: {e}")
            down_all()
            forget_jobs(names)
            times[side].append(took)
            print(f"    {side}, round {r + 1}: {took:.1f} s", flush=True)
    return times


def memory_row(repo):
    print(f"==> memory: a fresh serve, then {SANDBOXES} sandboxes", flush=True)
    proc = start_serve()
    try:
        post("list", {})
        memory = {"sandboxes": SANDBOXES, "started": rss_kib(proc.pid)}
        # Made by the CLI, so that the figures are what serve holds for
        # sandboxes it only knows from FORAGE_HOME and the engine. Ten run an
        # agent, as in the list rows of benches/lifecycle.sh.
        names = [f"m{i}" for i in range(SANDBOXES)]
        for i, n in enumerate(names):
            run([F, "up", n, "--git-worktree", repo, "-q", *([] if i < 10 else ["--no-start"])])
        time.sleep(2)
        memory["idle"] = rss_kib(proc.pid)
        listed = post("list", {})["sandboxes"]
        if sorted(s["name"] for s in listed) != sorted(names):
            raise Failed(f"list answered {len(listed)} sandboxes, not the {SANDBOXES} made")
        memory["after_list"] = rss_kib(proc.pid)
        memory["peak"] = rss_kib(proc.pid, "VmHWM")
    finally:
        stop_serve(proc)
    down_all()
    return memory


def main():
    os.makedirs(RESULTS, exist_ok=True)
    repo = os.path.join(WORK, "repo")
    make_repo(repo)
    # The image made, and the engine warm, before anything is timed.
    run([F, "up", "warm", "--git-worktree", repo, "-q"])
    run([F, "down", "warm", "--discard", "-q"])
    results = {}
    try:
        serve = start_serve()
        mcp = Mcp()
        try:
            results["create"] = create_row(repo, mcp)
            results["jobs"] = jobs_row(repo)
        finally:
            mcp.close()
            stop_serve(serve)
        results["memory"] = memory_row(repo)
    except Failed as e:
        down_all()
        sys.exit(f"benchmark: {e}")
    results["settings"] = {"runs": RUNS, "jobs": JOBS, "job_runs": JOB_RUNS}
    results["load"] = os.getloadavg()[0]
    with open(os.path.join(RESULTS, "service.json"), "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main()
