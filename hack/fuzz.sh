#!/usr/bin/env bash
# Runs every fuzz target in the module for a bounded time.
# Usage: hack/fuzz.sh short|long   (short: 4s each, for make test; long: 60s each)
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-short}" in
  short) t="${FUZZTIME:-4s}" ;;
  long) t="${FUZZTIME:-60s}" ;;
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
