package bot

import (
	"github.com/talosbot/talosbot/bot/releasenotice"
	lifecyclev1 "github.com/talosbot/talosbot/plugins/sdk/proto/lifecycle/v1"
)

// releaseCommands is `/talos releases snooze` (the notices' snooze
// button; docs/RELEASES.md). `/talos releases` itself is a plugin.
func releaseCommands() []botCommand {
	return []botCommand{snoozeCommand(&lifecyclev1.Command{Name: "releases snooze",
		Summary: "pause new-release notices for a cluster (default 7 days)",
		Example: "/talos releases snooze production --for 3d"},
		releasenotice.Snoozes, "new-release notices", "releases that appear meanwhile are announced then")}
}
