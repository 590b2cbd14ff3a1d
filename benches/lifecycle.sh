#!/usr/bin/env bash
# forage-ctl against the raw floor doing the same work, in one run, on the same
# repository and image:
#   floor up   = git worktree add -b … + docker run -d (TTY, init, workspace bind)
#   floor down = docker rm -f + git worktree remove + git branch -D
# Medians from hyperfine; the ratio is forage / floor. Writes docs/benchmarks.md.
#
#   benches/lifecycle.sh            # full run (about 10 minutes, most of it the 50,000-file repo)
#   RUNS=5 LARGE_FILES=5000 benches/lifecycle.sh   # quicker, smaller
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
RUNS=${RUNS:-10}
LARGE_FILES=${LARGE_FILES:-50000}
LARGE_RUNS=${LARGE_RUNS:-3}
PARALLEL=${PARALLEL:-16}
LIST_SANDBOXES=${LIST_SANDBOXES:-100}

command -v hyperfine >/dev/null || { echo "hyperfine is missing: apt-get install hyperfine" >&2; exit 1; }
cargo build --release --quiet
F=$ROOT/target/release/forage-ctl
WORK=$(mktemp -d /tmp/forage-bench.XXXXXX)
export FORAGE_HOME=$WORK/home
RESULTS=$WORK/results
mkdir -p "$RESULTS" "$WORK/floor"

cleanup() {
  "$F" down --all --discard -q 2>/dev/null || true
  ids=$(docker ps -aq --filter label=forage-bench=1)
  [ -z "$ids" ] || docker rm -f $ids >/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT

# A repository of $2 small files in $1, one commit.
make_repo() {
  git init -q -b main "$1"
  python3 - "$1" "$2" <<'PY'
import os, sys
root, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    d = os.path.join(root, f"d{i // 200}")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"f{i}.txt"), "w") as f:
        f.write(f"file {i}\n" * 3)
PY
  git -C "$1" add -A
  git -C "$1" -c user.name=bench -c user.email=bench@example.com commit -qm "bench repo"
}

echo "==> preparing: repositories and the default image"
make_repo "$WORK/repo" 50
REPO=$WORK/repo
"$F" up warm --workspace "$WORK" -q
IMG=$("$F" status warm --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["record"]["image"])')
"$F" down warm -q

floor_up() { # repo name
  echo "git -C $1 worktree add -q -b floor-$2 $WORK/floor/$2 && docker run -d -t -i --init --label forage-bench=1 --name floor-$2 -v $WORK/floor/$2:/workspace $IMG sh >/dev/null"
}
floor_down() { # repo name
  echo "docker rm -f floor-$2 >/dev/null && git -C $1 worktree remove --force $WORK/floor/$2 && git -C $1 branch -qD floor-$2"
}
quietly() { echo "sh -c '($*) >/dev/null 2>&1; true'"; }

bench() { # name runs prepare-forage cmd-forage prepare-floor cmd-floor
  local name=$1 runs=$2
  echo "==> $name"
  hyperfine --style basic -w 1 -r "$runs" --export-json "$RESULTS/$name.json" \
    --prepare "$3" -n forage "$4" \
    --prepare "$5" -n floor "$6" >/dev/null
}

bench cycle "$RUNS" \
  "$(quietly "$F down c --discard -q")" "sh -c '$F up c --git-worktree $REPO -q && $F down c --discard -q'" \
  "$(quietly "$(floor_down "$REPO" c)")" "sh -c '$(floor_up "$REPO" c) && $(floor_down "$REPO" c)'"

bench up "$RUNS" \
  "$(quietly "$F down u --discard -q")" "$F up u --git-worktree $REPO -q" \
  "$(quietly "$(floor_down "$REPO" u)")" "sh -c '$(floor_up "$REPO" u)'"
eval "$(floor_down "$REPO" u)"; "$F" down u --discard -q

bench down "$RUNS" \
  "sh -c '$F up d --git-worktree $REPO -q'" "$F down d --discard -q" \
  "sh -c '$(floor_up "$REPO" d)'" "sh -c '$(floor_down "$REPO" d)'"

echo "==> $LIST_SANDBOXES sandboxes for list"
for i in $(seq "$LIST_SANDBOXES"); do "$F" up "l$i" --workspace "$WORK/floor" -q; done
hyperfine --style basic -w 2 -r "$RUNS" --export-json "$RESULTS/list.json" -N \
  -n forage "$F list" -n floor "docker ps -a --filter label=forage.sandbox" >/dev/null
rss() { python3 -c 'import resource, subprocess, sys
subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, check=True)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)' "$@"; }
RSS_LIST=$(rss "$F" list)
RSS_DOCKER_PS=$(rss docker ps -a --filter label=forage.sandbox)
"$F" down --all -q
RSS_UP=$(rss "$F" up rss --git-worktree "$REPO" -q)
"$F" down rss --discard -q

echo "==> parallel: $PARALLEL ups at once on one repository"
par_forage="for i in \$(seq $PARALLEL); do $F up p\$i --git-worktree $REPO -q & done; wait"
par_floor="for i in \$(seq $PARALLEL); do ($(floor_up "$REPO" "p\$i")) & done; wait"
par_floor_clean="for i in \$(seq $PARALLEL); do $(floor_down "$REPO" "p\$i"); done"
bench parallel "$(( RUNS < 5 ? RUNS : 5 ))" \
  "$(quietly "$F down --all --discard -q")" "sh -c '$par_forage'" \
  "$(quietly "$par_floor_clean")" "sh -c '$par_floor'"
"$F" down --all --discard -q; sh -c "$par_floor_clean" >/dev/null 2>&1 || true

echo "==> large repository: $LARGE_FILES files"
make_repo "$WORK/large" "$LARGE_FILES"
bench large "$LARGE_RUNS" \
  "$(quietly "$F down big --discard -q")" "$F up big --git-worktree $WORK/large -q" \
  "$(quietly "$(floor_down "$WORK/large" big)")" "sh -c '$(floor_up "$WORK/large" big)'"
"$F" down big --discard -q; eval "$(floor_down "$WORK/large" big)"

echo "==> writing docs/benchmarks.md"
python3 "$ROOT/benches/report.py" "$RESULTS" "$ROOT/docs/benchmarks.md" \
  --rss-list "$RSS_LIST" --rss-up "$RSS_UP" --rss-docker-ps "$RSS_DOCKER_PS" \
  --runs "$RUNS" --large-files "$LARGE_FILES" --large-runs "$LARGE_RUNS" \
  --parallel "$PARALLEL" --list-sandboxes "$LIST_SANDBOXES"
cat "$ROOT/docs/benchmarks.md"
