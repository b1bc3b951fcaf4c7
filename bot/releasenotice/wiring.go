package releasenotice

import (
	"context"

	"github.com/talosbot/talosbot/bot/engine"
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
