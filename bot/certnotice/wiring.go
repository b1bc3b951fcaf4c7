package certnotice

import (
	"context"
	"fmt"

	"github.com/talosbot/talosbot/bot/chat"
	"github.com/talosbot/talosbot/bot/notice"
	"github.com/talosbot/talosbot/config"
	"github.com/talosbot/talosbot/internal/certexpiry"
	lifecyclev1 "github.com/talosbot/talosbot/plugins/sdk/proto/lifecycle/v1"
)

// PluginName and Command name the read-only certs plugin
// (plugins/certinfo), whose plan carries the inventory.
const (
	PluginName = "certs"
	Command    = "certs"
)

// Planner is the part of the plugin host the inspector uses
// (plugins/host.Manager.Plan).
type Planner interface {
	Plan(ctx context.Context, name string, req *lifecyclev1.OperationRequest) (*lifecyclev1.OperationPlan, error)
}

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
	cl := p.Config.Cluster(cluster)
	if cl == nil {
		return nil, fmt.Errorf("cluster %s is not configured", chat.Echo(cluster))
	}
	tc, kc, err := p.Credentials(ctx, cl)
	if err != nil {
		return nil, fmt.Errorf("credentials for %s: %w", cluster, err)
	}
	pc := &lifecyclev1.Cluster{Name: cl.Name, Environment: cl.Environment, Endpoints: cl.Endpoints}
	for _, n := range cl.Nodes {
		pc.Nodes = append(pc.Nodes, &lifecyclev1.Node{Name: n.Name, Address: n.Address, Role: n.Role, Host: n.Host, Platform: n.Platform, InstallerClass: n.InstallerClass})
	}
	section, err := p.Config.Plugins.PluginSection(PluginName)
	if err != nil {
		return nil, fmt.Errorf("plugins.%s: %w", PluginName, err)
	}
	req := &lifecyclev1.OperationRequest{
		OperationId: "cert-check-" + cl.Name, Command: Command, Cluster: pc, Requester: User, Config: section,
		Credentials: &lifecyclev1.Credentials{Talosconfig: tc, Kubeconfig: kc},
		Settings:    &lifecyclev1.Settings{GateTimeoutMs: p.Config.Timeouts.Gate.D().Milliseconds(), NodeTimeoutMs: p.Config.Timeouts.Node.D().Milliseconds()},
	}
	plan, err := p.Plugins.Plan(ctx, PluginName, req)
	if err != nil {
		return nil, fmt.Errorf("the certs plugin could not read %s: %w", cluster, err)
	}
	if r := plan.GetRefusal(); r != nil {
		return nil, fmt.Errorf("the certs plugin refused %s: %s: %s", cluster, r.GetRule(), r.GetReason())
	}
	return certexpiry.FromCanonical(plan.GetCanonicalInputs())
}
