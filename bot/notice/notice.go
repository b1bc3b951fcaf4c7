// Package notice is what the bot's scheduled notices (certificate expiry,
// bot/certnotice; new releases, bot/releasenotice) share: posting a text
// with command buttons, the schedule loop, the credentials of a read-only
// plugin Plan, and the per-cluster snooze with its audit record.
package notice

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/talosbot/talosbot/bot/chat"
	"github.com/talosbot/talosbot/bot/engine"
	"github.com/talosbot/talosbot/config"
	"github.com/talosbot/talosbot/state"
)

// Action is a button that runs a command as whoever clicks it, through the
// same grammar and policy as a typed command.
type Action struct{ Label, Command string }

// Poster posts a message with buttons to a channel.
type Poster interface {
	Post(ctx context.Context, channel, text string, actions []Action) error
}

// EnginePoster posts a notice in the channel as User, with command buttons
// minted by the engine (they run as whoever clicks, through the same
// policy as a typed command).
type EnginePoster struct {
	Buttons interface {
		CommandButtons(ctx context.Context, sugg []engine.Suggestion) ([]engine.Button, error)
	}
	Sink engine.Sink
	User string
}

// Post implements Poster.
func (p EnginePoster) Post(ctx context.Context, channel, text string, actions []Action) error {
	sugg := make([]engine.Suggestion, len(actions))
	for i, a := range actions {
		sugg[i] = engine.Suggestion{Label: a.Label, Command: a.Command}
	}
	buttons, err := p.Buttons.CommandButtons(ctx, sugg)
	if err != nil {
		return fmt.Errorf("mint the notice's buttons: %w", err)
	}
	p.Sink.ReplyButtons(ctx, engine.Origin{User: p.User, Channel: channel, System: true}, text, buttons)
	return nil
}

// Credentials resolves a cluster's client configurations for one call
// (the bot's credential source); they live only in the request.
type Credentials func(ctx context.Context, cl *config.Cluster) (talosconfig, kubeconfig []byte, err error)

// FromSource adapts the bot's credential source.
func FromSource(src engine.CredentialSource) Credentials {
	return func(ctx context.Context, cl *config.Cluster) ([]byte, []byte, error) {
		c, err := src.Resolve(ctx, cl)
		if err != nil {
			return nil, nil, err
		}
		return c.Talosconfig, c.Kubeconfig, nil
	}
}

// Loop calls tick at each time next gives after now() until ctx ends.
func Loop(ctx context.Context, now func() time.Time, next func(time.Time) time.Time, tick func(context.Context, time.Time)) {
	for {
		t := time.NewTimer(max(0, next(now()).Sub(now())))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
			tick(ctx, now())
		}
	}
}

// Snoozes are one kind of notice's per-cluster snoozes: a record in Bucket
// under "snooze/<cluster>", written with its audit record.
type Snoozes struct {
	Bucket string
	// Command and Action name the audit record ("certs snooze", "certs.snoozed").
	Command, Action string
	// Default is the length of an empty --for; Max the longest allowed.
	Default, Max time.Duration
}

type snooze struct {
	Until time.Time `json:"until"`
	By    string    `json:"by"`
}

func snoozeKey(cluster string) string { return "snooze/" + cluster }

// Parse reads a snooze length ("7d", "36h"; empty: Default), at most Max.
func (s Snoozes) Parse(in string) (time.Duration, error) {
	if strings.TrimSpace(in) == "" {
		return s.Default, nil
	}
	d, err := config.ParseDuration(in)
	if err != nil {
		return 0, fmt.Errorf("--for %s: %w", chat.Echo(in), err)
	}
	if d <= 0 || d > s.Max {
		return 0, fmt.Errorf("--for %s: between 1m and %dd", chat.Echo(in), s.Max/(24*time.Hour))
	}
	return d, nil
}

// Put records a snooze of cluster's notices until until, with its audit
// record in the same transaction.
func (s Snoozes) Put(ctx context.Context, st *state.Store, cluster, by string, now, until time.Time) error {
	raw, err := json.Marshal(snooze{Until: until.UTC(), By: by})
	if err != nil {
		return err
	}
	return st.Update(ctx, func(tx *state.Tx) error {
		if err := tx.PutKV(s.Bucket, snoozeKey(cluster), raw); err != nil {
			return err
		}
		_, err := tx.Append(state.AuditEvent{Time: now, Actor: by, Cluster: cluster, Command: s.Command, Action: s.Action, Result: "ok",
			Detail: map[string]string{"until": until.UTC().Format(time.RFC3339)}})
		return err
	})
}

// Until is the end of cluster's snooze in st (zero: not snoozed).
func (s Snoozes) Until(ctx context.Context, st *state.Store, cluster string) (time.Time, error) {
	var sn snooze
	err := st.View(ctx, func(tx *state.Tx) error {
		raw, err := tx.GetKV(s.Bucket, snoozeKey(cluster))
		if errors.Is(err, state.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		return json.Unmarshal(raw, &sn)
	})
	return sn.Until, err
}
