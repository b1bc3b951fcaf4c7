package main

import (
	"context"
	"log/slog"

	"github.com/talosbot/talosbot/bot/alertpause"
	"github.com/talosbot/talosbot/bot/alerts"
	"github.com/talosbot/talosbot/bot/engine"
	"github.com/talosbot/talosbot/bot/gitbump"
	"github.com/talosbot/talosbot/bot/silence"
	"github.com/talosbot/talosbot/config"
	"github.com/talosbot/talosbot/state"
)

// followups are the run hooks the config enables: the Alertmanager silence
// (silences) and the Terraform version bump as a Git change (git_followup).
type followups struct {
	hooks      []engine.RunHook
	silences   *silence.Manager
	alertPause *alertpause.Checker
}

// setHost gives the hooks that act on runs the engine, built after them.
func (f *followups) setHost(e *engine.Engine) {
	if f != nil && f.alertPause != nil {
		f.alertPause.SetHost(e)
	}
}

func newFollowups(cfg *config.Config, st *state.Store, sink engine.Sink, log *slog.Logger) (*followups, error) {
	f := &followups{}
	if cfg.Silences != nil {
		client, err := silence.NewClient(cfg.Silences, nil)
		if err != nil {
			return nil, err
		}
		if f.silences, err = silence.New(silence.Options{Config: cfg.Silences, Store: st, Client: client, Logger: log}); err != nil {
			return nil, err
		}
		f.hooks = append(f.hooks, f.silences)
		// The pause on alerts asks the same Alertmanager (on unless
		// alert_pause.disabled); after the silence, so it sees its id.
		if !cfg.AlertPause.Disabled {
			if f.alertPause, err = alertpause.New(alertpause.Options{Config: &cfg.AlertPause, Sink: sink, ClusterLabel: cfg.Silences.ClusterLabel,
				Store: st, Client: client, OwnSilence: f.silences.SilenceID, Logger: log}); err != nil {
				return nil, err
			}
			f.hooks = append(f.hooks, f.alertPause)
		}
	}
	if cfg.Git != nil {
		b, err := gitbump.New(gitbump.Options{Config: cfg.Git, Store: st, Logger: log})
		if err != nil {
			return nil, err
		}
		f.hooks = append(f.hooks, b)
	}
	return f, nil
}

// recover runs after the engine's recovery: silences of operations that
// ended while the bot was down are expired.
func (f *followups) recover(ctx context.Context, log *slog.Logger) error {
	if f == nil || f.silences == nil {
		return nil
	}
	lines, err := f.silences.Recover(ctx)
	for _, l := range lines {
		log.Info("alertmanager silence at start-up", "detail", l)
	}
	return err
}

// alertSilences is what the alert receiver asks; nil (not a typed nil)
// when silences are off.
func (f *followups) alertSilences() alerts.Silences {
	if f == nil || f.silences == nil {
		return nil
	}
	return f.silences
}

func (f *followups) close() {
	if f != nil && f.alertPause != nil {
		f.alertPause.Close()
	}
	if f != nil && f.silences != nil {
		f.silences.Close()
	}
}
