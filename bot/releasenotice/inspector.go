package releasenotice

import (
	"context"
	"fmt"
	"time"

	"github.com/talosbot/talosbot/bot/chat"
	"github.com/talosbot/talosbot/config"
	"github.com/talosbot/talosbot/internal/releases"
	"github.com/talosbot/talosbot/plugins/sdk"
	lifecyclev1 "github.com/talosbot/talosbot/plugins/sdk/proto/lifecycle/v1"
)

// PluginName and Command name the read-only releases plugin
// (plugins/releaseinfo), whose plan carries the inspection.
const (
	PluginName = "releases"
	Command    = "releases"
)

// Planner is the part of the plugin host the inspector uses
// (plugins/host.Manager.Plan).
type Planner interface {
	Plan(ctx context.Context, name string, req *lifecyclev1.OperationRequest) (*lifecyclev1.OperationPlan, error)
}

// Credentials resolves a cluster's client configurations for one call
// (the bot's credential source); they live only in the request.
type Credentials func(ctx context.Context, cl *config.Cluster) (talosconfig, kubeconfig []byte, err error)

// PluginInspector implements Inspector with the releases plugin's Plan,
// which reads the cluster and changes nothing. It creates no operation:
// a daily check that posts nothing should leave no trace in chat.
type PluginInspector struct {
	Config      *config.Config
	Plugins     Planner
	Credentials Credentials
	Releases    ReleaseList
	Now         func() time.Time
}

// Inspect asks the plugin what cluster runs and what known supports.
func (p *PluginInspector) Inspect(ctx context.Context, cluster string, known []releases.Version) (*releases.Inspection, error) {
	cl := p.Config.Cluster(cluster)
	if cl == nil {
		return nil, fmt.Errorf("cluster %s is not configured", chat.Echo(cluster))
	}
	tc, kc, err := p.Credentials(ctx, cl)
	if err != nil {
		return nil, fmt.Errorf("credentials for %s: %w", cluster, err)
	}
	list, err := p.Releases.Talos(ctx)
	if err != nil {
		return nil, err
	}
	now := time.Now
	if p.Now != nil {
		now = p.Now
	}
	rel := releases.NotesOf(list, p.Config.Releases.Kubernetes, now())
	rel.Versions = releases.Tags(known) // exactly what the caller asks about
	pc := &lifecyclev1.Cluster{Name: cl.Name, Environment: cl.Environment, Endpoints: cl.Endpoints}
	for _, n := range cl.Nodes {
		pc.Nodes = append(pc.Nodes, &lifecyclev1.Node{Name: n.Name, Address: n.Address, Role: n.Role, Host: n.Host, Platform: n.Platform, InstallerClass: n.InstallerClass})
	}
	section, err := p.Config.Plugins.PluginSection(PluginName)
	if err != nil {
		return nil, fmt.Errorf("plugins.%s: %w", PluginName, err)
	}
	req := &lifecyclev1.OperationRequest{
		OperationId: "release-check-" + cl.Name, Command: Command, Cluster: pc, Requester: User, Config: section,
		Credentials: &lifecyclev1.Credentials{Talosconfig: tc, Kubeconfig: kc},
		Settings: &lifecyclev1.Settings{
			GateTimeoutMs: p.Config.Timeouts.Gate.D().Milliseconds(), NodeTimeoutMs: p.Config.Timeouts.Node.D().Milliseconds(),
		},
		Evidence: &lifecyclev1.Evidence{Releases: sdk.ReleasesToWire(rel)},
	}
	plan, err := p.Plugins.Plan(ctx, PluginName, req)
	if err != nil {
		return nil, fmt.Errorf("the releases plugin could not read %s: %w", cluster, err)
	}
	if r := plan.GetRefusal(); r != nil {
		return nil, fmt.Errorf("the releases plugin refused %s: %s: %s", cluster, r.GetRule(), r.GetReason())
	}
	return releases.InspectionFromPlan(plan.GetCanonicalInputs())
}

// User is the identity of the release check in requests and records.
const User = "talosbot-releases"

// Notes gives every plugin request the release data as typed evidence
// (Evidence.releases, internal/releases notes.go) from the cached list: it
// never waits for the factory (Source.Run keeps the cache fresh).
type Notes struct {
	Source *releases.Source
	Config *config.Config
	Now    func() time.Time
}

// ReleaseEvidence is the bot's ReleaseEvidence hook method.
func (n *Notes) ReleaseEvidence(ctx context.Context, _ string) *lifecyclev1.Releases {
	l, err := n.Source.Cached(ctx)
	if err != nil {
		// The release data cannot be read (a store error): plugins get
		// the configured releases.talos alone, and with listed_only it
		// stays the allow-list it is.
		conf := releases.ParseAll(n.Config.Releases.Talos)
		l = &releases.List{Versions: conf, Configured: conf, ListedOnly: n.Config.Releases.ListedOnly, Origin: releases.OriginConfig, Err: err}
	}
	now := time.Now
	if n.Now != nil {
		now = n.Now
	}
	return sdk.ReleasesToWire(releases.NotesOf(l, n.Config.Releases.Kubernetes, now()))
}
