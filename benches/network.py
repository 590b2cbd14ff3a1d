#!/usr/bin/env python3
"""The egress proxy against the direct path, in one run. Called by
benches/network.sh, which builds forage-ctl first.

A test server (HTTPS, HTTP/1.1 keep-alive, in a container) sits on the
proxy's outside network as bench.egress.test and on the default bridge. Two
sandboxes of one image run the same curl commands: one `restricted`, whose
only way out is the proxy; one `full`, on the bridge, reaching the server
directly. A third side is the floor any relay pays: the restricted sandbox's
requests through a plain TCP relay (socat, no checks) in a container on the
same two networks as the proxy, in its place. The sides alternate, round by
round. Every run's output is checked (every request answered 200 with the
server's body) before its times count. The proxy's own CPU time is read
around its side's runs. Then 99 more restricted sandboxes are made, and the
proxy's memory is read with 1 and with 100. Results go to
RESULTS/network.json; report.py turns them into docs/benchmarks.md's
egress-proxy section.
"""
import concurrent.futures
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile

F = os.environ["FORAGE_CTL"]
WORK = os.environ["WORK"]
RESULTS = os.path.join(WORK, "results")
REQUESTS = int(os.environ.get("REQUESTS", "1000"))
ROUNDS = int(os.environ.get("ROUNDS", "10"))
NEW_CONNECTIONS = int(os.environ.get("NEW_CONNECTIONS", "200"))
BULK_MIB = int(os.environ.get("BULK_MIB", "256"))
BULK_RUNS = int(os.environ.get("BULK_RUNS", "5"))
SANDBOXES = int(os.environ.get("SANDBOXES", "100"))
IMAGE = os.environ.get("SERVER_IMAGE", "forage-test-bookworm:2")
LABEL = "forage-bench=1"
HOST = "bench.egress.test"
SERVER = "forage-bench-egress-server"
RELAY = "forage-bench-egress-relay"
# SERVER_IMAGE with socat, made once from Debian's mirror and kept, as
# SERVER_IMAGE is.
RELAY_IMAGE = "forage-bench-relay:1"

TEMPLATE = f"""description: egress proxy benchmark
host_image:
  require: [bash, curl, date]
  tools: [bash, sh, curl, date, cat, sleep]
agent:
  command: [sleep, infinity]
network_allow: [{HOST}]
"""

# HTTPS with keep-alive; each answer one write (no Nagle stall of a second
# small segment on either side); /big is BULK_MIB MiB.
SERVER_PY = r"""
import http.server, socket, ssl, subprocess, sys
MIB = BULK_MIB_VALUE
subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=HOST",
                "-keyout", "/tmp/key.pem", "-out", "/tmp/cert.pem", "-days", "1"], check=True, capture_output=True)
CHUNK = b"x" * (1 << 20)
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def setup(self):
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    def log_message(self, *a):
        pass
    def do_GET(self):
        if self.path == "/big":
            self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % (MIB * len(CHUNK)))
            for _ in range(MIB):
                self.wfile.write(CHUNK)
        else:
            self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n")
s = http.server.ThreadingHTTPServer(("", 443), H)
c = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
c.load_cert_chain("/tmp/cert.pem", "/tmp/key.pem")
s.socket = c.wrap_socket(s.socket, server_side=True)
print("listening", flush=True)
s.serve_forever()
""".replace("/CN=HOST", f"/CN={HOST}").replace("BULK_MIB_VALUE", str(BULK_MIB))


class Failed(Exception):
    pass


def sh(cmd, check=True):
    out = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True)
    if check and out.returncode != 0:
        raise Failed(f"`{cmd[:300]}` exited {out.returncode}:\n{out.stdout[-2000:]}{out.stderr[-2000:]}")
    return out.stdout


def forage(args, check=True):
    return sh(f"{shlex.quote(F)} {args}", check)


def inside(name, script):
    return forage(f"exec {name} -- bash -c {shlex.quote(script)}")


def up(name, workspace, network):
    forage(f"-q up {name} --workspace {workspace} -t bench-net --network {network}")


def start_server(outside):
    script = os.path.join(WORK, "server.py")
    with open(script, "w") as f:
        f.write(SERVER_PY)
    sh(f"docker run -d --name {SERVER} --label {LABEL} --network {outside} --network-alias {HOST} "
       f"-v {script}:/server.py:ro {IMAGE} python3 -u /server.py")
    sh(f"docker network connect bridge {SERVER}")
    for _ in range(600):
        if "listening" in sh(f"docker logs {SERVER} 2>&1", check=False):
            break
        sh("sleep 0.1")
    else:
        raise Failed("the server did not start: " + sh(f"docker logs {SERVER} 2>&1", check=False))
    return sh(f"docker inspect -f '{{{{.NetworkSettings.Networks.bridge.IPAddress}}}}' {SERVER}").strip()


def start_relay(sandbox_network, outside):
    """The plain relay on the restricted sandbox's network and the proxy's
    outside one, as the proxy is: its address on the sandbox's network."""
    if subprocess.run(["docker", "image", "inspect", RELAY_IMAGE], capture_output=True).returncode != 0:
        print(f"==> making {RELAY_IMAGE} (socat from Debian's mirror)", flush=True)
        build = f"{RELAY}-build"
        sh(f"docker rm -f {build} >/dev/null 2>&1; docker run --name {build} --label {LABEL} {IMAGE} "
           "bash -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq socat'")
        sh(f"docker commit {build} {RELAY_IMAGE} && docker rm {build}")
    sh(f"docker run -d --name {RELAY} --label {LABEL} --network {sandbox_network} {RELAY_IMAGE} "
       f"socat TCP-LISTEN:443,fork,reuseaddr,nodelay TCP:{HOST}:443,nodelay")
    sh(f"docker network connect {outside} {RELAY}")
    return sh(f"docker inspect -f '{{{{(index .NetworkSettings.Networks \"{sandbox_network}\").IPAddress}}}}' {RELAY}").strip()


def batch(name, curl_args, n, extra=""):
    """`n` GETs of / in one curl (one connection unless told otherwise):
    each request's time, and the batch's wall time inside the sandbox."""
    script = (f"s=$(date +%s%N); curl -sk {extra} -o /dev/null -w '%{{http_code}} %{{time_total}}\\n' "
              f"{curl_args} 'https://{HOST}/r[1-{n}]'; e=$(date +%s%N); echo wall $(( (e - s) / 1000 ))")
    lines = inside(name, script).split("\n")
    times = [float(l.split()[1]) for l in lines if l and not l.startswith("wall")]
    codes = {l.split()[0] for l in lines if l and not l.startswith("wall")}
    if len(times) != n or codes != {"200"}:
        raise Failed(f"{name}: {len(times)} of {n} requests answered, codes {codes}")
    wall = int(next(l for l in lines if l.startswith("wall")).split()[1]) / 1e6
    return times, wall


def bulk(name, curl_args):
    out = inside(name, f"curl -sk -o /dev/null -w '%{{http_code}} %{{size_download}} %{{speed_download}}' "
                       f"{curl_args} https://{HOST}/big").split()
    if out[0] != "200" or int(out[1]) != BULK_MIB << 20:
        raise Failed(f"{name}: the bulk download failed: {out}")
    return float(out[2]) / (1 << 20)


def proxy_rss(proxy):
    """The proxy container's processes' resident memory, KiB."""
    rows = sh(f"docker top {proxy} -eo pid,rss").split("\n")[1:]
    return sum(int(r.split()[1]) for r in rows if r.strip())


def proxy_cpu_ns(proxy):
    """The CPU time the proxy container's processes have had, every thread's,
    in ns (the scheduler's own count: /proc/PID/task/*/schedstat)."""
    total = 0
    for pid in sh(f"docker top {proxy} -eo pid").split()[1:]:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                total += int(f.read().split()[0])
    return total


def measure(proxied, direct, resolve, relayed, proxy):
    sides = {"proxy": (proxied, ""), "relay": (proxied, relayed), "direct": (direct, resolve)}
    r = {side: {"times": [], "wall": 0.0, "new": [], "bulk": []} for side in sides}
    # The proxy's own CPU time over the kept-alive batches and the downloads
    # (what it takes from the machine, whatever the noise of the timings).
    r["proxy_cpu"] = {"kept_alive_ns": 0, "kept_alive_requests": 0, "bulk_ns": 0, "bulk_mib": 0}
    cpu = r["proxy_cpu"]
    for side, (name, args) in sides.items():  # warm-up: connections, caches
        batch(name, args, 20)
    per_round = REQUESTS // ROUNDS
    for _ in range(ROUNDS):
        for side, (name, args) in sides.items():
            before = proxy_cpu_ns(proxy)
            times, wall = batch(name, args, per_round)
            if side == "proxy":
                cpu["kept_alive_ns"] += proxy_cpu_ns(proxy) - before
                cpu["kept_alive_requests"] += per_round
            r[side]["times"] += times
            r[side]["wall"] += wall
            if side == "relay":  # socat forks for each connection: no floor for new ones
                continue
            new, _ = batch(name, args, NEW_CONNECTIONS // ROUNDS, extra="-H 'Connection: close'")
            r[side]["new"] += new
    for _ in range(BULK_RUNS):
        for side, (name, args) in sides.items():
            before = proxy_cpu_ns(proxy)
            r[side]["bulk"].append(bulk(name, args))
            if side == "proxy":
                cpu["bulk_ns"] += proxy_cpu_ns(proxy) - before
                cpu["bulk_mib"] += BULK_MIB
    return r


def many(names, workspace):
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda n: up(n, workspace, "restricted"), names))
    for n in names[:10]:  # each is served: one request from ten of them
        batch(n, "", 1)


def main():
    os.makedirs(RESULTS, exist_ok=True)
    templates = os.path.join(os.environ["XDG_CONFIG_HOME"], "forage", "templates")
    os.makedirs(templates, exist_ok=True)
    with open(os.path.join(templates, "bench-net.yaml"), "w") as f:
        f.write(TEMPLATE)
    workspace = tempfile.mkdtemp(dir=WORK)
    print("==> two sandboxes: nb-proxy (restricted), nb-direct (full)", flush=True)
    up("nb-proxy", workspace, "restricted")
    up("nb-direct", workspace, "full")
    status = json.loads(forage("status nb-proxy --json"))
    outside, proxy = status["network"]["outside_network"], status["network"]["proxy"]
    resolve = f"--resolve {HOST}:443:{start_server(outside)}"
    # Past the sandbox's proxy settings, straight to the relay's address.
    relayed = f"--noproxy '*' --resolve {HOST}:443:{start_relay(status['network']['sandbox_network'], outside)}"
    rss_idle = proxy_rss(proxy)
    print(f"==> {REQUESTS} keep-alive requests, {NEW_CONNECTIONS} new connections and {BULK_RUNS} x {BULK_MIB} MiB each side", flush=True)
    r = measure("nb-proxy", "nb-direct", resolve, relayed, proxy)
    rss_one = proxy_rss(proxy)
    print(f"==> {SANDBOXES - 1} more restricted sandboxes", flush=True)
    many([f"nb-{i}" for i in range(2, SANDBOXES + 1)], workspace)
    r["memory"] = {"idle_1": rss_idle, "after_traffic_1": rss_one, f"with_{SANDBOXES}": proxy_rss(proxy), "sandboxes": SANDBOXES}
    r["load"] = os.getloadavg()[0]
    r["settings"] = {"requests": REQUESTS, "rounds": ROUNDS, "new_connections": NEW_CONNECTIONS, "bulk_mib": BULK_MIB, "bulk_runs": BULK_RUNS}
    with open(os.path.join(RESULTS, "network.json"), "w") as f:
        json.dump(r, f)
    for side in ("proxy", "relay", "direct"):
        t = r[side]
        new = f"new connection {statistics.median(t['new']) * 1000:.2f} ms, " if t["new"] else ""
        print(f"{side}: median {statistics.median(t['times']) * 1000:.3f} ms, {len(t['times']) / t['wall']:.0f} req/s, "
              f"{new}bulk {statistics.median(t['bulk']):.0f} MiB/s")
    c = r["proxy_cpu"]
    print(f"proxy CPU: {c['kept_alive_ns'] / c['kept_alive_requests'] / 1000:.1f} µs a kept-alive request (its curl "
          f"start-up and handshake included), {c['bulk_ns'] / c['bulk_mib'] / 1000:.1f} µs a MiB downloaded")
    print(f"proxy RSS: {r['memory']}")


if __name__ == "__main__":
    try:
        main()
    except Failed as e:
        print(f"benchmark failed: {e}", file=sys.stderr)
        sys.exit(1)
