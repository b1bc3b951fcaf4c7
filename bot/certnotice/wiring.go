package certnotice

import (
	"context"

	"github.com/talosbot/talosbot/bot/notice"
	"github.com/talosbot/talosbot/config"
	"github.com/talosbot/talosbot/internal/certexpiry"
)

// PluginName and Command name the read-only certs plugin
// (plugins/certinfo), whose plan carries the inventory.
const (
	PluginName = "certs"
	Command    = "certs"
)

// Planner is the part of the plugin host the inspector uses.
type Planner = notice.Planner

// Credentials resolves a cluster's client configurations for one call.
type Credentials = notice.Credentials

// PluginInspector implements Inspector with the certs plugin's Plan, which
// reads the cluster and changes nothing. It creates no operation: a daily
// check that posts nothing leaves no trace in chat.
type PluginInspector struct {
	Config      *config.Config
	Plugins     Planner
	Credentials Credentials
}

// Inspect asks the plugin for the cluster's certificates.
func (p *PluginInspector) Inspect(ctx context.Context, cluster string) (*certexpiry.Inventory, error) {
	r := notice.Read{Config: p.Config, Plugins: p.Plugins, Credentials: p.Credentials, Plugin: PluginName, Command: Command, User: User, ID: "cert-check"}
	canonical, err := r.Of(ctx, cluster, nil)
	if err != nil {
		return nil, err
	}
	return certexpiry.FromCanonical(canonical)
}
