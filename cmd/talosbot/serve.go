package main

import (
	"context"
	"errors"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/talosbot/talosbot/bot/chat"
	"github.com/talosbot/talosbot/config"
)

func newServeCmd() *cobra.Command {
	var path string
	cmd := &cobra.Command{
		Use:   "serve --config FILE",
		Short: "Run the bot: chat adapters, plugins, engine, audit trail",
		Long: `Run talosbot for real. It loads and validates the config (the same checks as
"talosbot config check", including every command name in the policy against
the plugins' manifests; it exits 2 on any of them), opens DATA_DIR/talosbot.db, marks operations that were
running when it last stopped as interrupted (resume or abandon them from chat),
and serves on the listen address: /healthz, /readyz, /metrics (Prometheus), the
console API when chat.web.enabled is set, GET /api/audit and /api/audit/verify
when audit.token is set
and POST /api/alerts/alertmanager when alerts.token is set (each with its own
bearer token). Operation logs older than audit.log_retention (default 30d) are
pruned hourly; the audit trail itself is kept forever.`,
		Example: "  talosbot serve --config /etc/talosbot/talosbot.yaml",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// The same checks as config check, secrets included, so that a
			// file config check accepted is never refused here.
			cfg, secrets, err := checkConfig(cmd.Context(), path)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			return serve(ctx, cfg, secrets)
		},
	}
	cmd.Flags().StringVar(&path, "config", "", "configuration file (YAML)")
	_ = cmd.MarkFlagRequired("config")
	return cmd
}

func serve(ctx context.Context, cfg *config.Config, secrets *config.Secrets) error {
	o := appOptions{secrets: secrets, auditToken: secrets.AuditToken, alertsToken: secrets.AlertsToken}
	if w := cfg.Chat.Web; w != nil && w.Enabled {
		// Each console user has their own token; the token says who asks.
		o.consoleOn, o.consoleTokens = true, secrets.ConsoleTokens
		for _, cl := range cfg.Clusters {
			for _, ch := range cl.Channels {
				// Platform-qualified channels (slack:…, discord:…) belong to their adapters.
				if platform, _ := chat.SplitChannel(ch); platform == "" {
					o.channels = append(o.channels, ch)
				}
			}
		}
	}
	a, err := startApp(ctx, cfg, o)
	var ce *config.Errors
	if errors.As(err, &ce) {
		// The catalogue check (command names in the policy): a config error.
		return &exitError{code: 2, err: err}
	}
	if err != nil {
		return err
	}
	defer a.close()
	a.log.Info("talosbot ready", "listen", a.ln.Addr().String(), "clusters", cfg.ClusterNames(), "console", o.consoleOn)
	<-ctx.Done()
	a.log.Info("shutting down")
	return nil
}
