package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/talosbot/talosbot/approvals"
	"github.com/talosbot/talosbot/bot"
	"github.com/talosbot/talosbot/bot/chat"
	"github.com/talosbot/talosbot/bot/chat/discord"
	"github.com/talosbot/talosbot/bot/chat/slack"
	"github.com/talosbot/talosbot/bot/chat/web"
	"github.com/talosbot/talosbot/bot/credentials"
	"github.com/talosbot/talosbot/bot/engine"
	"github.com/talosbot/talosbot/bot/escalate"
	"github.com/talosbot/talosbot/bot/metrics"
	"github.com/talosbot/talosbot/bot/render"
	"github.com/talosbot/talosbot/bot/schedule"
	"github.com/talosbot/talosbot/config"
	"github.com/talosbot/talosbot/plugins/host"
	"github.com/talosbot/talosbot/state"
)

// app is a running bot: store, plugin host, engine, console and HTTP server.
type app struct {
	cfg     *config.Config
	log     *slog.Logger
	store   *state.Store
	plugins *host.Manager
	engine  *engine.Engine
	console *web.Console
	slack   *slack.Adapter
	discord *discord.Adapter
	srv     *http.Server
	ln      net.Listener
	metrics *metrics.Metrics
	follow  *followups

	stopAdapters context.CancelFunc
	adapters     sync.WaitGroup
}

// chatAdapters builds the Slack and Discord adapters the config enables,
// keyed by platform for chat.NewMux. Their tokens (resolved by
// config.ResolveSecrets) are kept only inside the adapters.
func (a *app) chatAdapters(cfg *config.Config, sec *config.Secrets) (map[string]chat.Adapter, error) {
	out := map[string]chat.Adapter{}
	var err error
	if s := cfg.Chat.Slack; s != nil {
		// Replays: the store, so a restart inside the replay window forgets nothing.
		o := slack.Options{BotToken: sec.SlackBotToken, AppToken: sec.SlackAppToken, SigningSecret: sec.SlackSigningSecret,
			Mode: slack.Mode(s.Mode), APIURL: s.APIURL, Logger: a.log, Replays: a.store}
		if a.slack, err = slack.New(o); err != nil {
			return nil, err
		}
		out[chat.PlatformSlack] = a.slack
	}
	if d := cfg.Chat.Discord; d != nil {
		if a.discord, err = discord.New(discord.Options{Token: sec.DiscordToken, ApplicationID: d.ApplicationID, PublicKey: d.PublicKey, GuildID: d.GuildID, APIURL: d.APIURL, Logger: a.log, Replays: a.store}); err != nil {
			return nil, err
		}
		out[chat.PlatformDiscord] = a.discord
	}
	return out, nil
}

func (a *app) runAdapter(ctx context.Context, name string, run func(context.Context) error) {
	a.adapters.Add(1)
	go func() {
		defer a.adapters.Done()
		if err := run(ctx); err != nil && ctx.Err() == nil {
			a.log.Error("chat adapter stopped", "adapter", name, "err", err)
		}
	}()
}

type appOptions struct {
	// secrets are the start-up secrets checkConfig resolved (serve); nil:
	// startApp resolves them (the demo, whose config has none).
	secrets       *config.Secrets
	consoleTokens map[string]string // console user → their own token (serve)
	consoleOpen   bool              // the demo's open console: the body names one of users
	consoleOn     bool              // serve the web console
	channels      []string          // console channels
	users         []string          // console users (demo)
	userLabels    map[string]string
	creds         engine.CredentialSource
	extraRoutes   func(mux *http.ServeMux)
	// APIs (api.go): each is off while its token is empty.
	auditToken     string
	alertsToken    string
	alertsFallback string // channel for alerts whose cluster has none
	// plugins wraps the plugin host for the engine (the demo's make-tools
	// remedy); nil: the host itself.
	plugins func(engine.Plugins) engine.Plugins
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
	a := &app{cfg: cfg, log: log, store: st, metrics: metrics.New()}
	// serve must be able to start its built-ins; config check need not.
	if _, err := pluginsBinary(); err != nil {
		a.close()
		return nil, err
	}
	a.plugins, err = newPluginHost(cfg, log, a.metrics.PluginRestarted)
	if err != nil {
		a.close()
		return nil, err
	}
	// The console exists only when it is served: with it off, a plain
	// channel name is an error that says to enable chat.web.
	var plain chat.Adapter
	if o.consoleOn {
		wo := web.Options{Channels: o.channels, Tokens: o.consoleTokens, Open: o.consoleOpen, Users: o.users, UserLabels: o.userLabels}
		if !o.consoleOpen {
			wo.CanRead = channelReader(cfg)
		}
		if a.console, err = web.New(wo); err != nil {
			a.close()
			return nil, fmt.Errorf("chat.web: %w", err)
		}
		plain = a.console
	}
	if o.secrets == nil {
		var errs []config.FieldError
		if o.secrets, errs = cfg.ResolveSecrets(); len(errs) > 0 {
			a.close()
			return nil, &config.Errors{List: errs}
		}
	}
	platforms, err := a.chatAdapters(cfg, o.secrets)
	if err != nil {
		a.close()
		return nil, err
	}
	creds := o.creds
	if creds == nil {
		creds = credentials.SourceCredentials{Config: cfg}
	}
	chatMux := chat.NewMux(plain, platforms)
	sink := render.NewRenderer(chatMux, nil, log)
	if a.follow, err = newFollowups(cfg, st, sink, log); err != nil {
		a.close()
		return nil, err
	}
	relSource, relHook, err := newReleaseSource(cfg, st)
	if err != nil {
		a.close()
		return nil, err
	}
	// The engine reads the manifests (a failed read stops the start) and
	// passes each command's declared min_approvals to the policy itself.
	var plugins engine.Plugins = a.plugins
	if o.plugins != nil {
		plugins = o.plugins(plugins)
	}
	a.engine, err = bot.New(ctx, engine.Options{
		Config: cfg, Store: st, Plugins: plugins, Credentials: creds, Policy: approvals.New(cfg),
		Sink: sink, Logger: log, Observer: a.metrics, Hooks: append(slices.Clone(a.follow.hooks), relHook),
	})
	if err != nil {
		a.close()
		return nil, err
	}
	a.follow.setHost(a.engine)
	// Recover before any adapter can deliver a command.
	ids, err := a.engine.Recover(ctx)
	if err != nil {
		a.close()
		return nil, fmt.Errorf("recover operations: %w", err)
	}
	for _, id := range ids {
		log.Warn("operation was interrupted by a restart; resume or abandon it", "op", id)
	}
	if err := a.follow.recover(ctx, log); err != nil {
		a.close()
		return nil, fmt.Errorf("recover alertmanager silences: %w", err)
	}
	if a.console != nil {
		a.console.SetHandler(a.engine)
	}
	// Scheduled snapshots and drills (docs/BACKUPS.md); after Recover, so a
	// missed run catches up once against the recovered store.
	sched, err := schedule.New(ctx, schedule.Options{Config: cfg, Store: st, Commands: a.engine.Grammar().Specs(), Submit: a.engine.Submit, Say: sink.Reply, Log: log})
	if err != nil {
		a.close()
		return nil, fmt.Errorf("snapshot schedules: %w", err)
	}
	runCtx, cancelRun := context.WithCancel(context.WithoutCancel(ctx))
	a.stopAdapters = cancelRun
	a.runAdapter(runCtx, "schedule", sched.Run)
	// Late steps are announced, then escalated (docs/OPERATIONS.md).
	late, err := escalate.New(escalate.Options{Config: cfg, Store: st, Sink: sink, Logger: log})
	if err != nil {
		a.close()
		return nil, fmt.Errorf("late steps: %w", err)
	}
	a.runAdapter(runCtx, "escalate", late.Run)
	if err := a.startReleases(runCtx, relSource, creds, sink, log); err != nil {
		a.close()
		return nil, fmt.Errorf("release notices: %w", err)
	}
	if err := a.startCertNotices(runCtx, creds, sink, log); err != nil {
		a.close()
		return nil, fmt.Errorf("certificate notices: %w", err)
	}
	if a.slack != nil {
		a.slack.SetHandler(a.engine)
		if cfg.Chat.Slack.Mode != "http" {
			a.runAdapter(runCtx, "slack", a.slack.Run)
		} else if err := a.slack.Identify(ctx); err != nil {
			// HTTP mode learns the bot's own user id here, before it
			// serves a request: without it, the bot's own mentions would
			// be commands. A token auth.test refuses stops the start.
			a.close()
			return nil, fmt.Errorf("chat.slack (mode: http): %w", err)
		}
	}
	if a.discord != nil {
		a.discord.SetHandler(a.engine)
		a.runAdapter(runCtx, "discord", a.discord.Run)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ready\n")) })
	if o.consoleOn {
		mux.Handle("/", a.console.Handler())
	}
	if a.slack != nil && cfg.Chat.Slack.Mode == "http" {
		mux.Handle("/slack/", a.slack.HTTPHandler())
	}
	if a.discord != nil && cfg.Chat.Discord.PublicKey != "" {
		mux.Handle("/discord/", a.discord.HTTPHandler())
	}
	if err := a.mountAPIs(runCtx, mux, chatMux, o); err != nil {
		a.close()
		return nil, err
	}
	if o.extraRoutes != nil {
		o.extraRoutes(mux)
	}
	a.ln, err = net.Listen("tcp", cfg.Listen)
	if err != nil {
		a.close()
		return nil, fmt.Errorf("listen on %s (listen in the config): %w", cfg.Listen, err)
	}
	a.srv = &http.Server{Handler: refuseURLTokens(mux), ReadHeaderTimeout: readHeaderTimeout, ReadTimeout: readTimeout,
		WriteTimeout: writeTimeout, IdleTimeout: idleTimeout}
	go func() {
		if err := a.srv.Serve(a.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("http server", "err", err)
		}
	}()
	return a, nil
}

// Timeouts of the HTTP server. Slack, Discord and Alertmanager requests, and
// a request with a wrong token, are read before anything is authenticated
// (a signature covers the whole body), so anyone who can reach the port can
// send one; these bound how long such a request may hold a connection, as
// the handlers' MaxBytesReaders bound its size.
const (
	// readHeaderTimeout bounds the request line and headers.
	readHeaderTimeout = 10 * time.Second
	// readTimeout bounds the whole request, body included: every body the
	// bot accepts is small (a console command 64 KiB, a Slack request
	// 1 MiB, an Alertmanager notification 4 MiB), and 20 s is far more
	// than any of them needs. A body trickled in slower is cut off (408).
	readTimeout = 20 * time.Second
	// writeTimeout bounds a handler and its response; alert notifications
	// post to chat before they answer. The console's event stream, which
	// lives on, lifts both deadlines and sets its own per event
	// (web.StreamWriteTimeout).
	writeTimeout = time.Minute
	// idleTimeout closes a keep-alive connection left idle.
	idleTimeout = 2 * time.Minute
)

// refuseURLTokens answers 401 to a request that carries a token in its URL
// (?token=), on every endpoint but the console's event stream (EventSource
// cannot set headers): URLs land in access logs, proxies' logs and browser
// history. Refused, not ignored, so a client that sends it learns to use
// the Authorization header instead of failing some other way.
func refuseURLTokens(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if web.URLToken(r) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_ = json.NewEncoder(w).Encode(map[string]string{"error": web.URLTokenRefusal})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// channelReader says whether a console user may read a channel's
// transcript: only with a role (operator, approver or viewer) in the
// environment of a cluster bound to that channel.
func channelReader(cfg *config.Config) func(user, channel string) bool {
	pol := approvals.New(cfg)
	return func(user, channel string) bool {
		for _, cl := range cfg.Clusters {
			if slices.Contains(cl.Channels, channel) && pol.RoleOf(cl.Environment, user) != approvals.RoleNone {
				return true
			}
		}
		return false
	}
}

func (a *app) close() {
	if a.srv != nil {
		// serve exits within 10 s of SIGTERM whatever a plugin does: 3 s for
		// open requests (a console event stream never ends by itself) plus
		// the plugin host's bounded Close (plugins/host closeWait, 5 s).
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		_ = a.srv.Shutdown(ctx)
		cancel()
	}
	if a.stopAdapters != nil {
		a.stopAdapters()
		a.adapters.Wait()
	}
	if a.engine != nil {
		a.engine.Close()
	}
	a.follow.close()
	if a.plugins != nil {
		a.plugins.Close()
	}
	if a.store != nil {
		_ = a.store.Close()
	}
}
