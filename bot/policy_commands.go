package bot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	lifecyclev1 "github.com/talosbot/talosbot/plugins/proto/lifecycle/v1"
	"github.com/talosbot/talosbot/state"
)

// freezesBucket holds one Freeze per frozen cluster.
const freezesBucket = "freezes"

// policyCommands are the policy commands (/talos freeze, /talos unfreeze).
func policyCommands() []botCommand {
	dis := lifecyclev1.Effect_EFFECT_DISRUPTIVE
	return []botCommand{
		{CommandSpec{Command: &lifecyclev1.Command{Name: "freeze", Effect: dis,
			Summary: "refuse disruptive operations on a cluster until it is unfrozen",
			Args:    []*lifecyclev1.Arg{{Name: "cluster", Required: true}, {Name: "reason", Required: true, Description: "why, shown to everyone who is refused (quote it)"}},
			Example: `/talos freeze production "etcd restore drill"`}},
			func(e *Engine, ctx context.Context, from Origin, inv *Invocation) error {
				return e.setFreeze(ctx, from, inv, true)
			}},
		{CommandSpec{Command: &lifecyclev1.Command{Name: "unfreeze", Effect: dis,
			Summary: "allow disruptive operations on a frozen cluster again",
			Args:    []*lifecyclev1.Arg{{Name: "cluster", Required: true}}, Example: "/talos unfreeze production"}},
			func(e *Engine, ctx context.Context, from Origin, inv *Invocation) error {
				return e.setFreeze(ctx, from, inv, false)
			}},
	}
}

// freeze returns the cluster's freeze, or nil.
func (e *Engine) freeze(ctx context.Context, cluster string) (*Freeze, error) {
	var f *Freeze
	err := e.o.Store.View(ctx, func(tx *state.Tx) error {
		raw, err := tx.GetKV(freezesBucket, cluster)
		if errors.Is(err, state.ErrNotFound) || (err == nil && raw == nil) {
			return nil
		}
		if err != nil {
			return err
		}
		f = &Freeze{}
		return json.Unmarshal(raw, f)
	})
	return f, err
}

func (e *Engine) setFreeze(ctx context.Context, from Origin, inv *Invocation, on bool) error {
	name := inv.Args["cluster"]
	cl, err := e.resolveCluster(name, from.Channel)
	if err != nil {
		e.o.Sink.Reply(ctx, from, err.Error())
		return err
	}
	// Freezing is an operator's act: viewers may not, and a freeze does not
	// itself need the cluster unfrozen.
	if err := e.o.Policy.Authorize(ctx, PolicyRequest{User: from.User, Cluster: cl, Command: inv.Spec.Name, Disruptive: true, Now: e.now(), Housekeeping: true}); err != nil {
		e.refuse(ctx, from, cl.Name, inv, err)
		return err
	}
	cur, err := e.freeze(ctx, cl.Name)
	if err != nil {
		return err
	}
	var msg string
	err = e.o.Store.Update(ctx, func(tx *state.Tx) error {
		ev := state.AuditEvent{Time: e.now(), Actor: from.User, Cluster: cl.Name, Command: inv.Spec.Name, Result: "ok"}
		switch {
		case on:
			f := Freeze{Reason: inv.Args["reason"], By: from.User, Since: e.now()}
			raw, err := json.Marshal(f)
			if err != nil {
				return err
			}
			if err := tx.PutKV(freezesBucket, cl.Name, raw); err != nil {
				return err
			}
			ev.Action, ev.Detail = "frozen", map[string]string{"reason": f.Reason}
			msg = fmt.Sprintf("🧊 %s is frozen: disruptive commands are refused until `/talos unfreeze %s`. Reason: %s", cl.Name, cl.Name, f.Reason)
		case cur == nil:
			msg = cl.Name + " is not frozen"
			return nil
		default:
			if err := tx.DeleteKV(freezesBucket, cl.Name); err != nil {
				return err
			}
			ev.Action, ev.Detail = "unfrozen", map[string]string{"was": cur.Reason, "frozen_by": cur.By}
			msg = fmt.Sprintf("%s is unfrozen (it was frozen by %s: %s)", cl.Name, cur.By, cur.Reason)
		}
		_, err := tx.Append(ev)
		return err
	})
	if err != nil {
		e.o.Sink.Reply(ctx, from, "could not change the freeze: "+err.Error())
		return err
	}
	e.o.Sink.Reply(ctx, from, msg)
	return nil
}
