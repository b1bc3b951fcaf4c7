#!/usr/bin/env bash
# Installs the pinned protobuf generators into the tools cache (outside the repo).
# The committed generated code must match what these exact versions produce.
set -euo pipefail
dir="${TALOSBOT_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/talosbot/tools}/bin"
mkdir -p "$dir"
want_go=v1.36.12      # google.golang.org/protobuf, same as go.mod
want_grpc=v1.5.1      # google.golang.org/grpc/cmd/protoc-gen-go-grpc
stamp="$dir/.generators-$want_go-$want_grpc"
if [ ! -f "$stamp" ]; then
  GOBIN="$dir" go install "google.golang.org/protobuf/cmd/protoc-gen-go@$want_go"
  GOBIN="$dir" go install "google.golang.org/grpc/cmd/protoc-gen-go-grpc@$want_grpc"
  touch "$stamp"
fi
if ! command -v protoc >/dev/null; then
  echo "protoc not found: install it with 'apt-get install -y protobuf-compiler' (Debian), then re-run" >&2
  exit 1
fi
