package engine_test

import (
	"context"
	"github.com/talosbot/talosbot/bot/engine"
	"github.com/talosbot/talosbot/state"
	"slices"
	"strings"
	"testing"
)

// A plugin command that declares min_approvals 2 needs two approvals in
// production although the configuration asks for one (min_approvals
// defaults to 1), with the policy built from the configuration alone: the
// engine passes the declaration from the command's spec.
func TestDeclaredMinApprovalsOutrankConfig(t *testing.T) {
	e := newEnvConfig(t, testConfig, func(e *env) { e.plans.Declared = map[string]int32{"push": 2} })
	if got := e.cfg.Policy["production"].MinApprovals; got != 1 {
		t.Fatalf("configured min_approvals = %d, want 1", got)
	}
	id, err := e.submit("alice", "prd", "/talos push")
	if err != nil {
		t.Fatal(err)
	}
	e.await(id, state.StateAwaitingApproval)
	approve := e.sink.Button(t, id, "Approve")
	ctx := context.Background()
	if err := e.eng.Act(ctx, engine.Origin{User: "bob"}, approve); err != nil {
		t.Fatal(err)
	}
	// Act records the approval and any transition before it returns.
	op, err := e.eng.Operation(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if op.State != state.StateAwaitingApproval {
		t.Fatalf("after one approval the operation is %s, want it still awaiting approval", op.State)
	}
	e.sink.Mu.Lock()
	counted := slices.ContainsFunc(e.sink.Threads, func(l string) bool { return strings.Contains(l, "approved by bob (1/2)") })
	e.sink.Mu.Unlock()
	if !counted {
		t.Fatalf("thread does not count 1 of 2 approvals: %q", e.sink.Threads)
	}
	if err := e.eng.Act(ctx, engine.Origin{User: "dave"}, approve); err != nil {
		t.Fatal(err)
	}
	e.await(id, state.StateRunning) // push runs until cancelled; the test's cleanup ends it
}
