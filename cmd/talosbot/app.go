package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/talosbot/talosbot/approvals"
	"github.com/talosbot/talosbot/bot"
	"github.com/talosbot/talosbot/bot/chat/web"
	"github.com/talosbot/talosbot/config"
	"github.com/talosbot/talosbot/plugins/builtin"
	"github.com/talosbot/talosbot/plugins/host"
	"github.com/talosbot/talosbot/state"
)

// app is a running bot: store, plugin host, engine, console and HTTP server.
type app struct {
	cfg     *config.Config
	log     *slog.Logger
	store   *state.Store
	plugins *host.Manager
	engine  *bot.Engine
	console *web.Console
	srv     *http.Server
	ln      net.Listener
}

type appOptions struct {
	consoleToken string   // "" with console enabled means an open console (demo only)
	consoleOn    bool     // serve the web console
	channels     []string // console channels
	users        []string // console users (demo)
	creds        bot.CredentialSource
	extraRoutes  func(mux *http.ServeMux)
}

func newLogger() *slog.Logger {
	level := slog.LevelInfo
	if os.Getenv("TALOSBOT_DEBUG") != "" {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

func startApp(ctx context.Context, cfg *config.Config, o appOptions) (*app, error) {
	log := newLogger()
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	st, err := state.Open(filepath.Join(cfg.DataDir, "talosbot.db"), state.Options{})
	if err != nil {
		return nil, fmt.Errorf("open state: %w", err)
	}
	a := &app{cfg: cfg, log: log, store: st}
	exe, err := os.Executable()
	if err != nil {
		a.close()
		return nil, fmt.Errorf("find own executable for built-in plugins: %w", err)
	}
	var ext []host.External
	for _, p := range cfg.Plugins.External {
		ext = append(ext, host.External{Name: p.Name, Path: p.Path, SHA256: p.SHA256})
	}
	a.plugins, err = host.New(host.Options{Executable: exe, BuiltIn: builtin.Names(), External: ext, RunTimeout: cfg.Timeouts.Run.D(), Logger: log})
	if err != nil {
		a.close()
		return nil, err
	}
	a.console = web.New(web.Options{Channels: o.channels, Token: o.consoleToken, Users: o.users})
	creds := o.creds
	if creds == nil {
		creds = bot.FileCredentials{}
	}
	a.engine, err = bot.New(ctx, bot.Options{
		Config: cfg, Store: st, Plugins: a.plugins, Credentials: creds, Policy: approvals.New(cfg),
		Sink: bot.NewRenderer(a.console, nil, log), Logger: log,
	})
	if err != nil {
		a.close()
		return nil, err
	}
	a.console.SetHandler(a.engine)
	ids, err := a.engine.Recover(ctx)
	if err != nil {
		a.close()
		return nil, fmt.Errorf("recover operations: %w", err)
	}
	for _, id := range ids {
		log.Warn("operation was interrupted by a restart; resume or abandon it", "op", id)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ready\n")) })
	if o.consoleOn {
		mux.Handle("/api/console/", a.console.Handler())
	}
	if o.extraRoutes != nil {
		o.extraRoutes(mux)
	}
	a.ln, err = net.Listen("tcp", cfg.Listen)
	if err != nil {
		a.close()
		return nil, fmt.Errorf("listen on %s (listen in the config): %w", cfg.Listen, err)
	}
	a.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := a.srv.Serve(a.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("http server", "err", err)
		}
	}()
	return a, nil
}

func (a *app) close() {
	if a.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = a.srv.Shutdown(ctx)
		cancel()
	}
	if a.engine != nil {
		a.engine.Close()
	}
	if a.plugins != nil {
		a.plugins.Close()
	}
	if a.store != nil {
		_ = a.store.Close()
	}
}
