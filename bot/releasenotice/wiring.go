package releasenotice

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/talosbot/talosbot/bot/chat"
	"github.com/talosbot/talosbot/bot/engine"
	"github.com/talosbot/talosbot/config"
	"github.com/talosbot/talosbot/state"
)

// Hook is Notes as an engine hook: it only adds request notes, and has
// nothing to do around runs.
type Hook struct{ *Notes }

var (
	_ engine.RunHook         = Hook{}
	_ engine.ReleaseEvidence = Hook{}
)

// RunStarting does nothing.
func (Hook) RunStarting(context.Context, *state.Operation) ([]string, error) { return nil, nil }

// RunProgress does nothing.
func (Hook) RunProgress(context.Context, *state.Operation) {}

// RunEnded does nothing.
func (Hook) RunEnded(context.Context, *state.Operation, engine.RunOutput) []string { return nil }

// EnginePoster posts a notice as a reply in the channel, with command
// buttons minted by the engine (they run as whoever clicks, through the
// same policy as a typed command).
type EnginePoster struct {
	Buttons interface {
		CommandButtons(ctx context.Context, sugg []engine.Suggestion) ([]engine.Button, error)
	}
	Sink engine.Sink
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
	p.Sink.ReplyButtons(ctx, engine.Origin{User: User, Channel: channel, System: true}, text, buttons)
	return nil
}

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

// SnoozeCluster records a snooze of cluster's notices until until, with
// its audit record in the same transaction (the `/talos releases snooze`
// command).
func SnoozeCluster(ctx context.Context, st *state.Store, cluster, by string, now, until time.Time) error {
	raw, err := json.Marshal(snooze{Until: until.UTC(), By: by})
	if err != nil {
		return err
	}
	return st.Update(ctx, func(tx *state.Tx) error {
		if err := tx.PutKV(Bucket, snoozeKey(cluster), raw); err != nil {
			return err
		}
		_, err := tx.Append(state.AuditEvent{Time: now, Actor: by, Cluster: cluster, Command: "releases snooze", Action: "releases.snoozed", Result: "ok",
			Detail: map[string]string{"until": until.UTC().Format(time.RFC3339)}})
		return err
	})
}

// ParseSnooze reads the snooze length ("7d", "36h"; empty: DefaultSnooze),
// at most 90 days so that a typo does not silence a cluster for years.
func ParseSnooze(s string) (time.Duration, error) {
	if strings.TrimSpace(s) == "" {
		return DefaultSnooze, nil
	}
	d, err := config.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("--for %s: %w", chat.Echo(s), err)
	}
	if d <= 0 || d > 90*24*time.Hour {
		return 0, fmt.Errorf("--for %s: between 1m and 90d", chat.Echo(s))
	}
	return d, nil
}
