#!/usr/bin/env bash
# forage-ctl against the raw floor doing the same work, in one run, on the same
# repository and image:
#   floor up   = git worktree add -b … + docker run -d (TTY, init, workspace bind)
#   floor down = docker rm -f + git worktree remove + git branch -D
# Each run of either side is checked, untimed, to have done the whole job, and the
# benchmark stops with an error otherwise (benches/lifecycle.py). Medians; the
# ratio is forage / floor. Writes docs/benchmarks.md.
#
#   benches/lifecycle.sh            # full run (about 20 minutes, most of it the 50,000-file repo and the list rows)
#   RUNS=5 LARGE_FILES=5000 LIST_SANDBOXES=100 benches/lifecycle.sh   # quicker, smaller
#   ROWS=list benches/lifecycle.sh  # the list rows alone (groups: lifecycle parallel list list-running large large-cow cow-many),
#                                   # rewriting only their lines of docs/benchmarks.md
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
export RUNS=${RUNS:-10} LARGE_FILES=${LARGE_FILES:-50000} LARGE_RUNS=${LARGE_RUNS:-3}
export PARALLEL=${PARALLEL:-16} LIST_SANDBOXES=${LIST_SANDBOXES:-100 500} LIST_RUNNING=${LIST_RUNNING:-10}

case " ${ROWS:-lifecycle} " in *" lifecycle "*) command -v jj >/dev/null ;; *) true ;; esac || { echo "jj is missing: cargo install jj-cli@0.45.1 --locked" >&2; exit 1; }
cargo build --release --quiet
# What was built: the commit, and whether the code differed from it.
BUILT=$(git rev-parse --short HEAD)
if [ -n "$(git status --porcelain --untracked-files=no -- src Cargo.toml Cargo.lock)" ]; then
  BUILT="$BUILT plus uncommitted changes"
fi
export FORAGE_CTL=$ROOT/target/release/forage-ctl
WORK=$(mktemp -d /tmp/forage-bench.XXXXXX)
export WORK FORAGE_HOME=$WORK/home JJ_USER=bench JJ_EMAIL=bench@example.com

cleanup() {
  "$FORAGE_CTL" down --all --discard -q 2>/dev/null || true
  for home in "$WORK"/home-cow-*; do
    [ ! -d "$home" ] || FORAGE_HOME=$home "$FORAGE_CTL" down --all --discard -q 2>/dev/null || true
  done
  ids=$(docker ps -aq --filter label=forage-bench=1)
  [ -z "$ids" ] || docker rm -f $ids >/dev/null
  docker rmi forage-bench-built >/dev/null 2>&1 || true
  # The raw results stay, so that report.py can be rerun on them.
  rm -rf "$ROOT/target/bench-results"
  [ ! -d "$WORK/results" ] || mv "$WORK/results" "$ROOT/target/bench-results"
  rm -rf "$WORK"
}
trap cleanup EXIT

python3 "$ROOT/benches/lifecycle.py"
echo "==> writing docs/benchmarks.md"
python3 "$ROOT/benches/report.py" "$WORK/results" "$ROOT/docs/benchmarks.md" --runs "$RUNS" \
  --large-files "$LARGE_FILES" --large-runs "$LARGE_RUNS" --parallel "$PARALLEL" --list-running "$LIST_RUNNING" --built "$BUILT" \
  ${ROWS:+--update}
cat "$ROOT/docs/benchmarks.md"
