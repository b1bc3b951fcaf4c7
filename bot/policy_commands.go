package bot

import (
	"context"
	"fmt"
	"unicode/utf8"

	"github.com/talosbot/talosbot/bot/engine"
	"github.com/talosbot/talosbot/bot/grammar"
	lifecyclev1 "github.com/talosbot/talosbot/plugins/sdk/proto/lifecycle/v1"
	"github.com/talosbot/talosbot/state"
)

// policyCommands are the policy commands (/talos freeze, /talos unfreeze).
func policyCommands() []botCommand {
	dis := lifecyclev1.Effect_EFFECT_DISRUPTIVE
	return []botCommand{
		{grammar.CommandSpec{Command: &lifecyclev1.Command{Name: "freeze", Effect: dis,
			Summary: "refuse disruptive operations on a cluster until it is unfrozen",
			Args:    []*lifecyclev1.Arg{{Name: "cluster", Required: true}, {Name: "reason", Required: true, Description: "why, shown to everyone who is refused (quote it)"}},
			Example: `/talos freeze production "etcd restore drill"`}},
			func(ctx context.Context, r *Router, from engine.Origin, inv *grammar.Invocation) error {
				return setFreeze(ctx, r, from, inv, true)
			}},
		{grammar.CommandSpec{Command: &lifecyclev1.Command{Name: "unfreeze", Effect: dis,
			Summary: "allow disruptive operations on a frozen cluster again",
			Args:    []*lifecyclev1.Arg{{Name: "cluster", Required: true}}, Example: "/talos unfreeze production"}},
			func(ctx context.Context, r *Router, from engine.Origin, inv *grammar.Invocation) error {
				return setFreeze(ctx, r, from, inv, false)
			}},
	}
}

// maxFreezeReason bounds a freeze reason, in characters.
const maxFreezeReason = 280

func setFreeze(ctx context.Context, r *Router, from engine.Origin, inv *grammar.Invocation, on bool) error {
	name := inv.Args["cluster"]
	cl, err := r.ops.ResolveCluster(name, from.Channel)
	if err != nil {
		r.sink.Reply(ctx, from, err.Error())
		return err
	}
	// Freezing is an operator's act: viewers may not, and a freeze does not
	// itself need the cluster unfrozen.
	if err := r.policy.Authorize(ctx, engine.PolicyRequest{User: from.User, Cluster: cl, Command: inv.Spec.Name, Disruptive: true, Now: r.now(), Housekeeping: true}); err != nil {
		r.ops.Refuse(ctx, from, cl.Name, inv, err)
		return err
	}
	// A freeze reason is shown in every refusal and in /talos status for as
	// long as the freeze holds: a bounded sentence, not a document.
	if n := utf8.RuneCountInString(inv.Args["reason"]); on && n > maxFreezeReason {
		err := fmt.Errorf("the freeze reason is %d characters; at most %d are kept, say it shorter (the cluster is not frozen)", n, maxFreezeReason)
		r.sink.Reply(ctx, from, err.Error())
		return err
	}
	cur, err := r.ops.Freeze(ctx, cl.Name)
	if err != nil {
		return err
	}
	var msg string
	err = r.store.Update(ctx, func(tx *state.Tx) error {
		ev := state.AuditEvent{Time: r.now(), Actor: from.User, Cluster: cl.Name, Command: inv.Spec.Name, Result: "ok"}
		switch {
		case on:
			f := engine.Freeze{Reason: inv.Args["reason"], By: from.User, Since: r.now()}
			if err := engine.PutFreeze(tx, cl.Name, f); err != nil {
				return err
			}
			ev.Action, ev.Detail = "frozen", map[string]string{"reason": f.Reason}
			msg = fmt.Sprintf("🧊 %s is frozen: disruptive commands are refused until `/talos unfreeze %s`. Reason: %s", cl.Name, cl.Name, f.Reason)
		case cur == nil:
			msg = cl.Name + " is not frozen"
			return nil
		default:
			if err := engine.DeleteFreeze(tx, cl.Name); err != nil {
				return err
			}
			ev.Action, ev.Detail = "unfrozen", map[string]string{"was": cur.Reason, "frozen_by": cur.By}
			msg = fmt.Sprintf("%s is unfrozen (it was frozen by %s: %s)", cl.Name, cur.By, cur.Reason)
		}
		_, err := tx.Append(ev)
		return err
	})
	if err != nil {
		r.sink.Reply(ctx, from, "could not change the freeze: "+err.Error())
		return err
	}
	r.sink.Reply(ctx, from, msg)
	return nil
}
