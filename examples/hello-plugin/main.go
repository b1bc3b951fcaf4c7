// Command hello-plugin is a small external talosbot plugin: the example of
// docs/PLUGINS.md. It serves one read-only command,
//
//	/talos hello [cluster] [--name NAME]
//
// which greets NAME and lists the cluster's nodes from the inventory the host
// sends. It shows the parts of the SDK a plugin author uses: the manifest,
// sdk.NewCanonical for the plan digest, sdk.Refuse for a refusal, and the
// Reporter. It never contacts the cluster, so it needs no credentials.
//
// Build, checksum and configure it:
//
//	go build -o /usr/local/lib/talosbot/hello-plugin ./examples/hello-plugin
//	sha256sum /usr/local/lib/talosbot/hello-plugin
//	# talosbot.yaml:
//	# plugins:
//	#   external:
//	#     - {name: hello, path: /usr/local/lib/talosbot/hello-plugin, sha256: <the sum>}
package main

import (
	"github.com/talosbot/talosbot/plugins/sdk"
)

func main() { sdk.Serve(hello{}) }
