#!/usr/bin/env bash
# Builds the binaries that talosbot's integration tests need (kube-apiserver,
# OpenTofu) from the Go module proxy into a cache outside the repo, then writes
# $DIR/env with TALOSBOT_KUBE_APISERVER=... and TALOSBOT_TOFU=... lines, which
# internal/testenv reads.
#
# Idempotent: a binary already in the cache is not rebuilt. The versions are
# the ones pinned in tools/go.mod.
#
#   DIR = ${TALOSBOT_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/talosbot/tools}
#
# OpenTofu: the pinned build if cached, else a `tofu` or `terraform` already on
# PATH, else a build (set TALOSBOT_TOOLS_BUILD_TOFU=1 to build anyway).
#
# Cold build times on 2 cores: kube-apiserver ~10 min, tofu ~7 min.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
DIR="${TALOSBOT_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/talosbot/tools}"

log() { printf '[tools] %s\n' "$*" >&2; }
die() { printf '[tools] ERROR: %s\n' "$*" >&2; exit 1; }

command -v go >/dev/null 2>&1 || die "go is not on PATH; install the Go toolchain named in tools/go.mod"
mkdir -p "$DIR" || die "cannot create $DIR; set TALOSBOT_TOOLS_DIR to a writable directory"

# One build at a time per cache dir (make test may run in parallel shells).
if command -v flock >/dev/null 2>&1; then
	exec 9>"$DIR/.lock"
	if ! flock -n 9; then
		log "another build.sh holds $DIR/.lock; waiting for it"
		flock 9
	fi
fi

cd "$here"
# -mod=mod: go.sum may lack hashes for test-only deps; let go fill them in.
export GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=mod"

modversion() {
	go list -m -f '{{.Version}}' "$1" || die "cannot resolve $1 from tools/go.mod (is the Go module proxy reachable?)"
}

KUBE_VERSION="$(modversion k8s.io/kubernetes)"
TOFU_VERSION="$(modversion github.com/opentofu/opentofu)"

# build PKG OUT LDFLAGS: builds into a temp file beside OUT, then renames it,
# so an interrupted build never leaves a half-written binary that looks done.
build() {
	local pkg="$1" out="$2" ldflags="$3" start tmp
	mkdir -p "$(dirname "$out")"
	tmp="$out.tmp.$$"
	start=$(date +%s)
	log "building $pkg -> $out (cold build takes minutes on 2 cores)"
	if ! go build -trimpath -buildvcs=false -ldflags "$ldflags" -o "$tmp" "$pkg"; then
		rm -f "$tmp"
		die "go build $pkg failed; see the compiler output above"
	fi
	mv -f "$tmp" "$out"
	log "built $(basename "$out") in $(($(date +%s) - start))s"
}

# --- kube-apiserver ---------------------------------------------------------
kube_bin="$DIR/kube-apiserver-$KUBE_VERSION/kube-apiserver"
if [[ -x "$kube_bin" ]]; then
	log "kube-apiserver $KUBE_VERSION: cached at $kube_bin"
else
	minor="${KUBE_VERSION#v}"
	major="${minor%%.*}"
	minor="${minor#*.}"
	minor="${minor%%.*}"
	ld="-s -w"
	for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		ld+=" -X $p.gitVersion=$KUBE_VERSION -X $p.gitMajor=$major -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
	done
	build k8s.io/kubernetes/cmd/kube-apiserver "$kube_bin" "$ld"
fi
got="$("$kube_bin" --version 2>&1)" || die "$kube_bin --version failed: $got"
[[ "$got" == *"$KUBE_VERSION"* ]] || die "$kube_bin reports '$got', want $KUBE_VERSION; delete it and rerun"

# --- OpenTofu ---------------------------------------------------------------
# Order: the pinned build if it is already cached, else tofu/terraform on
# PATH (no 7-minute build), else build the pinned version.
tofu_bin="$DIR/tofu-$TOFU_VERSION/tofu"
if [[ -x "$tofu_bin" ]]; then
	log "tofu $TOFU_VERSION: cached at $tofu_bin"
else
	if [[ "${TALOSBOT_TOOLS_BUILD_TOFU:-}" != 1 ]]; then
		for name in tofu terraform; do
			if p="$(command -v "$name")"; then
				tofu_bin="$p"
				log "tofu: using $name on PATH at $p (TALOSBOT_TOOLS_BUILD_TOFU=1 builds $TOFU_VERSION instead)"
				break
			fi
		done
	fi
	if [[ ! -x "$tofu_bin" ]]; then
		build github.com/opentofu/opentofu/cmd/tofu "$tofu_bin" \
			"-s -w -X github.com/opentofu/opentofu/version.dev=no"
	fi
fi
"$tofu_bin" version >/dev/null 2>&1 || die "$tofu_bin version failed; delete it and rerun"

# --- env file ---------------------------------------------------------------
env_tmp="$DIR/env.tmp.$$"
{
	echo "# written by tools/build.sh; read by internal/testenv"
	echo "TALOSBOT_KUBE_APISERVER=$kube_bin"
	echo "TALOSBOT_TOFU=$tofu_bin"
} >"$env_tmp"
mv -f "$env_tmp" "$DIR/env"
log "wrote $DIR/env"
cat "$DIR/env" | sed -n '2,$p' | sed 's/^/[tools]   /' >&2
