package engine_test

import (
	"context"
	"github.com/talosbot/talosbot/bot/engine"
	"github.com/talosbot/talosbot/state"
	"strings"
	"testing"
	"time"
)

func TestPromotionGate(t *testing.T) {
	e := newEnv(t)
	_, _ = e.submit("alice", "prd", "/talos roll v7")
	// Refused before staging, naming the staging command to run.
	recs := waitAudit(t, e, state.AuditQuery{Action: "refused", Cluster: "production"})
	if !strings.Contains(recs[0].Detail["error"], "R6: roll v7 has not succeeded on staging") || !strings.Contains(recs[0].Detail["error"], "run `/talos roll v7 staging` first") {
		t.Fatalf("refusal = %q", recs[0].Detail["error"])
	}
	e.promote("v7")
	id, err := e.submit("alice", "prd", "/talos roll v7")
	if err != nil {
		t.Fatal(err)
	}
	op := e.await(id, state.StateAwaitingApproval)
	if !strings.HasPrefix(strings.Join(op.Flags, ","), "promoted-from:") {
		t.Fatalf("flags = %v", op.Flags)
	}
	// A staging run older than promotion_max_age (14d) no longer counts.
	e.clock.Add(15 * 24 * time.Hour)
	id2, _ := e.submit("alice", "prd", "/talos roll v7")
	if op := e.await(id2, state.StateRefused); !strings.Contains(op.Error, "R6") {
		t.Fatalf("stale staging run accepted: %+v", op)
	}
}

func TestSkipStagingNeedsExtraApprovalAndIsFlagged(t *testing.T) {
	e := newEnv(t)
	id, err := e.submit("alice", "prd", "/talos roll v8 --skip-staging")
	if err != nil {
		t.Fatal(err)
	}
	e.await(id, state.StateAwaitingApproval)
	approve := e.sink.Button(t, id, "Approve")
	if err := e.eng.Act(context.Background(), engine.Origin{User: "bob"}, approve); err != nil {
		t.Fatal(err)
	}
	if op, _ := e.eng.Operation(context.Background(), id); op.State != state.StateAwaitingApproval {
		t.Fatalf("one approval ran a --skip-staging operation: %s", op.State)
	}
	if err := e.eng.Act(context.Background(), engine.Origin{User: "dave"}, approve); err != nil {
		t.Fatal(err)
	}
	e.await(id, state.StateSucceeded)
	recs, _ := e.store.QueryAudit(context.Background(), state.AuditQuery{OpID: id, Action: "approval requested"})
	if len(recs) != 1 || recs[0].Detail["flags"] != "skip-staging" || recs[0].Detail["required"] != "2" {
		t.Fatalf("skip-staging not flagged in the audit: %+v", recs)
	}
}

func TestFreezeRefusesDisruptive(t *testing.T) {
	e := newEnv(t)
	if _, err := e.submit("alice", "stg", `/talos freeze staging "etcd restore drill"`); err != nil {
		t.Fatal(err)
	}
	ops0, _ := e.counts()
	_, err := e.submit("bob", "stg", "/talos roll v2")
	if err == nil || !strings.Contains(err.Error(), `cluster staging is frozen by alice`) || !strings.Contains(err.Error(), "etcd restore drill") {
		t.Fatalf("frozen cluster: %v", err)
	}
	if ops, _ := e.counts(); ops != ops0 {
		t.Fatal("a refused request created an operation")
	}
	// Reading is still allowed.
	pid, err := e.submit("bob", "stg", "/talos probe")
	if err != nil {
		t.Fatal(err)
	}
	e.await(pid, state.StateSucceeded)
	// A viewer may not freeze or unfreeze.
	if _, err := e.submit("carol", "prd", `/talos freeze production "nope"`); err == nil || !strings.Contains(err.Error(), "viewer") {
		t.Fatalf("viewer freeze: %v", err)
	}
	if _, err := e.submit("bob", "stg", "/talos unfreeze staging"); err != nil {
		t.Fatal(err)
	}
	id, err := e.submit("bob", "stg", "/talos roll v2")
	if err != nil {
		t.Fatal(err)
	}
	e.await(id, state.StateSucceeded)
	for _, action := range []string{"frozen", "unfrozen"} {
		if recs, _ := e.store.QueryAudit(context.Background(), state.AuditQuery{Action: action, Cluster: "staging"}); len(recs) != 1 {
			t.Fatalf("%s not audited: %+v", action, recs)
		}
	}
}

const windowConfig = `
data_dir: %s
clusters:
  - name: staging
    environment: staging
    channels: [stg]
    endpoints: [127.0.0.1]
    nodes: [{name: cp-1, address: 127.0.0.1, role: controlplane, host: pve1}]
    credentials: {source: files, talosconfig: "file:%s"}
  - name: production
    environment: production
    channels: [prd]
    endpoints: [127.0.0.2]
    nodes: [{name: cp-1, address: 127.0.0.2, role: controlplane, host: pve1}]
    credentials: {source: files, talosconfig: "file:%s"}
policy:
  staging:
    operators: ["*"]
  production:
    approvers: [alice]
    allow_self_approval: true
    maintenance_windows:
      - {days: [tue], start: "20:00", end: "23:00", timezone: Europe/Berlin}
`

func TestMaintenanceWindow(t *testing.T) {
	e := newEnvConfig(t, windowConfig) // the clock says Monday 12:00 UTC
	e.promote("v3")
	_, err := e.submit("alice", "prd", "/talos roll v3")
	if err == nil || !strings.Contains(err.Error(), "outside every production maintenance window (tue 20:00–23:00 Europe/Berlin)") {
		t.Fatalf("outside window: %v", err)
	}
	id, err := e.submit("alice", "prd", "/talos roll v3 --outside-window")
	if err != nil {
		t.Fatal(err)
	}
	e.await(id, state.StateAwaitingApproval) // allowed, but only with approval
	if err := e.eng.Cancel(context.Background(), engine.Origin{User: "alice"}, id); err != nil {
		t.Fatal(err)
	}
	e.await(id, state.StateCancelled)
	// Tuesday 20:30 in Berlin (19:30 UTC in winter) is inside the window.
	e.clock.Add(24*time.Hour + 7*time.Hour + 30*time.Minute)
	id, err = e.submit("alice", "prd", "/talos roll v3")
	if err != nil {
		t.Fatalf("inside window: %v", err)
	}
	e.await(id, state.StateAwaitingApproval)
}

func TestSoloOperatorConfirmsOwnApproval(t *testing.T) {
	e := newEnvConfig(t, windowConfig)
	e.clock.Add(24*time.Hour + 7*time.Hour + 30*time.Minute) // inside the window
	e.promote("v4")
	id, _ := e.submit("alice", "prd", "/talos roll v4")
	e.await(id, state.StateAwaitingApproval)
	ctx := context.Background()
	if err := e.eng.Act(ctx, engine.Origin{User: "alice"}, e.sink.Button(t, id, "Approve")); err != nil {
		t.Fatal(err)
	}
	e.sink.WaitReply(t, "You are approving your own request "+id)
	if op, _ := e.eng.Operation(ctx, id); op.State != state.StateAwaitingApproval {
		t.Fatalf("self-approval ran without the confirm step: %s", op.State)
	}
	if err := e.eng.Act(ctx, engine.Origin{User: "alice"}, e.sink.Button(t, "reply", "Confirm my approval")); err != nil {
		t.Fatal(err)
	}
	e.await(id, state.StateSucceeded)
	recs, _ := e.store.QueryAudit(ctx, state.AuditQuery{OpID: id, Action: "approval"})
	if len(recs) != 1 || recs[0].Detail["self_approval"] == "" {
		t.Fatalf("self approval not marked in the audit: %+v", recs)
	}
}

// waitAudit waits until the query returns at least one record.
func waitAudit(t *testing.T, e *env, q state.AuditQuery) []state.AuditRecord {
	t.Helper()
	var recs []state.AuditRecord
	waitFor(t, "audit records", func() bool {
		recs, _ = e.store.QueryAudit(context.Background(), q)
		return len(recs) > 0
	})
	return recs
}

func TestFreezeAfterApprovalRequestStopsTheRun(t *testing.T) {
	e := newEnv(t)
	e.promote("v12")
	id, _ := e.submit("alice", "prd", "/talos roll v12")
	e.await(id, state.StateAwaitingApproval)
	approve := e.sink.Button(t, id, "Approve")
	if _, err := e.submit("bob", "prd", `/talos freeze production "incident"`); err != nil {
		t.Fatal(err)
	}
	if err := e.eng.Act(context.Background(), engine.Origin{User: "bob"}, approve); err != nil {
		t.Fatal(err)
	}
	op := e.await(id, state.StateRefused)
	if !strings.Contains(op.Error, "frozen") {
		t.Fatalf("ran on a frozen cluster: %+v", op)
	}
}

func TestDryRunDoesNotCountAsStaging(t *testing.T) {
	e := newEnv(t)
	id, _ := e.submit("alice", "stg", "/talos roll v13 --dry-run")
	e.await(id, state.StateSucceeded)
	id, _ = e.submit("alice", "prd", "/talos roll v13")
	if op := e.await(id, state.StateRefused); !strings.Contains(op.Error, "R6") {
		t.Fatalf("a staging dry run satisfied R6: %+v", op)
	}
}

const narrowApprovalConfig = `
data_dir: %s
clusters:
  - name: staging
    environment: staging
    channels: [stg]
    endpoints: [127.0.0.1]
    nodes: [{name: cp-1, address: 127.0.0.1, role: controlplane, host: pve1}]
    credentials: {source: files, talosconfig: "file:%s"}
  - name: production
    environment: production
    channels: [prd]
    endpoints: [127.0.0.2]
    nodes: [{name: cp-1, address: 127.0.0.2, role: controlplane, host: pve1}]
    credentials: {source: files, talosconfig: "file:%s"}
policy:
  staging:
    operators: ["*"]
  production:
    operators: [alice]
    no_approval_commands: [roll]
    approvers: [bob]
    maintenance_windows:
      - {days: [tue], start: "20:00", end: "23:00", timezone: Europe/Berlin}
`

func TestSkipStagingAlwaysNeedsApprovalAndHousekeepingIgnoresWindows(t *testing.T) {
	e := newEnvConfig(t, narrowApprovalConfig) // Monday noon: outside the window
	// Freezing and unfreezing work outside the window (and need no flag).
	if _, err := e.submit("alice", "prd", `/talos freeze production "incident"`); err != nil {
		t.Fatalf("freeze outside the window: %v", err)
	}
	if _, err := e.submit("alice", "prd", "/talos unfreeze production"); err != nil {
		t.Fatalf("unfreeze outside the window: %v", err)
	}
	// roll needs no approval in this policy, but --skip-staging always does.
	id, err := e.submit("alice", "prd", "/talos roll v14 --skip-staging --outside-window")
	if err != nil {
		t.Fatal(err)
	}
	op := e.await(id, state.StateAwaitingApproval)
	recs, _ := e.store.QueryAudit(context.Background(), state.AuditQuery{OpID: op.ID, Action: "approval requested"})
	if len(recs) != 1 || recs[0].Detail["required"] != "2" {
		t.Fatalf("--skip-staging must need base + 1 approvals: %+v", recs)
	}
}

func TestRecoverFailsOperationsCaughtWhilePlanning(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	err := e.store.Update(ctx, func(tx *state.Tx) error {
		return tx.PutOperation(&state.Operation{ID: "stuck", Cluster: "staging", Environment: "staging", Command: "roll",
			Requester: "alice", State: state.StatePlanned, Disruptive: true, CreatedAt: e.clock.Now()})
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.eng.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if op := e.await("stuck", state.StateFailed); !strings.Contains(op.Error, "run the command again") {
		t.Fatalf("op = %+v", op)
	}
}

// A WRITE command (the snapshot's effect: files written and deleted, the
// cluster untouched) is refused to viewers and audited; an operator runs it
// with no approval, even in production and while the cluster is frozen.
func TestViewerMayNotRunWriteCommand(t *testing.T) {
	e := newEnv(t)
	_, err := e.submit("carol", "prd", "/talos stash")
	if err == nil || !strings.Contains(err.Error(), "carol is a viewer in production and may only read") {
		t.Fatalf("viewer stash: %v", err)
	}
	recs, _ := e.store.QueryAudit(context.Background(), state.AuditQuery{Actor: "carol", Result: "refused"})
	if len(recs) != 1 || recs[0].Command != "stash" {
		t.Fatalf("refusal not audited: %+v", recs)
	}
	var ops []*state.Operation
	_ = e.store.View(context.Background(), func(tx *state.Tx) error {
		ops, err = tx.Operations(state.OpFilter{Cluster: "production"})
		return err
	})
	if len(ops) != 0 {
		t.Fatalf("a refused request became an operation: %+v", ops)
	}
	if _, err := e.submit("alice", "prd", `/talos freeze production "drill"`); err != nil {
		t.Fatal(err)
	}
	id, err := e.submit("alice", "prd", "/talos stash")
	if err != nil {
		t.Fatalf("operator stash: %v", err)
	}
	if op := e.await(id, state.StateSucceeded); op.Disruptive {
		t.Fatalf("a WRITE operation is not disruptive: %+v", op)
	}
}

// Resuming an interrupted WRITE operation needs an operator, like running it.
func TestViewerMayNotResumeAWriteOperation(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	err := e.store.Update(ctx, func(tx *state.Tx) error {
		if err := tx.PutOperation(&state.Operation{ID: "stashed", Cluster: "production", Environment: "production", Command: "stash",
			Requester: "alice", State: state.StatePlanned, CreatedAt: e.clock.Now()}); err != nil {
			return err
		}
		for _, to := range []state.OpState{state.StateRunning, state.StateInterrupted} {
			if _, err := tx.Transition("stashed", to, nil); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.eng.Resume(ctx, engine.Origin{User: "carol", Channel: "prd"}, "stashed"); err == nil {
		t.Fatal("a viewer resumed a WRITE operation")
	}
	if op, _ := e.eng.Operation(ctx, "stashed"); op.State != state.StateInterrupted {
		t.Fatalf("the refused resume changed the operation: %s", op.State)
	}
	recs, _ := e.store.QueryAudit(ctx, state.AuditQuery{Actor: "carol", Result: "refused"})
	if len(recs) != 1 || !strings.Contains(recs[0].Detail["reason"], "carol is a viewer in production") {
		t.Fatalf("refusal not audited with the reason: %+v", recs)
	}
}
