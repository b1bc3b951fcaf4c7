#!/bin/sh
# Installs talosbot on a host, with the owners and modes its service user needs.
# docs/DEPLOY.md runs it, and cmd/talosbot/deploy_test.go runs the same script
# into a scratch root and checks, as the service's own uid and gid, that each
# file the bot needs is readable and nothing secret is readable by others.
#
#   sudo deploy/install.sh systemd [BINDIR]  the talosbot user and group, both binaries from
#                                            BINDIR (default bin, from `make build`) into
#                                            /usr/local/bin, the unit, /etc/talosbot
#   sudo deploy/install.sh compose           /etc/talosbot for the container's user (65532,
#                                            the image's nonroot; see deploy/docker-compose.yaml)
#   sudo deploy/install.sh secret SRC NAME   SRC as /etc/talosbot/NAME (e.g. production/talosconfig),
#                                            readable by the service and no one else
#
# /etc/talosbot is 0750 root:GROUP and the config 0640 root:GROUP: the service
# reads them through its group and cannot change them. /etc/talosbot/env, the
# env:NAME secrets, is 0600 root: systemd and docker compose read it as root.
# An existing config or env file is never overwritten (the config's owner and
# mode are set). DESTDIR installs under
# another root (the tests); it does not create the user.
set -eu

DESTDIR=${DESTDIR:-}
etc="$DESTDIR/etc/talosbot"
example="$(dirname "$0")/examples/talosbot.yaml"

# config_dir GROUP LISTEN: /etc/talosbot, the example config with listen:
# LISTEN (if there is no config yet) and an empty env file (if there is none yet).
config_dir() {
	install -d -m 0750 -o root -g "$1" "$etc"
	if [ ! -e "$etc/talosbot.yaml" ]; then
		sed "s/^listen: 127\.0\.0\.1:8080\$/listen: $2/" "$example" >"$etc/talosbot.yaml.new"
		mv "$etc/talosbot.yaml.new" "$etc/talosbot.yaml"
	fi
	# Also for a config that exists (kept as it is otherwise): an install by
	# the old instructions left it 0640 root:root, which the service cannot read.
	chown "root:$1" "$etc/talosbot.yaml"
	chmod 0640 "$etc/talosbot.yaml"
	[ -e "$etc/env" ] || install -m 0600 -o root -g root /dev/null "$etc/env"
}

case "${1:-}" in
systemd)
	bindir=${2:-bin}
	if [ -z "$DESTDIR" ] && ! getent passwd talosbot >/dev/null; then
		# Its home is the state directory (tofu may keep a cache there); no login.
		useradd --system --user-group --home-dir /var/lib/talosbot --no-create-home \
			--shell /usr/sbin/nologin talosbot
	fi
	# Both binaries together: the bot starts the talosbot-plugins next to itself.
	install -d -m 0755 "$DESTDIR/usr/local/bin"
	install -m 0755 -o root -g root "$bindir/talosbot" "$bindir/talosbot-plugins" "$DESTDIR/usr/local/bin/"
	config_dir "${TALOSBOT_GROUP:-talosbot}" 127.0.0.1:8080
	install -d -m 0755 "$DESTDIR/etc/systemd/system"
	install -m 0644 -o root -g root "$(dirname "$0")/systemd/talosbot.service" "$DESTDIR/etc/systemd/system/talosbot.service"
	# The state directory (/var/lib/talosbot, 0700 talosbot) is the unit's
	# StateDirectory=: systemd creates it with the right owner at start.
	if [ -z "$DESTDIR" ]; then
		systemctl daemon-reload
	fi
	;;
compose)
	# The image runs as 65532:65532 (distroless nonroot), a number the host
	# need not know by name.
	# Inside the container 127.0.0.1 is the container's own: listen on every
	# address so the published port (127.0.0.1:8080 on the host) reaches it.
	config_dir "${TALOSBOT_GROUP:-65532}" 0.0.0.0:8080
	;;
secret)
	[ $# -eq 3 ] || { echo "usage: $0 secret SRC NAME (NAME under /etc/talosbot, e.g. production/talosconfig)" >&2; exit 2; }
	case "$3" in
	/* | *..*) echo "$0: NAME is a path under /etc/talosbot without '..', e.g. production/talosconfig; got $3" >&2; exit 2 ;;
	esac
	[ -d "$etc" ] || { echo "$0: $etc does not exist: run '$0 systemd' or '$0 compose' first" >&2; exit 2; }
	# The secret gets the group of /etc/talosbot: talosbot or 65532.
	group=$(stat -c %g "$etc")
	dir=$(dirname "$etc/$3")
	if [ ! -d "$dir" ]; then
		install -d -m 0750 -o root -g "$group" "$dir"
	fi
	install -m 0640 -o root -g "$group" "$2" "$etc/$3"
	;;
*)
	echo "usage: $0 systemd [BINDIR] | compose | secret SRC NAME" >&2
	exit 2
	;;
esac
