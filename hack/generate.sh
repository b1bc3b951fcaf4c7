#!/usr/bin/env bash
# Regenerates plugins/sdk/proto from its .proto files with the pinned generators.
# Usage: hack/generate.sh [OUTDIR]   (OUTDIR defaults to plugins/sdk/proto; the staleness test passes a temp dir)
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${TALOSBOT_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/talosbot/tools}/bin"
out="${1:-plugins/sdk/proto}"
mkdir -p "$out"
PATH="$bin:$PATH" protoc -I plugins/sdk/proto \
  --go_out="$out" --go_opt=paths=source_relative \
  --go-grpc_out="$out" --go-grpc_opt=paths=source_relative \
  lifecycle/v1/lifecycle.proto
