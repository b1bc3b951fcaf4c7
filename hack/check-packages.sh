#!/usr/bin/env bash
# check-packages.sh: every package of the module (`go list ./...`, and the
# demo-only ones) has a row in the package table of docs/ARCHITECTURE.md,
# named in backquotes in the row's first cell; a row naming no package is an
# error too. It also checks the import arrows the layout promises (below),
# and that the core knows no plugin setting: no Go file under config/, bot/
# or approvals/ names a built-in's setting key from
# plugins/catalog/settings.txt, as written (refuse_non_latest_patch) or as its
# Go name (RefuseNonLatestPatch). Run by `make lint`.
set -euo pipefail
cd "$(dirname "$0")/.."
doc=docs/ARCHITECTURE.md
mod=$(go list -m)
# The first cell of every table row, e.g. "`sim`, `sim/etcdsim`".
cells=$(awk -F'|' '/^\| `/ {print $2}' "$doc")
named=$(grep -oE '`[^`]+`' <<<"$cells" | tr -d '`' | sed 's#/$##' | sort -u)
# The plugin SDK is its own module (plugins/sdk/go.mod) whose path lies under this one's,
# and so is examples/hello-plugin: stripping the root module's path names their packages as well.
pkgs=$({ go list ./...; go list -tags demo ./...; (cd plugins/sdk && go list ./...); (cd examples/hello-plugin && go list ./...); } | sed "s#^$mod/\{0,1\}##" | sort -u)
bad=0
while read -r p; do
	[ -n "$p" ] || continue
	if ! grep -qxF "$p" <<<"$named"; then
		echo "$doc: package $p has no row in the package table; add one that says its one concept"
		bad=1
	fi
done <<<"$pkgs"
while read -r n; do
	# tools/ is a separate module; it has its own row.
	[ "$n" = tools ] && continue
	if ! grep -qxF "$n" <<<"$pkgs"; then
		echo "$doc: the package table names $n, which is not a package of the module; remove or rename the row"
		bad=1
	fi
done <<<"$named"

# Arrows point down: approvals answers the engine with its own types and
# imports nothing of bot/; the render fixtures do not import the engine; the
# plugins binary links no store (internal/releases reaches it through an
# interface the bot implements).
arrow() { # arrow PACKAGE FORBIDDEN-PREFIX WHY
	local hit
	hit=$(go list -deps "./$1" | grep -E "^$mod/$2(/|\$)" || true)
	if [ -n "$hit" ]; then
		echo "$1 links $(tr '\n' ' ' <<<"$hit"): $3"
		bad=1
	fi
}
arrow approvals bot "approvals is below bot: take the input as an approvals type and let bot/engine alias it"
arrow internal/rendertest bot/engine "the render fixtures build opfacts.Facts, not engine types"
arrow cmd/talosbot-plugins state "plugins link no store: reach it through an interface (releases.Cache) the bot implements"

# The built-ins' setting keys, each with its CamelCase Go name.
settings=plugins/catalog/settings.txt
while read -r plugin key _; do
	case "$plugin" in '' | '#'*) continue ;; esac
	camel=$(awk -F_ '{for (i = 1; i <= NF; i++) printf "%s%s", toupper(substr($i, 1, 1)), substr($i, 2)}' <<<"$key")
	pattern="$key|$camel"
	if [[ $key != *_* ]]; then
		# A one-word key (storage) is also ordinary English and part of
		# import paths: match it as a config key is written, quoted, or as
		# its Go name.
		pattern="\"$key\"|$camel"
	fi
	hits=$(grep -rnwE --include='*.go' -e "$pattern" config bot approvals || true)
	if [ -n "$hits" ]; then
		echo "$hits" | sed "s#\$# : names plugins.$plugin.$key, a setting of the $plugin plugin ($settings); the core knows no plugin setting: read it in the plugin from its section#"
		bad=1
	fi
done <"$settings"
exit $bad
