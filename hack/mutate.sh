#!/usr/bin/env bash
# mutate.sh: `make mutate`. Runs github.com/go-gremlins/gremlins (pinned below,
# installed into the tools cache outside the repo) over the packages listed in
# hack/mutate-packages.txt, with the settings in .gremlins.yaml, one package at
# a time. A mutant of a package is tested by that package's own tests only, so
# the figure says whether a rule's owning package notices its line breaking.
#
# Prints per package: killed, lived, timed out, not covered, and the efficacy
# (killed / (killed + lived), gremlins' figure); then every LIVED mutant
# (file:line:column and mutator). Exit 1 when a package is below MUTATE_MIN.
# Equivalent mutants (that cannot change behaviour) are listed, with why, in
# docs/TESTING.md; they count as lived here, as gremlins counts them.
#
#   make mutate                         the fast tier (minutes)
#   make mutate MUTATE_TIER=all         every listed package (hours on 2 cores)
#   make mutate MUTATE_PKGS="state approvals"   only these listed directories
#   MUTATE_SHORT=0 make mutate ...      mutants against the whole suite, not -short
#   MUTATE_DIFF=<commit> make mutate ... only the lines changed since <commit>
#                                       (gremlins -D), after a full measurement
#
# Reports (gremlins JSON, one per package) go to bin/mutate/.
set -uo pipefail
# The whole script is one compound command: bash reads it all before running
# it, so editing this file during a run (which takes many minutes) cannot
# derail the run.
{

GREMLINS_VERSION=v0.6.0
root=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
cd "$root"
DIR="${TALOSBOT_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/talosbot/tools}"
bin="$DIR/gremlins-$GREMLINS_VERSION/gremlins"
tier="${MUTATE_TIER:-fast}"
min="${MUTATE_MIN:-90}"
want="${MUTATE_PKGS:-}"
out="$root/bin/mutate"

log() { printf '[mutate] %s\n' "$*" >&2; }
die() { printf '[mutate] ERROR: %s\n' "$*" >&2; exit 1; }

command -v jq >/dev/null 2>&1 || die "jq is not on PATH; install jq (it reads gremlins' JSON report)"
if [[ ! -x "$bin" ]]; then
	log "installing gremlins $GREMLINS_VERSION into $(dirname "$bin")"
	mkdir -p "$(dirname "$bin")" || die "cannot create $(dirname "$bin"); set TALOSBOT_TOOLS_DIR to a writable directory"
	GOBIN="$(dirname "$bin")" GOFLAGS= go install "github.com/go-gremlins/gremlins/cmd/gremlins@$GREMLINS_VERSION" ||
		die "go install gremlins@$GREMLINS_VERSION failed (is the Go module proxy reachable?)"
fi
if [ -f "$DIR/env" ]; then
	set -a; . "$DIR/env"; set +a
fi
export TALOSBOT_TALOSCTL=${TALOSBOT_TALOSCTL:-/work/shared/tools/talosctl}
# The fast unit tier: gremlins runs `go test` for the coverage run and for
# every mutant, and go test takes -short from GOFLAGS. The slow packages skip
# their whole-roll and end-to-end tests under -short (docs/TESTING.md), so a
# mutant costs seconds; lines only those tests reach count as NOT COVERED.
# MUTATE_SHORT=0 mutates against the whole suite (hours on 2 cores).
if [ "${MUTATE_SHORT:-1}" != 0 ]; then
	export GOFLAGS="${GOFLAGS:+$GOFLAGS }-short"
fi
# Each mutant is a fresh compile and link of the package's test binary; on a
# shared 2-core machine that is the whole cost (a test run of approvals spends
# ~9 s of CPU, the tests themselves 0.1 s). go vet (which go test runs first)
# and the binary's DWARF tables cannot change a test's verdict, and leaving
# them out saves about a quarter of that CPU (measured on approvals).
export GOFLAGS="${GOFLAGS:+$GOFLAGS }-vet=off -ldflags=-w"
mkdir -p "$out"

# The listed rows this run covers.
rows=()
while read -r dir rowtier exclude; do
	[[ -z "$dir" || "$dir" == \#* ]] && continue
	if [[ -n "$want" ]]; then
		[[ " $want " == *" $dir "* ]] || continue
	elif [[ "$tier" != all && "$rowtier" != "$tier" ]]; then
		continue
	fi
	rows+=("$dir|${exclude:-}")
done <hack/mutate-packages.txt
[ ${#rows[@]} -gt 0 ] || die "no package in hack/mutate-packages.txt matches MUTATE_TIER=$tier MUTATE_PKGS='$want'"

bad=0
summary=()
survivors=()
for row in "${rows[@]}"; do
	dir=${row%%|*}
	exclude=${row#*|}
	args=(unleash --config "$root/.gremlins.yaml" -o "$out/${dir//\//_}.json")
	[ -n "$exclude" ] && args+=(-E "$exclude")
	[ -n "${MUTATE_DIFF:-}" ] && args+=(-D "$MUTATE_DIFF")
	# gremlins mutates and tests within the module it is started in: a row of
	# another module in this repository (plugins/sdk, its own go.mod) runs from
	# that module's directory.
	mod=$dir
	while [[ "$mod" != . && ! -f "$mod/go.mod" ]]; do mod=$(dirname "$mod"); done
	rel=.
	[[ "$mod" == . ]] && rel=$dir
	[[ "$mod" != . && "$mod" != "$dir" ]] && rel=${dir#"$mod"/}
	log "$dir: (in ./$mod) gremlins ${args[*]} ./$rel"
	start=$(date +%s)
	if ! (cd "$root/$mod" && "$bin" "${args[@]}" "./$rel") >"$out/${dir//\//_}.log" 2>&1; then
		log "$dir: gremlins failed; its output:"
		tail -20 "$out/${dir//\//_}.log" >&2
		summary+=("$(printf '%-22s %s' "$dir" "gremlins failed (see bin/mutate/${dir//\//_}.log)")")
		bad=1
		continue
	fi
	secs=$(($(date +%s) - start))
	json="$out/${dir//\//_}.json"
	# gremlins writes no report when it finds nothing to mutate (a row naming
	# no package of the module); a row whose every mutant is NOT COVERED has no
	# efficacy either. Neither is a pass: the row's rule went untested.
	if [ ! -s "$json" ]; then
		summary+=("$(printf '%-22s %s' "$dir" "no report: gremlins found nothing to mutate (see bin/mutate/${dir//\//_}.log)")")
		bad=1
		continue
	fi
	line=$(jq -r --arg d "$dir" --arg s "$secs" '
		[.files[].mutations[] | .status] as $st
		| ($st | map(select(. == "KILLED")) | length) as $k
		| ($st | map(select(. == "LIVED")) | length) as $l
		| ($st | map(select(. == "TIMED OUT")) | length) as $t
		| ($st | map(select(. == "NOT COVERED")) | length) as $n
		| (if ($k + $l) > 0 then ($k * 1000 / ($k + $l) | floor) / 10 else 100 end) as $e
		| "\($d)|\($k)|\($l)|\($t)|\($n)|\($e)|\($s)"' "$json")
	IFS='|' read -r _ k l t n e s <<<"$line"
	summary+=("$(printf '%-22s killed %4s  lived %3s  timed-out %3s  not-covered %4s  efficacy %5s%%  %ss' "$dir" "$k" "$l" "$t" "$n" "$e" "$s")")
	while read -r sv; do
		[ -n "$sv" ] && survivors+=("$dir/$sv")
	done < <(jq -r '.files[] | .file_name as $f | .mutations[] | select(.status == "LIVED") | "\($f):\(.line):\(.column) \(.type)"' "$json")
	if [ "$((k + l))" -eq 0 ]; then
		summary[-1]+="  no mutant tested"
		bad=1
	elif awk -v e="$e" -v m="$min" 'BEGIN { exit !(e < m) }'; then
		bad=1
	fi
done

echo
echo "efficacy per package (killed / (killed + lived); want >= $min%)"
printf '  %s\n' "${summary[@]}"
echo
if [ ${#survivors[@]} -gt 0 ]; then
	echo "LIVED mutants (a test should fail for each, or docs/TESTING.md lists it as equivalent):"
	printf '  %s\n' "${survivors[@]}"
else
	echo "no LIVED mutants"
fi
exit $bad
}
