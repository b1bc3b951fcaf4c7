package engine_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/talosbot/talosbot/bot/engine"
	"github.com/talosbot/talosbot/state"
)

// TestButtonsOfAVoidPlanAreRefused: approve, deny and confirm buttons are
// bound to the plan they were shown with. Once the operation's plan changes
// (a re-plan gives it a new digest and voids its approvals), a click on any
// of them is refused, audited against the operation, and changes nothing:
// no approval of the new plan, no denial, the operation still awaits approval.
func TestButtonsOfAVoidPlanAreRefused(t *testing.T) {
	e := newEnvConfig(t, windowConfig)
	e.clock.Add(24*time.Hour + 7*time.Hour + 30*time.Minute) // inside Tuesday's window
	e.promote("v4")
	id, err := e.submit("alice", "prd", "/talos roll v4")
	if err != nil {
		t.Fatal(err)
	}
	e.await(id, state.StateAwaitingApproval)
	ctx := context.Background()
	approve := e.sink.Button(t, id, "Approve")
	deny := e.sink.Button(t, id, "Deny")
	// alice may approve her own request (allow_self_approval): the first
	// click asks her to confirm.
	if err := e.eng.Act(ctx, engine.Origin{User: "alice"}, approve); err != nil {
		t.Fatal(err)
	}
	confirm := e.sink.Button(t, "reply", "Confirm my approval")

	// The plan changes under the buttons.
	if err := e.store.Update(ctx, func(tx *state.Tx) error {
		op, err := tx.Operation(id)
		if err != nil {
			return err
		}
		op.Digest = "sha256:" + strings.Repeat("e", 64)
		return tx.PutOperation(op)
	}); err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct{ name, button string }{{"Confirm my approval", confirm}, {"Approve", approve}, {"Deny", deny}} {
		err := e.eng.Act(ctx, engine.Origin{User: "alice"}, c.button)
		var ae *engine.ActionError
		if !errors.As(err, &ae) || !strings.Contains(ae.Msg, "earlier plan of "+id+" that is void") {
			t.Errorf("%s of the void plan: err = %v; want the earlier-plan refusal", c.name, err)
		}
	}
	op, err := e.eng.Operation(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if op.State != state.StateAwaitingApproval {
		t.Fatalf("after clicks on a void plan's buttons the operation is %s; want it still awaiting approval", op.State)
	}
	var apps []state.Approval
	if err := e.store.View(ctx, func(tx *state.Tx) error { var err error; apps, err = tx.Approvals(id); return err }); err != nil {
		t.Fatal(err)
	}
	if len(apps) != 0 {
		t.Fatalf("a void plan's button recorded approvals: %+v", apps)
	}
	recs, err := e.store.QueryAudit(ctx, state.AuditQuery{OpID: id, Action: "action refused"})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3 {
		t.Fatalf("audited refusals of %s = %d; want 3 (one per click)", id, len(recs))
	}
}

// TestCancelIsTheRequestersOrAnApprovers: only the requester or one of the
// cluster's approvers may cancel an operation; anyone else (a viewer) is
// refused and the operation goes on. An operation that has ended cannot be
// cancelled, and only an interrupted one can be resumed or abandoned.
func TestCancelIsTheRequestersOrAnApprovers(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	refused := func(what string, err error, want string) {
		t.Helper()
		var ae *engine.ActionError
		if !errors.As(err, &ae) || !strings.Contains(ae.Msg, want) {
			t.Fatalf("%s: err = %v; want a refusal saying %q", what, err, want)
		}
	}
	first, err := e.submit("alice", "prd", "/talos push")
	if err != nil {
		t.Fatal(err)
	}
	e.await(first, state.StateAwaitingApproval)
	// carol is a production viewer: neither the requester nor an approver.
	refused("carol's cancel", e.eng.Cancel(ctx, engine.Origin{User: "carol", Channel: "prd"}, first), "only the requester or an approver may cancel "+first)
	if op, _ := e.eng.Operation(ctx, first); op.State != state.StateAwaitingApproval {
		t.Fatalf("after a refused cancel the operation is %s; want it still awaiting approval", op.State)
	}
	refused("resume of an operation awaiting approval", e.eng.Resume(ctx, engine.Origin{User: "alice", Channel: "prd"}, first), "only interrupted operations can be resumed")
	refused("abandon of an operation awaiting approval", e.eng.Abandon(ctx, engine.Origin{User: "alice", Channel: "prd"}, first), "only interrupted operations can be abandoned")
	// bob approves production operations: he may cancel alice's.
	if err := e.eng.Cancel(ctx, engine.Origin{User: "bob", Channel: "prd"}, first); err != nil {
		t.Fatalf("an approver's cancel: %v", err)
	}
	e.await(first, state.StateCancelled)
	refused("cancel of a cancelled operation", e.eng.Cancel(ctx, engine.Origin{User: "bob", Channel: "prd"}, first), "operation "+first+" is already cancelled")

	// The requester may cancel her own.
	second, err := e.submit("alice", "prd", "/talos push")
	if err != nil {
		t.Fatal(err)
	}
	e.await(second, state.StateAwaitingApproval)
	if err := e.eng.Cancel(ctx, engine.Origin{User: "alice", Channel: "prd"}, second); err != nil {
		t.Fatalf("the requester's cancel: %v", err)
	}
	e.await(second, state.StateCancelled)
}

// TestDenyIsTheRequestersOrAnApprovers: the Deny button works for the
// requester (withdrawing her own request) and for approvers; anyone else is
// refused and the operation still awaits approval. Once denied, there is
// nothing left to deny.
func TestDenyIsTheRequestersOrAnApprovers(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	id, err := e.submit("alice", "prd", "/talos push")
	if err != nil {
		t.Fatal(err)
	}
	e.await(id, state.StateAwaitingApproval)
	deny := e.sink.Button(t, id, "Deny")
	var ae *engine.ActionError
	if err := e.eng.Act(ctx, engine.Origin{User: "carol", Channel: "prd"}, deny); !errors.As(err, &ae) {
		t.Fatalf("a viewer's deny: err = %v; want a refusal", err)
	}
	if op, _ := e.eng.Operation(ctx, id); op.State != state.StateAwaitingApproval {
		t.Fatalf("after a viewer's refused deny the operation is %s; want it still awaiting approval", op.State)
	}
	// alice requested it and is no production approver: she may still deny it.
	if err := e.eng.Act(ctx, engine.Origin{User: "alice", Channel: "prd"}, deny); err != nil {
		t.Fatalf("the requester's deny: %v", err)
	}
	if op := e.await(id, state.StateDenied); op.Result != "denied by alice" {
		t.Fatalf("result = %q; want denied by alice", op.Result)
	}
	err = e.eng.Act(ctx, engine.Origin{User: "bob", Channel: "prd"}, deny)
	if !errors.As(err, &ae) || !strings.Contains(ae.Msg, "is denied; there is nothing to deny") {
		t.Fatalf("deny of a denied operation: err = %v; want the nothing-to-deny refusal", err)
	}
}
