package engine

import (
	"context"
	"fmt"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"

	lifecyclev1 "github.com/talosbot/talosbot/plugins/sdk/proto/lifecycle/v1"
	"github.com/talosbot/talosbot/state"
)

// approvalButtons are the buttons of an approval card, with their kinds.
func approvalButtons() ([]Button, []string) {
	return []Button{{Label: "Approve", Style: "primary"}, {Label: "Deny", Style: "danger"}, {Label: "Cancel"}},
		[]string{"approve", "deny", "cancel"}
}

// announceAwaiting posts every operation that awaits approval to its channel
// again, at start-up. The message that carried its buttons may be gone (the
// console keeps no messages across a restart) or far up the channel, and
// nothing else would bring it back: the request would be stranded until it
// expired. Each gets its card again, showing the approvals already given
// (they live in the store, bound to the plan's digest), with Approve, Deny
// and Cancel buttons minted for the same digest, and a thread line saying
// why. The buttons minted before the restart keep working: their tokens
// live in the store too, and a click on either card takes the same checks
// (Act), so no click is lost and none counts twice. A request that expired
// while talosbot was stopped is marked expired (audited) instead, and not
// offered again.
func (e *Engine) announceAwaiting(ctx context.Context) error {
	var ops []*state.Operation
	err := e.o.Store.View(ctx, func(tx *state.Tx) error {
		var err error
		ops, err = tx.Operations(state.OpFilter{States: []state.OpState{state.StateAwaitingApproval}})
		return err
	})
	if err != nil {
		return fmt.Errorf("read operations awaiting approval: %w", err)
	}
	for _, op := range ops {
		if !op.ExpiresAt.IsZero() && e.now().After(op.ExpiresAt) {
			at := op.ExpiresAt.UTC().Format("2006-01-02 15:04 MST")
			_, err := e.transitionFrom(ctx, op.ID, []state.OpState{state.StateAwaitingApproval}, state.StateExpired, "system", "expired", "",
				map[string]string{"expired_at": op.ExpiresAt.String(), "reason": "the approval request expired while talosbot was stopped"},
				func(o *state.Operation) {
					o.Result = fmt.Sprintf("the approval request expired at %s while talosbot was stopped; run the command again", at)
				}, nil)
			if err != nil {
				return fmt.Errorf("mark %s expired: %w", op.ID, err)
			}
			continue
		}
		if err := e.repostApproval(ctx, op); err != nil {
			return err
		}
	}
	return nil
}

// repostApproval mints fresh approval buttons for op's current plan, audits
// the re-post, and posts the card with them.
func (e *Engine) repostApproval(ctx context.Context, op *state.Operation) error {
	need := e.requiredApprovals(op)
	var (
		buttons []Button
		given   []string
	)
	err := e.o.Store.Update(ctx, func(tx *state.Tx) error {
		cur, err := tx.Operation(op.ID)
		if err != nil {
			return err
		}
		if cur.State != state.StateAwaitingApproval || cur.Digest != op.Digest {
			return nil // it moved on meanwhile: nothing to re-post
		}
		apps, err := tx.Approvals(op.ID)
		if err != nil {
			return err
		}
		for _, a := range apps {
			if a.Digest == cur.Digest {
				given = append(given, a.User)
			}
		}
		labels, kinds := approvalButtons()
		if buttons, err = e.mintButtons(tx, cur, labels, kinds...); err != nil {
			return err
		}
		_, err = tx.Append(e.event("system", "approval reposted", cur, string(cur.State), map[string]string{
			"reason": "talosbot restarted", "digest": cur.Digest, "count": fmt.Sprint(len(given)), "required": fmt.Sprint(need)}))
		return err
	})
	if err != nil {
		return fmt.Errorf("re-post the approval request of %s: %w", op.ID, err)
	}
	if buttons == nil {
		return nil
	}
	var plan *lifecyclev1.OperationPlan
	if len(op.Plan) > 0 {
		p := &lifecyclev1.OperationPlan{}
		if protojson.Unmarshal(op.Plan, p) == nil {
			plan = p
		}
	}
	e.emit(ctx, Update{Op: op, Plan: plan, Buttons: buttons})
	line := fmt.Sprintf("🔁 talosbot restarted while this request awaited approval; it still does (%d/%d", len(given), need)
	if len(given) > 0 {
		line += " — approved by " + strings.Join(given, ", ")
	}
	line += fmt.Sprintf("). Approve or deny with the buttons above, or `/talos approve %s` / `/talos deny %s`; the buttons on the card posted before the restart still work, and an approval counts once.", op.ID, op.ID)
	e.o.Sink.Thread(ctx, op, line)
	return nil
}
