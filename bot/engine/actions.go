package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/talosbot/talosbot/bot/chat"
	"github.com/talosbot/talosbot/plugins/host"

	lifecyclev1 "github.com/talosbot/talosbot/plugins/sdk/proto/lifecycle/v1"
	"github.com/talosbot/talosbot/state"
)

// actionsBucket maps opaque button tokens to what they mean. Buttons carry
// only the token, so a forged or stale id resolves to nothing.
const actionsBucket = "actions"

type actionRecord struct {
	OpID    string `json:"op"`
	Kind    string `json:"kind"` // approve, deny, cancel, run
	Command string `json:"command,omitempty"`
	// Digest binds approve/deny buttons to the plan they were shown with.
	Digest string `json:"digest,omitempty"`
}

// mintButtons stores one token per button (kinds[i] for buttons[i]).
func (e *Engine) mintButtons(tx *state.Tx, op *state.Operation, buttons []Button, kinds ...string) ([]Button, error) {
	out := make([]Button, len(buttons))
	for i, b := range buttons {
		rec := actionRecord{OpID: op.ID, Kind: kinds[i], Digest: op.Digest}
		if rec.Kind == "run" {
			rec.Command = b.ID // caller passes the command text in ID
		}
		raw, err := json.Marshal(rec)
		if err != nil {
			return nil, err
		}
		tok := "a" + e.o.NewID() + e.o.NewID()
		if err := tx.PutKV(actionsBucket, tok, raw); err != nil {
			return nil, err
		}
		b.ID = tok
		out[i] = b
	}
	return out, nil
}

// Suggestion is a command offered as a button.
type Suggestion struct {
	Label   string
	Command string // a command line, e.g. "/talos status production"
}

// CommandButtons mints buttons that run commands when clicked, as the
// clicking user and through the same policy as typed commands (alert
// suggestions, "more" pages, rollback offers).
func (e *Engine) CommandButtons(ctx context.Context, sugg []Suggestion) ([]Button, error) {
	var out []Button
	err := e.o.Store.Update(ctx, func(tx *state.Tx) error {
		for _, s := range sugg {
			raw, err := json.Marshal(actionRecord{Kind: "run", Command: s.Command})
			if err != nil {
				return err
			}
			tok := "a" + e.o.NewID() + e.o.NewID()
			if err := tx.PutKV(actionsBucket, tok, raw); err != nil {
				return err
			}
			out = append(out, Button{ID: tok, Label: s.Label})
		}
		return nil
	})
	return out, err
}

// ActionError is a refused button click; the message says why.
type ActionError struct{ Msg string }

func (e *ActionError) Error() string { return e.Msg }

// Act handles a button click. Every refusal is answered, audited with the
// actor, and changes nothing else.
func (e *Engine) Act(ctx context.Context, from Origin, actionID string) error {
	var rec actionRecord
	err := e.o.Store.View(ctx, func(tx *state.Tx) error {
		raw, err := tx.GetKV(actionsBucket, actionID)
		if err != nil {
			return err
		}
		return json.Unmarshal(raw, &rec)
	})
	if err != nil || (rec.OpID == "" && rec.Kind != "run") {
		return e.refuseAction(ctx, from, nil, "unknown action", "this button is unknown or no longer valid; run the command again")
	}
	if rec.Kind == "run" {
		// Runs as the clicking user, through the same grammar and policy as a
		// typed command, and answers in the channel like one.
		_, err := e.Submit(ctx, public(from), rec.Command)
		return err
	}
	op, err := e.Operation(ctx, rec.OpID)
	if err != nil {
		return e.refuseAction(ctx, from, nil, "unknown operation", "the operation behind this button no longer exists")
	}
	if (rec.Kind == "approve" || rec.Kind == "deny" || rec.Kind == "confirm") && rec.Digest != op.Digest {
		return e.refuseAction(ctx, from, op, rec.Kind, "this button belongs to an earlier plan of "+op.ID+" that is void; use the buttons on the new plan")
	}
	switch rec.Kind {
	case "approve":
		return e.approve(ctx, from, op, false)
	case "confirm":
		if from.User != op.Requester {
			return e.refuseAction(ctx, from, op, "confirm", "only "+op.Requester+" can confirm their own approval of "+op.ID)
		}
		return e.approve(ctx, from, op, true)
	case "deny":
		return e.deny(ctx, from, op)
	case "cancel":
		return e.Cancel(ctx, from, op.ID)
	case "pause":
		return e.Pause(ctx, from, op.ID)
	}
	return e.refuseAction(ctx, from, op, "unknown action", "this button is unknown")
}

// public is from for an answer everyone in the channel needs: a Cancel or
// Pause that was clicked changes an operation others are watching, so its
// acknowledgement is posted like the answer to the typed command, never to
// the clicker alone (Origin.Click is for a refused or repeated click).
func public(from Origin) Origin {
	from.Click = false
	return from
}

func (e *Engine) refuseAction(ctx context.Context, from Origin, op *state.Operation, what, msg string) error {
	ev := state.AuditEvent{Time: e.now(), Actor: from.User, Action: "action refused", Result: "refused", Detail: map[string]string{"what": what, "reason": msg}}
	if op != nil {
		ev.Cluster, ev.OpID, ev.Command = op.Cluster, op.ID, op.Command
	}
	aerr := e.audit(ctx, ev)
	e.o.Sink.Reply(ctx, from, "refused: "+msg)
	if aerr != nil {
		// The click stays refused; an unrecorded refusal is reported with it.
		return errors.Join(&ActionError{Msg: msg}, aerr)
	}
	return &ActionError{Msg: msg}
}

// Approve is `/talos approve ID`, the typed twin of the Approve button: an
// approval that does not depend on a chat message (one lost to a restart, a
// platform whose buttons fail). It takes the button's own path (approve):
// the same expiry, approver, self-approval (the requester is offered the
// Confirm button, as after a click), duplicate and digest checks, and the
// same audit records. It approves the plan the operation awaits approval
// for now, the one its card shows; the approval is bound to that digest.
func (e *Engine) Approve(ctx context.Context, from Origin, id string) error {
	op, err := e.Operation(ctx, id)
	if err != nil {
		return e.refuseAction(ctx, from, nil, "approve", fmt.Sprintf("no operation %s; /talos status lists the operations awaiting approval", chat.Echo(id)))
	}
	return e.approve(ctx, from, op, false)
}

// Deny is `/talos deny ID`, the typed twin of the Deny button, through the
// button's own path (deny): an approver or the requester may deny.
func (e *Engine) Deny(ctx context.Context, from Origin, id string) error {
	op, err := e.Operation(ctx, id)
	if err != nil {
		return e.refuseAction(ctx, from, nil, "deny", fmt.Sprintf("no operation %s; /talos status lists the operations awaiting approval", chat.Echo(id)))
	}
	return e.deny(ctx, from, op)
}

// approve records one approval. A requester approving their own request
// (allowed only with allow_self_approval) must confirm it explicitly after
// seeing the plan: the first click asks, the Confirm button approves.
func (e *Engine) approve(ctx context.Context, from Origin, op *state.Operation, confirmed bool) error {
	if op.State != state.StateAwaitingApproval {
		return e.refuseAction(ctx, from, op, "approve", fmt.Sprintf("operation %s is %s; there is nothing to approve", op.ID, op.State))
	}
	if !op.ExpiresAt.IsZero() && e.now().After(op.ExpiresAt) {
		_, _ = e.transition(ctx, op.ID, state.StateExpired, "system", "expired", "", map[string]string{"expired_at": op.ExpiresAt.String()}, nil)
		return e.refuseAction(ctx, from, op, "approve", fmt.Sprintf("the approval request for %s expired at %s; run the command again", op.ID, op.ExpiresAt.Format("15:04 MST")))
	}
	if err := e.o.Policy.CanApprove(op, from.User); err != nil {
		return e.refuseAction(ctx, from, op, "approve", err.Error())
	}
	if from.User == op.Requester && !confirmed {
		var buttons []Button
		err := e.o.Store.Update(ctx, func(tx *state.Tx) error {
			var err error
			buttons, err = e.mintButtons(tx, op, []Button{{Label: "Confirm my approval", Style: "danger"}}, "confirm")
			return err
		})
		if err != nil {
			return err
		}
		e.o.Sink.ReplyButtons(ctx, from, fmt.Sprintf("You are approving your own request %s (plan %s). Read the plan above, then confirm.", op.ID, host.ShortDigest(op.Digest)), buttons)
		return nil
	}
	need := e.requiredApprovals(op)
	var (
		dup, done bool
		count     int
	)
	err := e.o.Store.Update(ctx, func(tx *state.Tx) error {
		cur, err := tx.Operation(op.ID)
		if err != nil {
			return err
		}
		if cur.State != state.StateAwaitingApproval || cur.Digest != op.Digest {
			return &ActionError{Msg: fmt.Sprintf("operation %s changed (%s) while you clicked; look at the latest message", op.ID, cur.State)}
		}
		apps, err := tx.Approvals(op.ID)
		if err != nil {
			return err
		}
		if slices.ContainsFunc(apps, func(a state.Approval) bool { return a.User == from.User && a.Digest == op.Digest }) {
			dup = true
			_, err := tx.Append(e.event(from.User, "approval", cur, "duplicate", map[string]string{"digest": op.Digest, "note": "already approved; counted once"}))
			return err
		}
		if err := tx.PutApproval(state.Approval{OpID: op.ID, User: from.User, Digest: op.Digest, At: e.now()}); err != nil {
			return err
		}
		count = len(apps) + 1
		detail := map[string]string{"digest": op.Digest, "count": fmt.Sprint(count), "required": fmt.Sprint(need)}
		if from.User == cur.Requester {
			detail["self_approval"] = "confirmed after the plan was shown"
		}
		if _, err := tx.Append(e.event(from.User, "approval", cur, "ok", detail)); err != nil {
			return err
		}
		if count < need {
			return nil
		}
		if err := tx.AcquireLock(state.Lock{Cluster: cur.Cluster, OpID: cur.ID, Holder: cur.Requester, Command: cur.Command, Since: e.now()}); err != nil {
			return err
		}
		o, err := tx.Transition(op.ID, state.StateApproved, func(o *state.Operation) { o.UpdatedAt = e.now() })
		if err != nil {
			return err
		}
		done = true
		_, err = tx.Append(e.event(from.User, "approved", o, "approved", map[string]string{"digest": op.Digest, "approvals": fmt.Sprint(count)}))
		return err
	})
	var ae *ActionError
	switch {
	case errors.As(err, &ae):
		return e.refuseAction(ctx, from, op, "approve", ae.Msg)
	case errors.Is(err, state.ErrLocked):
		return e.refuseAction(ctx, from, op, "approve", err.Error())
	case err != nil:
		e.o.Sink.Reply(ctx, from, "could not record the approval: "+err.Error())
		return err
	}
	if dup {
		e.o.Sink.Reply(ctx, from, fmt.Sprintf("you already approved %s; your approval is counted once", op.ID))
		return nil
	}
	e.notifyChanged()
	cur, _ := e.Operation(ctx, op.ID)
	if cur != nil {
		e.o.Sink.Thread(ctx, cur, fmt.Sprintf("👍 approved by %s (%d/%d)", from.User, count, need))
		e.emit(ctx, Update{Op: cur})
	}
	if done {
		if cur != nil {
			e.o.Observer.Approved(cur, e.now().Sub(cur.ExpiresAt.Add(-e.o.Policy.Expiry(cur))))
		}
		e.goRun(func(ctx context.Context) { e.execute(ctx, op.ID) })
	}
	return nil
}

func (e *Engine) deny(ctx context.Context, from Origin, op *state.Operation) error {
	if op.State != state.StateAwaitingApproval {
		return e.refuseAction(ctx, from, op, "deny", fmt.Sprintf("operation %s is %s; there is nothing to deny", op.ID, op.State))
	}
	if err := e.o.Policy.CanApprove(op, from.User); err != nil && from.User != op.Requester {
		return e.refuseAction(ctx, from, op, "deny", err.Error())
	}
	_, err := e.transition(ctx, op.ID, state.StateDenied, from.User, "denied", "", nil, func(o *state.Operation) {
		o.Result = "denied by " + from.User
	})
	if err != nil {
		return e.refuseAction(ctx, from, op, "deny", err.Error())
	}
	return nil
}

// Cancel stops an operation that has not finished. A running one is cancelled
// through its context, which reaches the plugin.
func (e *Engine) Cancel(ctx context.Context, from Origin, id string) error {
	op, err := e.Operation(ctx, id)
	if err != nil {
		return e.refuseAction(ctx, from, nil, "cancel", fmt.Sprintf("no operation %s", chat.Echo(id)))
	}
	if from.User != op.Requester && e.o.Policy.CanApprove(op, from.User) != nil {
		return e.refuseAction(ctx, from, op, "cancel", "only the requester or an approver may cancel "+id)
	}
	switch op.State {
	case state.StatePlanned, state.StateAwaitingApproval, state.StateApproved:
		// The run may start between the read above and this write: decide on
		// the state inside the transaction, never cancel a running op's
		// record while its plugin goes on.
		_, err := e.transitionFrom(ctx, id, []state.OpState{state.StatePlanned, state.StateAwaitingApproval, state.StateApproved},
			state.StateCancelled, from.User, "cancelled", "", nil,
			func(o *state.Operation) { o.Result = "cancelled by " + from.User }, nil)
		if errors.Is(err, errStateMoved) {
			if cur, _ := e.Operation(ctx, id); cur != nil && cur.State == state.StateRunning {
				return e.cancelRun(ctx, from, id)
			}
		}
		if err != nil {
			return e.refuseAction(ctx, from, op, "cancel", err.Error())
		}
		return nil
	case state.StateRunning:
		return e.cancelRun(ctx, from, id)
	case state.StateInterrupted:
		return e.refuseAction(ctx, from, op, "cancel", id+" was interrupted; use /talos resume "+id+" or /talos abandon "+id)
	}
	return e.refuseAction(ctx, from, op, "cancel", fmt.Sprintf("operation %s is already %s", id, op.State))
}

// cancelRun cancels a running operation through its context, which reaches
// the plugin; the run then ends as cancelled.
func (e *Engine) cancelRun(ctx context.Context, from Origin, id string) error {
	{
		// Who cancelled is only used to word the end of the run; cancel anyway.
		if err := e.o.Store.Update(ctx, func(tx *state.Tx) error { return tx.PutKV(cancelBucket, id, []byte(from.User)) }); err != nil {
			e.log.Warn("record who cancelled", "op", id, "err", err)
		}
		e.mu.Lock()
		if cancel := e.running[id]; cancel != nil {
			cancel()
		} else {
			e.cancelled[id] = true // the run is starting; it cancels itself
		}
		e.mu.Unlock()
		e.o.Sink.Reply(ctx, public(from), "cancelling "+id+" at "+from.User+"'s request; the plugin stops at its next safe point")
		return nil
	}
}

// interrupted loads operation id for an action only an interrupted
// operation takes (resume, abandon). Otherwise it returns nil and the
// refusal, audited and answered as every refused action is.
func (e *Engine) interrupted(ctx context.Context, from Origin, id, verb, done string) (*state.Operation, error) {
	op, err := e.Operation(ctx, id)
	if err != nil {
		return nil, e.refuseAction(ctx, from, nil, verb, fmt.Sprintf("no operation %s", chat.Echo(id)))
	}
	if op.State != state.StateInterrupted {
		return nil, e.refuseAction(ctx, from, op, verb, fmt.Sprintf("operation %s is %s; only interrupted operations can be %s", id, op.State, done))
	}
	return op, nil
}

// Resume continues an interrupted operation. Plugins skip steps already done.
func (e *Engine) Resume(ctx context.Context, from Origin, id string) error {
	op, err := e.interrupted(ctx, from, id, "resume", "resumed")
	if op == nil {
		return err
	}
	cl := e.o.Config.Cluster(op.Cluster)
	if cl == nil {
		return e.refuseAction(ctx, from, op, "resume", "cluster "+op.Cluster+" is no longer configured")
	}
	frozen, err := e.Freeze(ctx, cl.Name)
	if err != nil {
		return err
	}
	// Resuming runs the operation again: it needs what running it needs
	// (a viewer may not resume an interrupted snapshot, a WRITE command).
	spec, _ := e.grammar.Lookup(op.Command)
	writes := spec.Command != nil && spec.GetEffect() == lifecyclev1.Effect_EFFECT_WRITE
	if err := e.o.Policy.Authorize(ctx, PolicyRequest{User: from.User, Cluster: cl, Command: "resume", Disruptive: op.Disruptive, Writes: writes, Args: op.Args, Now: e.now(), Frozen: frozen}); err != nil {
		return e.refuseAction(ctx, from, op, "resume", err.Error())
	}
	return e.resumeReplanned(ctx, from, op)
}

// Abandon gives up an interrupted operation and releases its lock.
func (e *Engine) Abandon(ctx context.Context, from Origin, id string) error {
	op, err := e.interrupted(ctx, from, id, "abandon", "abandoned")
	if op == nil {
		return err
	}
	cl := e.o.Config.Cluster(op.Cluster)
	if cl != nil {
		if err := e.o.Policy.Authorize(ctx, PolicyRequest{User: from.User, Cluster: cl, Command: "abandon", Disruptive: true, Now: e.now(), Housekeeping: true}); err != nil {
			return e.refuseAction(ctx, from, op, "abandon", err.Error())
		}
	}
	ended, err := e.transition(ctx, id, state.StateCancelled, from.User, "abandoned", "abandoned", nil,
		func(o *state.Operation) { o.Result = "abandoned by " + from.User })
	if err != nil {
		return e.refuseAction(ctx, from, op, "abandon", err.Error())
	}
	e.runEnded(ctx, ended, RunOutput{})
	return nil
}

// HandleCommand implements chat.Handler.
func (e *Engine) HandleCommand(ctx context.Context, c chat.Command) error {
	e.o.Observer.Input(c.Channel, "command")
	_, err := e.Submit(ctx, Origin{User: c.User, Channel: c.Channel}, c.Text)
	return err
}

// HandleAction implements chat.Handler.
func (e *Engine) HandleAction(ctx context.Context, a chat.Action) error {
	e.o.Observer.Input(a.Channel, "action")
	return e.Act(ctx, Origin{User: a.User, Channel: a.Channel, Click: true}, a.ActionID)
}

// HandleRefusal implements chat.Handler: input an adapter refused (a replayed
// signed request, a console token naming another user, a stale button) is
// audited with the credential's user and answered where it came from. A
// refused click is recorded exactly like a click the engine refuses itself.
func (e *Engine) HandleRefusal(ctx context.Context, r chat.Refusal) error {
	from := Origin{User: r.User, Channel: r.Channel, Click: r.What == "action"}
	action := "request refused"
	if r.What == "action" {
		action = "action refused"
	}
	detail := map[string]string{"what": r.What, "reason": r.Reason}
	for k, v := range r.Detail {
		if _, taken := detail[k]; !taken {
			detail[k] = v
		}
	}
	if r.Channel != "" {
		detail["channel"] = r.Channel
	}
	actor := r.User
	if actor == "" {
		actor = "unknown"
	}
	ev := state.AuditEvent{Time: e.now(), Actor: actor, Action: action, Result: "refused", Detail: detail}
	if err := e.o.Store.Update(ctx, func(tx *state.Tx) error { _, err := tx.Append(ev); return err }); err != nil {
		return fmt.Errorf("audit refused %s: %w", r.What, err)
	}
	if r.Channel != "" {
		e.o.Sink.Reply(ctx, from, "refused: "+r.Reason)
	}
	return &ActionError{Msg: r.Reason}
}
