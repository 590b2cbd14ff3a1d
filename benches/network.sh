#!/usr/bin/env bash
# The egress proxy against the direct path, in one run: per-request latency
# (HTTPS keep-alive, and a new connection per request), request throughput
# and bulk throughput through the proxy from a `restricted` sandbox vs from a
# `full` one on the bridge, to one test server, and through a plain relay
# (socat) in the proxy's place, the floor of any relay; the proxy's CPU time;
# then its memory with 100 restricted sandboxes. Rewrites the egress-proxy
# section of docs/benchmarks.md (benches/network.py measures,
# benches/report.py writes).
#
#   benches/network.sh                       # full run (about 10 minutes, most of it the 100 sandboxes)
#   SANDBOXES=20 REQUESTS=500 benches/network.sh   # quicker, smaller
#
# The server runs in SERVER_IMAGE (forage-test-bookworm:2, the image the
# integration tests import with debootstrap; made here the same way if missing),
# the relay in forage-bench-relay:1 (SERVER_IMAGE with Debian's socat, made by
# benches/network.py if missing). Both are kept for the next run.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
export SERVER_IMAGE=${SERVER_IMAGE:-forage-test-bookworm:2}
cargo build --release --quiet
BUILT=$(git rev-parse --short HEAD)
if [ -n "$(git status --porcelain --untracked-files=no -- src Cargo.toml Cargo.lock)" ]; then
  BUILT="$BUILT plus uncommitted changes"
fi
export FORAGE_CTL=$ROOT/target/release/forage-ctl
WORK=$(mktemp -d /tmp/forage-bench-net.XXXXXX)
export WORK FORAGE_HOME=$WORK/home XDG_CONFIG_HOME=$WORK/config

if ! docker image inspect "$SERVER_IMAGE" >/dev/null 2>&1; then
  echo "==> making $SERVER_IMAGE (debootstrap bookworm, a few minutes)"
  # The recipe of tests/it/real_agent.rs, whole: the tests take an image of
  # this name as theirs, so one made here must be the one they would make.
  debootstrap --variant=minbase --include=python3,python3-venv,git,ca-certificates bookworm "$WORK/root" http://deb.debian.org/debian >/dev/null
  mkdir -p "$WORK/root/etc/forage-test"
  cp /etc/ssl/certs/ca-certificates.crt "$WORK/root/etc/forage-test/host-ca.crt"
  tar --numeric-owner --exclude='./dev/*' -C "$WORK/root" -cf - . |
    docker import -c 'CMD ["bash"]' -c 'ENV PIP_CERT=/etc/forage-test/host-ca.crt' - "$SERVER_IMAGE" >/dev/null
  rm -rf "$WORK/root"
fi

cleanup() {
  # The server first: it holds the proxy's network, which gc removes.
  ids=$(docker ps -aq --filter label=forage-bench=1)
  [ -z "$ids" ] || docker rm -f $ids >/dev/null
  "$FORAGE_CTL" down --all --discard -q 2>/dev/null || true
  "$FORAGE_CTL" gc --force -q >/dev/null 2>&1 || true
  rm -rf "$ROOT/target/bench-results-network"
  [ ! -d "$WORK/results" ] || mv "$WORK/results" "$ROOT/target/bench-results-network"
  rm -rf "$WORK"
}
trap cleanup EXIT

python3 "$ROOT/benches/network.py"
echo "==> writing the egress-proxy section of docs/benchmarks.md"
python3 "$ROOT/benches/report.py" "$WORK/results" "$ROOT/docs/benchmarks.md" --network --built "$BUILT"
sed -n '/^## The egress proxy/,/^## The machine/p' "$ROOT/docs/benchmarks.md"
