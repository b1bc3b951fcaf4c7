package bot

import (
	"context"
	"errors"

	"github.com/talosbot/talosbot/bot/alertpause"
	"github.com/talosbot/talosbot/bot/engine"
	"github.com/talosbot/talosbot/bot/grammar"
	"github.com/talosbot/talosbot/state"
)

// resume is /talos resume ID [--ignore-alert NAME]. NAME must be an alert
// the operation paused on (refused otherwise). The ignored alert is
// recorded (and audited) before the resume starts the run, so the alert
// check of the resumed run already leaves it out; a resume that does not
// happen (refused, or failed) takes back what this one added, and only
// that: a name an earlier resume ignored stays ignored.
func (r *Router) resume(ctx context.Context, from engine.Origin, inv *grammar.Invocation) error {
	id, ignore := inv.Args["id"], inv.Args["ignore-alert"]
	if ignore == "" {
		return r.ops.Resume(ctx, from, id)
	}
	op, err := r.ops.Operation(ctx, id)
	if err != nil || op.State != state.StateInterrupted {
		// Resume refuses it with its usual words.
		return r.ops.Resume(ctx, from, id)
	}
	added, err := alertpause.Ignore(ctx, r.store, op, ignore, from.User, r.now())
	if errors.Is(err, alertpause.ErrNotPausedOn) {
		r.ops.Refuse(ctx, from, op.Cluster, inv, err)
		return err
	}
	if err != nil {
		return err
	}
	err = r.ops.Resume(ctx, from, id)
	if err != nil && added {
		if uerr := alertpause.Unignore(context.WithoutCancel(ctx), r.store, op, ignore, from.User, r.now()); uerr != nil {
			return errors.Join(err, uerr)
		}
	}
	return err
}
