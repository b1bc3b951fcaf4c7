#!/usr/bin/env bash
# Runs every benchmark behind a figure in docs/BENCHMARKS.md and regenerates it.
# Each line: package | benchmark regexp | -benchtime [| -count, default 1; benchreport takes the median]
set -euo pipefail
cd "$(dirname "$0")/.."
set -a; [ -f "${TALOSBOT_TOOLS_DIR:-$HOME/.cache/talosbot/tools}/env" ] && . "${TALOSBOT_TOOLS_DIR:-$HOME/.cache/talosbot/tools}/env"; set +a
out="$(mktemp -d)/bench.txt"
# The real built-ins' cold start (plugins/host BenchmarkColdStartBuiltIn) needs the binary make build made.
[ -x bin/talosbot-plugins ] && export TALOSBOT_PLUGINS_BIN="$PWD/bin/talosbot-plugins"
while IFS='|' read -r pkg re bt count; do
  [ -z "$pkg" ] && continue
  cmd="go test -run '^\$' -bench '$re' -benchtime $bt -count ${count:-1} $pkg"
  echo "bench: $cmd" >&2
  echo "cmd: $cmd" >>"$out"
  eval "$cmd" | tee -a "$out" >&2
done <<'LIST'
./state|^BenchmarkAuditAppend$|2s
./state|^BenchmarkAuditQuery$|2000x
./plugins/host|^BenchmarkColdStart$|20x|5
./plugins/host|^BenchmarkPlanCall$|2s|5
./plugins/host|^BenchmarkGRPCFloor$|2s|5
./plugins/host|^BenchmarkColdStartBuiltIn$|10x|5
./plugins/cluster/gate|^BenchmarkGate$|5x
./plugins/cluster/etcd|^BenchmarkSnapshotWrite$|3x
./plugins/cluster/etcd|^BenchmarkDrill$|3x
./bot/chat/slack|^BenchmarkSocketModeAck200$|20x
./sim|^BenchmarkStart$|3x
./sim|^BenchmarkStartWithKube$|3x
./internal/testenv|^BenchmarkStartKube$|3x
./plugins/talosupgrade|^BenchmarkRoll3Nodes$|1x
./cmd/talosbot|^BenchmarkServeStartToReady$|3x
LIST
go run ./hack/benchreport -in "$out" -out docs/BENCHMARKS.md
echo "wrote docs/BENCHMARKS.md" >&2
