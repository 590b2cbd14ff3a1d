#!/usr/bin/env python3
"""forage-ctl against the raw floor doing the same work, on the same repository and
image, in one run. Called by benches/lifecycle.sh, which builds forage-ctl first.

Every row times both sides run by run, alternating, and after each timed run
checks, untimed, that the side did the whole job (the containers running, the
branches and worktrees there, or all of it gone again): a side that failed stops
the benchmark with an error instead of timing a failure. Cleanups run every step
whatever the one before did. Results go to RESULTS/<row>.json; report.py turns
them into docs/benchmarks.md.
"""
import json
import os
import shlex
import statistics
import subprocess
import sys
import time

F = os.environ["FORAGE_CTL"]
WORK = os.environ["WORK"]
RESULTS = os.path.join(WORK, "results")
RUNS = int(os.environ.get("RUNS", "10"))
LARGE_FILES = int(os.environ.get("LARGE_FILES", "50000"))
LARGE_RUNS = int(os.environ.get("LARGE_RUNS", "3"))
PARALLEL = int(os.environ.get("PARALLEL", "16"))
LIST_SANDBOXES = [int(n) for n in os.environ.get("LIST_SANDBOXES", "100 500").split()]
LIST_RUNNING = int(os.environ.get("LIST_RUNNING", "10"))
# Which groups of rows to run (all by default): ROWS="list" runs the warm and
# cold list rows alone, and lifecycle.sh then rewrites only their lines.
GROUPS = ("lifecycle", "parallel", "list", "list-running", "large", "large-cow", "cow-many")
# cow-many: how many copy-on-write sandboxes `list` counts, each with this many
# files changed by its agent.
COW_SANDBOXES = int(os.environ.get("COW_SANDBOXES", "8"))
COW_CHANGED = 10
ROWS = os.environ.get("ROWS", " ".join(GROUPS)).split()
FLOOR = os.path.join(WORK, "floor")
HOME = os.environ["FORAGE_HOME"]
LABEL = "forage-bench=1"


class Failed(Exception):
    pass


def sh(cmd, check=True, quiet=True):
    """Runs a shell command; with `check`, a failure stops the benchmark."""
    out = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True)
    if check and out.returncode != 0:
        raise Failed(f"`{cmd}` exited {out.returncode}:\n{out.stdout[-2000:]}{out.stderr[-2000:]}")
    return out.stdout


def attempt(cmd):
    """A cleanup step: tried, its failure ignored (the next step still runs)."""
    subprocess.run(["sh", "-c", cmd], capture_output=True)


def timed(cmd):
    start = time.perf_counter()
    sh(cmd)
    return time.perf_counter() - start


def git(repo, args, check=True):
    return sh(f"git -C {shlex.quote(repo)} {args}", check=check)


def make_repo(path, files):
    sh(f"git init -q -b main {shlex.quote(path)}")
    for i in range(files):
        d = os.path.join(path, f"d{i // 200}")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"f{i}.txt"), "w") as f:
            f.write(f"file {i}\n" * 3)
    git(path, "add -A")
    git(path, "-c user.name=bench -c user.email=bench@example.com commit -qm 'bench repo'")


def make_jj_repo(path, files):
    make_repo(path, files)
    sh(f"cd {shlex.quote(path)} && jj git init --colocate >/dev/null 2>&1 && jj new >/dev/null 2>&1")


# --- what each side must have done -------------------------------------------

def running(names):
    out = sh("docker ps --format '{{.Names}}'")
    missing = [n for n in names if n not in out.split()]
    if missing:
        raise Failed(f"containers not running: {missing}")


def no_containers(names):
    out = sh("docker ps -a --format '{{.Names}}'")
    left = [n for n in names if n in out.split()]
    if left:
        raise Failed(f"containers left: {left}")


def branches(repo, names, present=True):
    out = git(repo, "for-each-ref --format='%(refname:short)' refs/heads")
    have = set(out.split())
    wrong = [n for n in names if (n in have) != present]
    if wrong:
        raise Failed(f"branches {'missing' if present else 'left'} in {repo}: {wrong}")


def worktrees(repo, paths, present=True):
    out = git(repo, "worktree list --porcelain")
    have = {l[len("worktree "):] for l in out.splitlines() if l.startswith("worktree ")}
    wrong = [p for p in paths if (os.path.realpath(p) in have) != present]
    if wrong:
        raise Failed(f"worktrees {'missing' if present else 'left'} in {repo}: {wrong}")


def forage_up_done(repo, names):
    running([f"forage-{n}" for n in names])
    branches(repo, [f"forage-{n}" for n in names])
    worktrees(repo, [os.path.join(os.environ["FORAGE_HOME"], "workspaces", n) for n in names])


def forage_gone(repo, names):
    no_containers([f"forage-{n}" for n in names])
    if repo:
        branches(repo, [f"forage-{n}" for n in names], present=False)
    left = sh(f"{F} list -q")
    if any(n in left.split() for n in names):
        raise Failed(f"sandboxes left: {left}")


def forage_cow_up_done(repo, names):
    """`up --cow`: the container running on the branch, its upper layer made,
    and no worktree of the repository (the overlay stands for it)."""
    running([f"forage-{n}" for n in names])
    branches(repo, [f"forage-{n}" for n in names])
    for n in names:
        status = json.loads(sh(f"{F} status {n} --json"))
        if not status["record"]["workspace"].get("cow"):
            raise Failed(f"sandbox {n} is not copy-on-write: {status['record']['workspace']}")
        if not os.path.isdir(os.path.join(HOME, "workspaces", n, "upper")):
            raise Failed(f"sandbox {n} has no upper layer")
    worktrees(repo, [os.path.join(HOME, "workspaces", n) for n in names], present=False)


def in_home(home, cmd):
    """`cmd` with forage's state in `home` instead of the benchmark's own."""
    return f"FORAGE_HOME={shlex.quote(home)} {cmd}"


def change_files(name, home=HOME):
    """The agent of sandbox `name` changes COW_CHANGED files of the tree
    (d0/f0.txt … are in every bench repository)."""
    files = " ".join(f"d0/f{i}.txt" for i in range(COW_CHANGED))
    script = f"cd /workspace && for f in {files}; do echo changed >> $f; done"
    sh(in_home(home, f"{F} exec {name} -- sh -c {shlex.quote(script)}"))


def in_parallel(cmds, status_dir):
    """`cmds` run at once; fails unless every one exited 0 (`wait` alone says
    nothing about the children: each writes its status)."""
    parts = [f"(({c}); echo $? > {status_dir}/{i}) &" for i, c in enumerate(cmds)]
    return " ".join(parts) + " wait; for f in " + status_dir + "/*; do [ \"$(cat $f)\" = 0 ] || exit 1; done"


def floor_up_done(repo, names):
    running([f"floor-{n}" for n in names])
    branches(repo, [f"floor-{n}" for n in names])
    worktrees(repo, [os.path.join(FLOOR, n) for n in names])


def floor_gone(repo, names):
    no_containers([f"floor-{n}" for n in names])
    branches(repo, [f"floor-{n}" for n in names], present=False)
    worktrees(repo, [os.path.join(FLOOR, n) for n in names], present=False)


# --- the floor's commands ----------------------------------------------------

def floor_up(repo, name, image):
    path = os.path.join(FLOOR, name)
    return (f"git -C {repo} worktree add -q -b floor-{name} {path} && "
            f"docker run -d -t -i --init --label {LABEL} --name floor-{name} -v {path}:/workspace {image} sh >/dev/null")


def floor_up_retrying(repo, name, image, retries_file):
    """The floor of one of several parallel `up`s: git's own `worktree add` races
    with itself on one repository (it fails reading another add's half-written
    entry), so a failed add is undone and tried again, and counted; the time of
    the retries is the floor's."""
    path = os.path.join(FLOOR, name)
    undo = (f"git -C {repo} worktree remove --force {path} 2>/dev/null; rm -rf {path} {repo}/.git/worktrees/{name}; "
            f"git -C {repo} branch -qD floor-{name} 2>/dev/null")
    return (f"n=0; until git -C {repo} worktree add -q -b floor-{name} {path} 2>/dev/null; do "
            f"{undo}; n=$((n+1)); [ $n -lt 20 ] || exit 1; echo x >> {retries_file}; done; "
            f"docker run -d -t -i --init --label {LABEL} --name floor-{name} -v {path}:/workspace {image} sh >/dev/null")


def floor_up_watched(repo, name, image):
    """`floor_up`, then the watch forage's `up` keeps (src/sandbox/lifecycle):
    it waits max(100 ms, a third of the time the engine took to start the
    container), then asks the engine whether the agent still runs."""
    path = os.path.join(FLOOR, name)
    return (f"git -C {repo} worktree add -q -b floor-{name} {path} && t0=$(date +%s%N) && "
            f"docker run -d -t -i --init --label {LABEL} --name floor-{name} -v {path}:/workspace {image} sh >/dev/null && "
            f"sleep $(awk -v d=$(( $(date +%s%N) - t0 )) 'BEGIN {{ w = d / 3e9; if (w < 0.1) w = 0.1; print w }}') && "
            f"[ \"$(docker inspect -f '{{{{.State.Running}}}}' floor-{name})\" = true ]")


def floor_down(repo, name):
    path = os.path.join(FLOOR, name)
    return f"docker rm -f floor-{name} >/dev/null && git -C {repo} worktree remove --force {path} && git -C {repo} branch -qD floor-{name}"


def floor_cleanup(repo, name):
    path = os.path.join(FLOOR, name)
    attempt(f"docker rm -f floor-{name}")
    attempt(f"git -C {repo} worktree remove --force {path}")
    attempt(f"rm -rf {path} {repo}/.git/worktrees/{name}")
    attempt(f"git -C {repo} branch -qD floor-{name}")


def forage_cleanup(*names):
    for n in names:
        attempt(f"{F} down {n} --discard -q")


# --- one row -----------------------------------------------------------------

def bench(key, runs, sides, warmup=1):
    """`sides` maps 'forage' and 'floor' to (prepare, command, verify, cleanup);
    runs alternate between the two. Returns and writes the times."""
    print(f"==> {key}", flush=True)
    times = {side: [] for side in sides}
    for i in range(warmup + runs):
        for side, (prepare, command, verify, cleanup) in sides.items():
            try:
                prepare()
                t = timed(command)
                verify()
            except Failed as e:
                cleanup()
                sys.exit(f"benchmark {key}, {side} side, run {i + 1}: {e}")
            cleanup()
            if i >= warmup:
                times[side].append(t)
    with open(os.path.join(RESULTS, f"{key}.json"), "w") as f:
        json.dump(times, f)
    for side, ts in times.items():
        print(f"    {side}: median {statistics.median(ts) * 1000:.0f} ms over {len(ts)} runs", flush=True)
    return times


def nothing():
    pass


def wanted(group):
    return group in ROWS


def main():
    unknown = [r for r in ROWS if r not in GROUPS]
    if unknown:
        sys.exit(f"ROWS names {unknown}: the groups are {' '.join(GROUPS)}")
    os.makedirs(RESULTS, exist_ok=True)
    os.makedirs(FLOOR, exist_ok=True)
    print("==> preparing: repositories and images", flush=True)
    repo = os.path.join(WORK, "repo")
    make_repo(repo, 50)
    jj_repo = os.path.join(WORK, "jj-repo")
    if wanted("lifecycle"):
        make_jj_repo(jj_repo, 50)
    direct = os.path.join(WORK, "direct")
    os.makedirs(direct, exist_ok=True)
    sh(f"{F} up warm --workspace {direct} -q")
    image = json.loads(sh(f"{F} status warm --json"))["record"]["image"]
    sh(f"{F} down warm -q")
    # A template built from a Dockerfile on top of that image (no registry needed),
    # built once here so that the row measures `up` finding it cached.
    tpl = os.path.join(WORK, "templates")
    os.makedirs(os.path.join(tpl, "built"), exist_ok=True)
    with open(os.path.join(tpl, "built", "Dockerfile"), "w") as f:
        f.write(f"FROM {image}\nRUN echo built > /built.txt\n")
    with open(os.path.join(tpl, "built", "template.yaml"), "w") as f:
        f.write("build: {dockerfile: Dockerfile}\nagent: {command: [sh]}\nstop_signal: SIGHUP\n")
    os.environ["FORAGE_TEMPLATES_PATH"] = tpl
    sh(f"{F} up warm-built -t built --workspace {direct} -q")
    sh(f"{F} down warm-built -q")
    built_ctx = os.path.join(tpl, "built")
    sh(f"docker build -q -t forage-bench-built {built_ctx} >/dev/null")

    q = shlex.quote
    forage_up = lambda name, r=repo, extra="": f"{F} up {name} --git-worktree {r} -q {extra}"
    forage_down = lambda name: f"{F} down {name} --discard -q"

    if wanted("lifecycle"):
        bench("cycle", RUNS, {
            "forage": (nothing, f"{forage_up('c')} && {forage_down('c')}", lambda: forage_gone(repo, ["c"]), lambda: forage_cleanup("c")),
            "floor": (nothing, f"{floor_up(repo, 'c', image)} && {floor_down(repo, 'c')}", lambda: floor_gone(repo, ["c"]), lambda: floor_cleanup(repo, "c")),
        })
        bench("cycle-watched", RUNS, {
            "forage": (nothing, f"{forage_up('c')} && {forage_down('c')}", lambda: forage_gone(repo, ["c"]), lambda: forage_cleanup("c")),
            "floor": (nothing, f"{floor_up_watched(repo, 'c', image)} && {floor_down(repo, 'c')}", lambda: floor_gone(repo, ["c"]), lambda: floor_cleanup(repo, "c")),
        })
        bench("up", RUNS, {
            "forage": (nothing, forage_up("u"), lambda: forage_up_done(repo, ["u"]), lambda: forage_cleanup("u")),
            "floor": (nothing, floor_up(repo, "u", image), lambda: floor_up_done(repo, ["u"]), lambda: floor_cleanup(repo, "u")),
        })
        bench("down", RUNS, {
            "forage": (lambda: sh(forage_up("d")), forage_down("d"), lambda: forage_gone(repo, ["d"]), lambda: forage_cleanup("d")),
            "floor": (lambda: sh(floor_up(repo, "d", image)), floor_down(repo, "d"), lambda: floor_gone(repo, ["d"]), lambda: floor_cleanup(repo, "d")),
        })
        # jj mode against forage's own git-worktree cycle (the goal is relative to it).
        def jj_done():
            forage_gone(None, ["j"])
            if "forage/j" in sh(f"jj -R {q(jj_repo)} bookmark list"):
                raise Failed("bookmark forage/j left")

        bench("jj-cycle", RUNS, {
            "forage": (nothing, f"{F} up j --jj {jj_repo} -q && {F} down j --discard -q", jj_done, lambda: forage_cleanup("j")),
            "floor": (nothing, f"{forage_up('g')} && {forage_down('g')}", lambda: forage_gone(repo, ["g"]), lambda: forage_cleanup("g")),
        })
        bench("built", RUNS, {
            "forage": (nothing, f"{F} up b -t built --git-worktree {repo} -q", lambda: forage_up_done(repo, ["b"]), lambda: forage_cleanup("b")),
            "floor": (nothing, f"docker build -q -t forage-bench-built {built_ctx} >/dev/null && {floor_up(repo, 'b', 'forage-bench-built')}",
                      lambda: floor_up_done(repo, ["b"]), lambda: floor_cleanup(repo, "b")),
        })

    if wanted("parallel"):
        names = [f"p{i}" for i in range(PARALLEL)]
        retries_file = os.path.join(WORK, "floor-retries")
        open(retries_file, "w").close()
        # `wait` alone says nothing about the children: each writes its status.
        status_dir = os.path.join(WORK, "par-status")

        def with_status(cmd_list):
            return in_parallel(cmd_list, status_dir)

        par_forage = with_status([forage_up(n) for n in names])
        par_floor = with_status([floor_up_retrying(repo, n, image, retries_file) for n in names])

        def reset_status():
            attempt(f"rm -rf {status_dir}")
            os.makedirs(status_dir)

        def forage_par_cleanup():
            forage_cleanup(*names)

        def floor_par_cleanup():
            for n in names:
                floor_cleanup(repo, n)

        par_runs = min(RUNS, 5)
        bench("parallel", par_runs, {
            "forage": (reset_status, par_forage, lambda: forage_up_done(repo, names), forage_par_cleanup),
            "floor": (reset_status, par_floor, lambda: floor_up_done(repo, names), floor_par_cleanup),
        })
        with open(retries_file) as f:
            retries = len(f.read().split())
        with open(os.path.join(RESULTS, "parallel-retries.json"), "w") as f:
            json.dump({"retries": retries, "ups": PARALLEL * (par_runs + 1)}, f)

    # `list` reads every sandbox's worktree (its DIRTY column) and the branch
    # (AHEAD), and asks the engine when each running agent last printed (its
    # idle STATUS): the sandboxes are git-worktree ones on `repo`, LIST_RUNNING
    # of them running, the rest made with `--no-start`.
    def list_rows(count, key, running, dirty, setup=nothing):
        def list_ok():
            rows = json.loads(sh(f"{F} list --json"))
            if len(rows) != count:
                raise Failed(f"list shows {len(rows)} sandboxes, not {count}")
            if any(r["ahead"] is None or r["dirty"] is None for r in rows):
                raise Failed("list did not count every sandbox's commits and files")
            agents = sum(1 for r in rows if r["agent"] in ("working", "idle"))
            if agents != running:
                raise Failed(f"list shows {agents} running agents, not {running}")
            if sum(r["dirty"] for r in rows) != dirty:
                raise Failed(f"list does not count the {dirty} dirty files")

        def ps_ok():
            if len(sh(f"docker ps -a -q --filter label=forage.home={HOME}").split()) != count:
                raise Failed(f"docker ps does not show {count} containers")

        bench(key, RUNS, {
            "forage": (setup, f"{F} list >/dev/null", list_ok, nothing),
            "floor": (nothing, f"docker ps -a --filter label=forage.home={HOME} >/dev/null", ps_ok, nothing),
        }, warmup=2)

    def forget_memos():
        # What `list` remembers of each worktree (docs/user-guide.md, `list`):
        # without it, every sandbox's worktree is walked, as after a change.
        attempt(f"rm -f {HOME}/private/*/dirty-memo")

    def make_list_sandboxes(count):
        have = len(sh(f"{F} list -q").split())
        for i in range(have, count):
            start = "" if i < LIST_RUNNING else "--no-start"
            sh(f"{F} up l{i} --git-worktree {repo} {start} -q")
            if i % 7 == 0:
                # Some work to count: a dirty file in every seventh sandbox.
                with open(os.path.join(HOME, "workspaces", f"l{i}", f"dirty-{i}.txt"), "w") as f:
                    f.write("work\n")

    for count in LIST_SANDBOXES if wanted("list") else []:
        print(f"==> {count} sandboxes for list", flush=True)
        make_list_sandboxes(count)
        list_rows(count, f"list-{count}", min(LIST_RUNNING, count), len(range(0, count, 7)))
        if count == LIST_SANDBOXES[0]:
            list_rows(count, f"list-cold-{count}", min(LIST_RUNNING, count), len(range(0, count, 7)), forget_memos)

    def rss(cmd):
        out = sh(f"python3 -c 'import resource, subprocess, sys; subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, check=True); print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)' {cmd}")
        return int(out.strip())

    if wanted("list-running"):
        memory = {"list": rss(f"{F} list"), "docker_ps": rss(f"docker ps -a --filter label=forage.home={HOME}"), "sandboxes": LIST_SANDBOXES[-1]}

        # The worst case for the idle column: every agent of the first list row running.
        first = LIST_SANDBOXES[0]
        print(f"==> {first} sandboxes for list, all running", flush=True)
        sh(f"{F} down --all --discard -q")
        for i in range(first):
            sh(f"{F} up l{i} --git-worktree {repo} -q")
        list_rows(first, f"list-running-{first}", first, 0)
        sh(f"{F} down --all --discard -q")
        memory["up"] = rss(f"{F} up rss --git-worktree {repo} -q")
        sh(f"{F} down rss --discard -q")
        with open(os.path.join(RESULTS, "rss.json"), "w") as f:
            json.dump(memory, f)

    if wanted("large"):
        print(f"==> large repository: {LARGE_FILES} files", flush=True)
        large = os.path.join(WORK, "large")
        make_repo(large, LARGE_FILES)
        bench("large", LARGE_RUNS, {
            "forage": (nothing, forage_up("big", large, "--full-checkout"), lambda: forage_up_done(large, ["big"]), lambda: forage_cleanup("big")),
            "floor": (nothing, floor_up(large, "big", image), lambda: floor_up_done(large, ["big"]), lambda: floor_cleanup(large, "big")),
        }, warmup=0)

    if wanted("large-cow"):
        # `up --cow` once the base checkout of the tree exists (the warm-up run
        # makes it, `down` keeps it): against forage's full `up` of the same
        # repository (`--full-checkout`: copy-on-write is its default), and
        # against `up --cow` of the 50-file one.
        print(f"==> large repository, copy-on-write: {LARGE_FILES} files", flush=True)
        large = os.path.join(WORK, "large")
        if not os.path.isdir(large):
            make_repo(large, LARGE_FILES)
        cow_up = lambda name, r: forage_up(name, r, "--cow")
        bench("large-cow", LARGE_RUNS, {
            "forage": (nothing, cow_up("bigc", large), lambda: forage_cow_up_done(large, ["bigc"]), lambda: forage_cleanup("bigc")),
            "floor": (nothing, forage_up("bigf", large, "--full-checkout"), lambda: forage_up_done(large, ["bigf"]), lambda: forage_cleanup("bigf")),
        })
        bench("cow-sizes", RUNS, {
            "forage": (nothing, cow_up("bigc", large), lambda: forage_cow_up_done(large, ["bigc"]), lambda: forage_cleanup("bigc")),
            "floor": (nothing, cow_up("smallc", repo), lambda: forage_cow_up_done(repo, ["smallc"]), lambda: forage_cleanup("smallc")),
        })

    if wanted("cow-many"):
        large = os.path.join(WORK, "large")
        if not os.path.isdir(large):
            make_repo(large, LARGE_FILES)
        cow_many(repo, large)


def cow_many(small, large):
    """`list` and `down` of copy-on-write sandboxes whose agents changed
    COW_CHANGED files each, and PARALLEL `up --cow`s at once, on the large
    repository against the same on the 50-file one."""
    print(f"==> {COW_SANDBOXES} copy-on-write sandboxes on each repository, for list", flush=True)
    # Container names are the engine's, one namespace for every FORAGE_HOME.
    homes = {"forage": (os.path.join(WORK, "home-cow-large"), large, "ml"), "floor": (os.path.join(WORK, "home-cow-small"), small, "ms")}
    try:
        for home, r, prefix in homes.values():
            for i in range(COW_SANDBOXES):
                sh(in_home(home, f"{F} up {prefix}{i} --git-worktree {r} --cow -q"))
                change_files(f"{prefix}{i}", home)

        def list_ok(home):
            def check():
                rows = json.loads(sh(in_home(home, f"{F} list --json")))
                if len(rows) != COW_SANDBOXES or sum(r["dirty"] or 0 for r in rows) != COW_SANDBOXES * COW_CHANGED:
                    raise Failed(f"list in {home} does not show {COW_SANDBOXES} sandboxes of {COW_CHANGED} dirty files: {rows}")
            return check

        bench("cow-list", RUNS, {
            side: (nothing, in_home(home, f"{F} list >/dev/null"), list_ok(home), nothing) for side, (home, *_) in homes.items()
        }, warmup=2)
    finally:
        for home, *_ in homes.values():
            attempt(in_home(home, f"{F} down --all --discard -q"))
            attempt(in_home(home, f"{F} gc --force -q"))

    # `down` (its work archived: it reads the upper layer) of a sandbox whose
    # agent changed COW_CHANGED files.
    def made_and_changed(name, r):
        def prepare():
            sh(f"{F} up {name} --git-worktree {r} --cow -q")
            change_files(name)
        return prepare

    def archived(name, r):
        def check():
            forage_gone(r, [name])
            if name not in git(r, "for-each-ref --format='%(refname)' refs/forage/archive"):
                raise Failed(f"down {name} archived nothing in {r}")
        return check

    # The disk one more copy-on-write sandbox of the large repository takes
    # before its agent writes: its upper layer, the overlay's work directory
    # and its private repository (the base checkout is shared).
    sh(f"{F} up dk --git-worktree {large} --cow -q")
    try:
        forage_cow_up_done(large, ["dk"])
        # du counts a file with several links once per run: the private
        # repository's index, a hard link to the base's, costs nothing more.
        dirs = " ".join(os.path.join(HOME, d, "dk") for d in ("workspaces", "private"))
        bases = os.path.join(HOME, "bases")
        total = lambda paths: int(sh(f"du -s -B1 -c {paths} | tail -1").split()[0])
        used = total(f"{bases} {dirs}") - total(bases)
        with open(os.path.join(RESULTS, "cow-disk.json"), "w") as f:
            json.dump({"bytes": used}, f)
        print(f"==> cow-disk: {used / 1024:.0f} KiB", flush=True)
    finally:
        forage_cleanup("dk")

    bench("cow-down", RUNS, {
        "forage": (made_and_changed("dl", large), f"{F} down dl -q", archived("dl", large), lambda: forage_cleanup("dl")),
        "floor": (made_and_changed("ds", small), f"{F} down ds -q", archived("ds", small), lambda: forage_cleanup("ds")),
    })

    status_dir = os.path.join(WORK, "cow-par-status")

    def reset_status():
        attempt(f"rm -rf {status_dir}")
        os.makedirs(status_dir)

    def parallel_side(prefix, r):
        names = [f"{prefix}{i}" for i in range(PARALLEL)]
        ups = in_parallel([f"{F} up {n} --git-worktree {r} --cow -q" for n in names], status_dir)
        return (reset_status, ups, lambda: forage_cow_up_done(r, names), lambda: forage_cleanup(*names))

    bench("cow-parallel", min(RUNS, 5), {"forage": parallel_side("pl", large), "floor": parallel_side("ps", small)})


if __name__ == "__main__":
    main()
