package bot

import (
	"context"
	"errors"

	"github.com/talosbot/talosbot/bot/alertpause"
	"github.com/talosbot/talosbot/bot/engine"
	"github.com/talosbot/talosbot/state"
)

// resume is /talos resume ID [--ignore-alert NAME]. The ignored alert is
// recorded (and audited) before the resume starts the run, so the alert
// check of the resumed run already leaves it out; a refused resume takes it
// back.
func resume(ctx context.Context, e *engine.Engine, from engine.Origin, id, ignore string) error {
	if ignore == "" {
		return e.Resume(ctx, from, id)
	}
	op, err := e.Operation(ctx, id)
	if err != nil || op.State != state.StateInterrupted {
		// Resume refuses it with its usual words.
		return e.Resume(ctx, from, id)
	}
	if err := alertpause.Ignore(ctx, e.Store(), op, ignore, from.User, e.Now()); err != nil {
		return err
	}
	err = e.Resume(ctx, from, id)
	var ae *engine.ActionError
	if errors.As(err, &ae) {
		_ = alertpause.Unignore(context.WithoutCancel(ctx), e.Store(), id, ignore)
	}
	return err
}
