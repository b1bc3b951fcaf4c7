// Package builtin is the catalogue of plugins compiled into the talosbot
// binary. The host launches each as `talosbot plugin NAME`, a subprocess of
// the bot, so a crashing plugin never takes the bot down.
package builtin

import (
	"sort"

	"github.com/talosbot/talosbot/plugins/drift"
	"github.com/talosbot/talosbot/plugins/gates"
	"github.com/talosbot/talosbot/plugins/healthgate"
	"github.com/talosbot/talosbot/plugins/k8supgrade"
	"github.com/talosbot/talosbot/plugins/noderemove"
	"github.com/talosbot/talosbot/plugins/rollback"
	"github.com/talosbot/talosbot/plugins/sdk"
	"github.com/talosbot/talosbot/plugins/snapshot"
	"github.com/talosbot/talosbot/plugins/talosupgrade"
	"github.com/talosbot/talosbot/plugins/tfguard"
	"github.com/talosbot/talosbot/plugins/waitmember"
)

// catalogue returns the constructors by name. It is a function so that the
// catalogue is immutable.
func catalogue() map[string]func() sdk.Plugin {
	return map[string]func() sdk.Plugin{
		healthgate.Name:   healthgate.New,
		k8supgrade.Name:   k8supgrade.New,
		snapshot.Name:     snapshot.New,
		talosupgrade.Name: talosupgrade.New,
		rollback.Name:     rollback.New,
		noderemove.Name:   noderemove.New,
		tfguard.Name:      tfguard.New,
		drift.Name:        drift.New,
		gates.Name:        gates.New,
		waitmember.Name:   waitmember.New,
	}
}

// Names lists the built-in plugins.
func Names() []string {
	var out []string
	for n := range catalogue() {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// New returns a new instance of the named plugin.
func New(name string) (sdk.Plugin, bool) {
	f, ok := catalogue()[name]
	if !ok {
		return nil, false
	}
	return f(), true
}
