package bot

import (
	"context"
	"fmt"
	"time"

	"github.com/talosbot/talosbot/bot/certnotice"
	"github.com/talosbot/talosbot/bot/engine"
	"github.com/talosbot/talosbot/bot/grammar"
	"github.com/talosbot/talosbot/bot/notice"
	lifecyclev1 "github.com/talosbot/talosbot/plugins/sdk/proto/lifecycle/v1"
)

// certCommands is `/talos certs snooze` (the expiry notices' snooze button;
// docs/OPERATIONS.md "Certificate expiry"). `/talos certs` itself is a plugin.
func certCommands() []botCommand {
	return []botCommand{snoozeCommand(&lifecyclev1.Command{Name: "certs snooze",
		Summary: "pause certificate-expiry notices for a cluster (default 7 days)",
		Example: "/talos certs snooze production --for 3d"},
		certnotice.Snoozes, "certificate-expiry notices", "thresholds crossed meanwhile are announced then; the expiry gauge keeps being exported")}
}

// snoozeCommand is a notices' snooze command (cmd names it, its summary
// and example): it pauses what names for a cluster, within sn's limits.
func snoozeCommand(cmd *lifecyclev1.Command, sn notice.Snoozes, what, meanwhile string) botCommand {
	cmd.Effect = lifecyclev1.Effect_EFFECT_WRITE
	cmd.Args = []*lifecyclev1.Arg{{Name: "cluster", Description: "cluster whose notices to pause (default: the channel's cluster)"},
		{Name: "for", Flag: true, Description: fmt.Sprintf("how long, e.g. 3d (default %dd, at most %dd)", sn.Default/(24*time.Hour), sn.Max/(24*time.Hour))}}
	return botCommand{grammar.CommandSpec{Command: cmd},
		func(ctx context.Context, r *Router, from engine.Origin, inv *grammar.Invocation) error {
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
			d, err := sn.Parse(inv.Args["for"])
			if err != nil {
				r.sink.Reply(ctx, from, err.Error())
				return err
			}
			until := r.now().Add(d)
			if err := sn.Put(ctx, r.store, cl.Name, from.User, r.now(), until); err != nil {
				return err
			}
			r.sink.Reply(ctx, from, fmt.Sprintf("😴 %s for %s are paused until %s (by %s); %s",
				what, cl.Name, until.UTC().Format(time.RFC3339), from.User, meanwhile))
			return nil
		}}
}
