package releasenotice

import (
	"context"
	"time"

	"github.com/talosbot/talosbot/bot/notice"
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

// Planner is the part of the plugin host the inspector uses.
type Planner = notice.Planner

// Credentials resolves a cluster's client configurations for one call.
type Credentials = notice.Credentials

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
	r := notice.Read{Config: p.Config, Plugins: p.Plugins, Credentials: p.Credentials, Plugin: PluginName, Command: Command, User: User, ID: "release-check"}
	canonical, err := r.Of(ctx, cluster, &lifecyclev1.Evidence{Releases: sdk.ReleasesToWire(rel)})
	if err != nil {
		return nil, err
	}
	return releases.InspectionFromPlan(canonical)
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
