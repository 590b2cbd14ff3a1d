#!/usr/bin/env bash
# forage as a service against the CLI, in one run: the time from request to a
# running sandbox through MCP (a long-lived `forage-ctl mcp`) and HTTP (a
# long-lived `forage-ctl serve`) vs the CLI's `up`; 32 jobs at once through
# HTTP vs 32 CLI `up --repo … --job` one after another; the memory of `serve`
# with 100 sandboxes. Each run is checked, untimed, to have done the whole job.
# Rewrites the service section of docs/benchmarks.md (benches/service.py
# measures, benches/report.py writes).
#
#   benches/service.sh                              # full run (about 15 minutes)
#   RUNS=5 JOB_RUNS=1 SANDBOXES=20 benches/service.sh   # quicker, smaller
#
# CARGO_TARGET_DIR is honoured (the release build is taken from there).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
cargo build --release --locked --quiet
BUILT=$(git rev-parse --short HEAD)
if [ -n "$(git status --porcelain --untracked-files=no -- src Cargo.toml Cargo.lock)" ]; then
  BUILT="$BUILT plus uncommitted changes"
fi
export FORAGE_CTL=${CARGO_TARGET_DIR:-$ROOT/target}/release/forage-ctl
WORK=$(mktemp -d /tmp/forage-bench-service.XXXXXX)
export WORK FORAGE_HOME=$WORK/home XDG_CONFIG_HOME=$WORK/config
unset FORAGE_TEMPLATES_PATH

cleanup() {
  "$FORAGE_CTL" down --all --discard -q 2>/dev/null || true
  "$FORAGE_CTL" gc --force -q >/dev/null 2>&1 || true
  rm -rf "$ROOT/target/bench-results-service"
  [ ! -d "$WORK/results" ] || mv "$WORK/results" "$ROOT/target/bench-results-service"
  rm -rf "$WORK"
}
trap cleanup EXIT

python3 "$ROOT/benches/service.py"
echo "==> writing the service section of docs/benchmarks.md"
python3 "$ROOT/benches/report.py" "$WORK/results" "$ROOT/docs/benchmarks.md" --service --built "$BUILT"
sed -n '/^## forage as a service/,/^## The machine/p' "$ROOT/docs/benchmarks.md"
