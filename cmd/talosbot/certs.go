package main

import (
	"context"
	"log/slog"

	"github.com/talosbot/talosbot/bot/certnotice"
	"github.com/talosbot/talosbot/bot/engine"
	"github.com/talosbot/talosbot/bot/notice"
)

// startCertNotices runs the daily certificate-expiry check
// (certificates.notice_schedule) through the certs plugin, and exports its
// gauge on /metrics.
func (a *app) startCertNotices(ctx context.Context, creds engine.CredentialSource, sink engine.Sink, log *slog.Logger) error {
	n, err := certnotice.New(certnotice.Options{
		Config: a.cfg, Store: a.store, Log: log, Registerer: a.metrics.Registry(),
		Inspector: &certnotice.PluginInspector{Config: a.cfg, Plugins: a.plugins, Credentials: notice.FromSource(creds)},
		Poster:    notice.EnginePoster{Buttons: a.engine, Sink: sink, User: certnotice.User},
	})
	if err != nil {
		return err
	}
	a.runAdapter(ctx, "certificate notices", n.Run)
	return nil
}
