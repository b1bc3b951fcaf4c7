package bot

import (
	"context"
	"fmt"
	"time"

	"github.com/talosbot/talosbot/bot/certnotice"
	"github.com/talosbot/talosbot/bot/engine"
	"github.com/talosbot/talosbot/bot/grammar"
	lifecyclev1 "github.com/talosbot/talosbot/plugins/sdk/proto/lifecycle/v1"
)

// certCommands is `/talos certs snooze` (the expiry notices' snooze button;
// docs/OPERATIONS.md "Certificate expiry"). `/talos certs` itself is a plugin.
func certCommands() []botCommand {
	return []botCommand{
		{grammar.CommandSpec{Command: &lifecyclev1.Command{Name: "certs snooze", Effect: lifecyclev1.Effect_EFFECT_WRITE,
			Summary: "pause certificate-expiry notices for a cluster (default 7 days)",
			Args: []*lifecyclev1.Arg{{Name: "cluster", Description: "cluster whose notices to pause (default: the channel's cluster)"},
				{Name: "for", Flag: true, Description: "how long, e.g. 3d (default 7d, at most 30d)"}},
			Example: "/talos certs snooze production --for 3d"}},
			func(ctx context.Context, r *Router, from engine.Origin, inv *grammar.Invocation) error {
				return snoozeCerts(ctx, r, from, inv)
			}},
	}
}

func snoozeCerts(ctx context.Context, r *Router, from engine.Origin, inv *grammar.Invocation) error {
	cl, err := r.ops.ResolveCluster(inv.Args["cluster"], from.Channel)
	if err != nil {
		r.sink.Reply(ctx, from, err.Error())
		return err
	}
	// It writes state the bot keeps: the operator role, nothing more.
	if err := r.policy.Authorize(ctx, engine.PolicyRequest{User: from.User, Cluster: cl, Command: inv.Spec.Name, Writes: true, Now: r.now(), Housekeeping: true}); err != nil {
		r.ops.Refuse(ctx, from, cl.Name, inv, err)
		return err
	}
	d, err := certnotice.ParseSnooze(inv.Args["for"])
	if err != nil {
		r.sink.Reply(ctx, from, err.Error())
		return err
	}
	until := r.now().Add(d)
	if err := certnotice.SnoozeCluster(ctx, r.store, cl.Name, from.User, r.now(), until); err != nil {
		return err
	}
	r.sink.Reply(ctx, from, fmt.Sprintf("😴 certificate-expiry notices for %s are paused until %s (by %s); thresholds crossed meanwhile are announced then; the expiry gauge keeps being exported",
		cl.Name, until.UTC().Format(time.RFC3339), from.User))
	return nil
}
