#!/usr/bin/env bash
# The flake check of issue 17 (docs/BENCHMARKS.md, "Flake check"): `make test` five times in a
# row in a clean clone of COMMIT while `make bench` loops in a second clone, stopping at the first
# failure. Usage: hack/flakecheck.sh [COMMIT] [WORKDIR]. Per-run logs and summary.log go to
# WORKDIR (default: a new temp dir). Takes about 80 minutes on 2 cores.
set -u
repo="$(cd "$(dirname "$0")/.." && pwd)"
commit="${1:-HEAD}"
work="${2:-$(mktemp -d "${TMPDIR:-/tmp}/talosbot-flake.XXXXXX")}"
commit="$(git -C "$repo" rev-parse "$commit")" || exit 2
mkdir -p "$work"
cd "$work" || exit 2
rm -rf test bench stop
git clone -q "$repo" test && git clone -q "$repo" bench || exit 2
git -C test checkout -q "$commit" && git -C bench checkout -q "$commit" || exit 2
if [ -z "${TALOSBOT_TALOSCTL:-}" ] && [ -x "$repo/../shared/tools/talosctl" ]; then
  TALOSBOT_TALOSCTL="$(cd "$repo/../shared/tools" && pwd)/talosctl"
fi
export PATH="$PATH:/usr/local/go/bin:$HOME/go/bin" CI=true TALOSBOT_TALOSCTL="${TALOSBOT_TALOSCTL:-}"
log="$work/summary.log"
echo "flake check of $commit in $work" | tee -a "$log"
(
  cd bench
  i=0
  while [ ! -f "$work/stop" ]; do
    i=$((i + 1))
    make bench >"$work/bench-$i.log" 2>&1
    echo "bench $i rc=$? $(date -u +%T)" >>"$log"
  done
) &
bench=$!
status=0
for n in 1 2 3 4 5; do
  start=$(date +%s)
  (cd test && TALOSBOT_ARTIFACTS="$(mktemp -d)" make test) >"$work/test-$n.log" 2>&1
  status=$?
  echo "test $n rc=$status $(($(date +%s) - start))s $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$log"
  [ "$status" -ne 0 ] && break
done
touch "$work/stop"
wait "$bench"
echo "done: $([ "$status" -eq 0 ] && echo "five passes in a row" || echo "failed, see $work/test-$n.log")" | tee -a "$log"
exit "$status"
