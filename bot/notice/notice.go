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
	lifecyclev1 "github.com/talosbot/talosbot/plugins/sdk/proto/lifecycle/v1"
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

// Planner is the part of the plugin host a read uses
// (plugins/host.Manager.Plan).
type Planner interface {
	Plan(ctx context.Context, name string, req *lifecyclev1.OperationRequest) (*lifecyclev1.OperationPlan, error)
}

// Read is one read-only plugin's Plan of a cluster: Plugin's Command, asked
// as User with the cluster's credentials (only in the request) and ev. It
// creates no operation: a daily check that posts nothing leaves no trace in
// chat. It returns the plan's canonical inputs, which carry what was read.
type Read struct {
	Config      *config.Config
	Plugins     Planner
	Credentials Credentials
	// Plugin and Command name the plugin and its read-only command; User
	// is the requester; ID prefixes the operation id ("<ID>-<cluster>").
	Plugin, Command, User, ID string
}

// Of plans r's command on cluster with evidence ev (nil: none).
func (r *Read) Of(ctx context.Context, cluster string, ev *lifecyclev1.Evidence) ([]byte, error) {
	cl := r.Config.Cluster(cluster)
	if cl == nil {
		return nil, fmt.Errorf("cluster %s is not configured", chat.Echo(cluster))
	}
	tc, kc, err := r.Credentials(ctx, cl)
	if err != nil {
		return nil, fmt.Errorf("credentials for %s: %w", cluster, err)
	}
	pc := &lifecyclev1.Cluster{Name: cl.Name, Environment: cl.Environment, Endpoints: cl.Endpoints}
	for _, n := range cl.Nodes {
		pc.Nodes = append(pc.Nodes, &lifecyclev1.Node{Name: n.Name, Address: n.Address, Role: n.Role, Host: n.Host, Platform: n.Platform, InstallerClass: n.InstallerClass})
	}
	section, err := r.Config.Plugins.PluginSection(r.Plugin)
	if err != nil {
		return nil, fmt.Errorf("plugins.%s: %w", r.Plugin, err)
	}
	req := &lifecyclev1.OperationRequest{
		OperationId: r.ID + "-" + cl.Name, Command: r.Command, Cluster: pc, Requester: r.User, Config: section,
		Credentials: &lifecyclev1.Credentials{Talosconfig: tc, Kubeconfig: kc},
		Settings:    &lifecyclev1.Settings{GateTimeoutMs: r.Config.Timeouts.Gate.D().Milliseconds(), NodeTimeoutMs: r.Config.Timeouts.Node.D().Milliseconds()},
		Evidence:    ev,
	}
	plan, err := r.Plugins.Plan(ctx, r.Plugin, req)
	if err != nil {
		return nil, fmt.Errorf("the %s plugin could not read %s: %w", r.Plugin, cluster, err)
	}
	if rf := plan.GetRefusal(); rf != nil {
		return nil, fmt.Errorf("the %s plugin refused %s: %s: %s", r.Plugin, cluster, rf.GetRule(), rf.GetReason())
	}
	return plan.GetCanonicalInputs(), nil
}
