package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/talosbot/talosbot/bot/engine"
	"github.com/talosbot/talosbot/bot/notice"
	"github.com/talosbot/talosbot/bot/releasenotice"
	"github.com/talosbot/talosbot/config"
	"github.com/talosbot/talosbot/internal/factory"
	"github.com/talosbot/talosbot/internal/releases"
	"github.com/talosbot/talosbot/state"
)

// newReleaseSource is the Talos release list of docs/RELEASES.md: Image
// Factory when releases.factory_url is set (cached in the store), else
// releases.talos. Its hook hands the list to every plugin request.
func newReleaseSource(cfg *config.Config, st *state.Store) (*releases.Source, engine.RunHook, error) {
	r := cfg.Releases
	src := &releases.Source{URL: r.FactoryURL, Store: st, Configured: r.Talos, ListedOnly: r.ListedOnly, Refresh: r.Refresh.D()}
	if r.FactoryURL != "" {
		c, err := factory.New(r.FactoryURL, nil)
		if err != nil {
			return nil, nil, fmt.Errorf("releases.factory_url: %w", err)
		}
		src.Fetcher = c
	}
	return src, releasenotice.Hook{Notes: &releasenotice.Notes{Source: src, Config: cfg}}, nil
}

// startReleases keeps the cached list fresh and runs the new-release
// notices (releases.notice_schedule).
func (a *app) startReleases(ctx context.Context, src *releases.Source, creds engine.CredentialSource, sink engine.Sink, log *slog.Logger) error {
	n, err := releasenotice.New(releasenotice.Options{
		Config: a.cfg, Store: a.store, Releases: src, Log: log,
		Inspector: &releasenotice.PluginInspector{Config: a.cfg, Plugins: a.plugins, Credentials: notice.FromSource(creds), Releases: src},
		Poster:    notice.EnginePoster{Buttons: a.engine, Sink: sink, User: releasenotice.User},
	})
	if err != nil {
		return err
	}
	a.runAdapter(ctx, "release source", func(ctx context.Context) error { src.Run(ctx); return nil })
	a.runAdapter(ctx, "release notices", n.Run)
	return nil
}
