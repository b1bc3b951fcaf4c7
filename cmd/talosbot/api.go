package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/talosbot/talosbot/bot/alerts"
	"github.com/talosbot/talosbot/bot/auditapi"
	"github.com/talosbot/talosbot/bot/chat"
)

// logPruneInterval is how often verbose operation logs are pruned.
const logPruneInterval = time.Hour

// newDemoToken makes the demo's API token and writes it to DIR/demo-token
// (0600) so scripts can read it.
func newDemoToken(dir string) (string, error) {
	var b [24]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("generate demo token: %w", err)
	}
	tok := hex.EncodeToString(b[:])
	p := filepath.Join(dir, "demo-token")
	if err := os.WriteFile(p, []byte(tok+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("write %s: %w", p, err)
	}
	// WriteFile keeps the mode of an existing file: make sure it is private.
	if err := os.Chmod(p, 0o600); err != nil {
		return "", fmt.Errorf("chmod %s: %w", p, err)
	}
	return tok, nil
}

// mountAPIs adds /metrics, GET /api/audit, GET /api/audit/verify and POST /api/alerts/alertmanager
// (each API only when its token is set) and starts the log pruner.
func (a *app) mountAPIs(ctx context.Context, mux *http.ServeMux, adapter chat.Adapter, o appOptions) error {
	mux.Handle("GET /metrics", a.metrics.Handler())
	if o.auditToken != "" {
		h := auditapi.Handler(auditapi.Options{Store: a.store, Token: o.auditToken})
		mux.Handle("GET /api/audit", h)
		mux.Handle("GET "+auditapi.VerifyPath, h)
	} else {
		a.log.Info("audit API is off: set audit.token to serve GET /api/audit")
	}
	if o.alertsToken != "" {
		rcv, err := alerts.New(alerts.Options{
			Config: a.cfg, Store: a.store, Chat: adapter, Buttons: a.engine,
			Token: o.alertsToken, FallbackChannel: o.alertsFallback, Logger: a.log, Observer: a.metrics,
			Silences: a.follow.alertSilences(),
		})
		if err != nil {
			return err
		}
		mux.Handle("POST "+alerts.Path, rcv.Handler())
	} else {
		a.log.Info("alert webhook is off: set alerts.token to serve POST " + alerts.Path)
	}
	pruner := &auditapi.LogPruner{Store: a.store, Retention: a.cfg.Audit.LogRetention.D(), Now: time.Now, Logger: a.log}
	a.runAdapter(ctx, "log pruner", func(ctx context.Context) error {
		t := time.NewTicker(logPruneInterval)
		defer t.Stop()
		return pruner.Run(ctx, t.C)
	})
	return nil
}
