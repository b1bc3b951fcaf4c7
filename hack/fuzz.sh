#!/usr/bin/env bash
# Runs every fuzz target in the module for a bounded time.
# Usage: hack/fuzz.sh short|long   (short: 20,000 inputs each, for make test; long: 2,000,000 each)
#
# The budget is a count of inputs (-fuzztime Nx), never a duration. A duration makes Go 1.26's fuzz
# coordinator race its own deadline: on a loaded machine a worker still mid-input when -fuzztime
# expires fails the target with a bare "context deadline exceeded" and no crasher
# (golang/go#75804, fixed in Go 1.27). CI failed on exactly that. A count has no deadline to race;
# a slow machine only takes longer. 20,000 inputs take 3-6 s per target on this project's 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-short}" in
  short) t="${FUZZTIME:-20000x}" ;;
  long) t="${FUZZTIME:-2000000x}" ;;
  *) echo "usage: hack/fuzz.sh short|long" >&2; exit 2 ;;
esac
n=0
while IFS=: read -r file name; do
  pkg="./$(dirname "$file")"
  echo "fuzz: $pkg $name for $t"
  go test -run '^$' -fuzz "^${name}\$" -fuzztime "$t" "$pkg" >/tmp/talosbot-fuzz.log 2>&1 || { cat /tmp/talosbot-fuzz.log; exit 1; }
  n=$((n+1))
done < <(grep -rHoE --include='*_test.go' '^func (Fuzz[A-Za-z0-9_]+)' --exclude-dir=tools . | sed -E 's#^\./##; s#:func #:#' | sort -u)
echo "fuzz: $n targets ran for $t each without a failure"
