package engine_test

import (
	"context"
	"strings"
	"testing"

	"github.com/talosbot/talosbot/bot/engine"
	"github.com/talosbot/talosbot/state"
)

// twoApprovals is allowAll with two approvals required.
type twoApprovals struct{ allowAll }

func (twoApprovals) RequiredApprovals(*state.Operation, int) int { return 2 }

// On an operation that needs two approvals, the same approver clicking
// twice is counted once: the operation stays awaiting approval until a
// second approver approves. (Issue 34: this was caught only end to end.)
func TestSecondApprovalBySameUserIsCountedOnce(t *testing.T) {
	e, sink, st := newEngineWith(t, nil, twoApprovals{})
	ctx := context.Background()
	op := &state.Operation{ID: "op-2app", Cluster: "staging", Environment: "staging", Command: "upgrade talos", Disruptive: true,
		Requester: "alice", Digest: "d1"}
	if err := st.Update(ctx, func(tx *state.Tx) error {
		if err := tx.PutOperation(op); err != nil {
			return err
		}
		_, err := tx.Transition(op.ID, state.StateAwaitingApproval, nil)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	stateOf := func() state.OpState {
		t.Helper()
		o, err := e.Operation(ctx, op.ID)
		if err != nil {
			t.Fatal(err)
		}
		return o.State
	}
	for range 2 {
		if err := e.Approve(ctx, engine.Origin{User: "bob", Channel: "stg"}, op.ID); err != nil {
			t.Fatal(err)
		}
	}
	if s := stateOf(); s != state.StateAwaitingApproval {
		t.Fatalf("after bob approved twice: %s, want still awaiting approval", s)
	}
	if !strings.Contains(strings.Join(sink.all(), "\n"), "counted once") {
		t.Errorf("bob was not told his second approval counts once: %q", sink.all())
	}
	if err := e.Approve(ctx, engine.Origin{User: "carol", Channel: "stg"}, op.ID); err != nil {
		t.Fatal(err)
	}
	if s := stateOf(); s == state.StateAwaitingApproval {
		t.Fatalf("after bob and carol approved: still %s", s)
	}
}

func (r *replies) all() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.got...)
}
