package engine_test

import (
	"context"
	"errors"
	"github.com/talosbot/talosbot/bot/engine"
	lifecyclev1 "github.com/talosbot/talosbot/plugins/sdk/proto/lifecycle/v1"
	"github.com/talosbot/talosbot/state"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestBadInputChangesNothing(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct{ text, want string }{
		{"/talos frobnicate", `unknown command "frobnicate". Commands: abandon, `},
		{"/talos roll v2 staging --speed 3", `unknown flag --speed for "roll" (flags: --artifact, --drift, --dry-run, --marker, --mode, --outside-window, --skip-staging)`},
		{"/talos roll v2 staging --mode", "flag --mode needs a value"},
		{"/talos roll", "missing <target>"},
		{"/talos roll v2 nowhere", `unknown cluster "nowhere"; clusters: staging, production`},
		{"/talos roll v2 stagign", `unknown cluster "stagign"; did you mean "staging"? clusters: staging, production`},
		{"/talos rol v2 staging", `unknown command "rol"; did you mean /talos roll? Try /talos help roll.`},
		{`/talos roll "v2`, "unterminated double quote"},
		{"/talos probe", "name the cluster"},
	} {
		ops0, audit0 := e.counts()
		_, err := e.submit("alice", "ops", tc.text)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want %q", tc.text, err, tc.want)
		}
		if ops, audit := e.counts(); ops != ops0 || audit != audit0 {
			t.Errorf("%q changed state: ops %d→%d audit %d→%d", tc.text, ops0, ops, audit0, audit)
		}
	}
	e.sink.WaitReply(t, "usage: /talos roll <target> [cluster] [--mode MODE]")
}

func TestReadOnlyRunsWithoutApprovalAndChannelBinding(t *testing.T) {
	e := newEnv(t)
	id, err := e.submit("carol", "prd", "/talos probe")
	if err != nil {
		t.Fatal(err)
	}
	op := e.await(id, state.StateSucceeded)
	if op.Cluster != "production" || !strings.Contains(op.Result, "✅ etcd: leader agreed") {
		t.Fatalf("op = %+v", op)
	}
	if got := strings.Join(e.auditActions(id), " "); got != "requested/carol started/system succeeded/system" {
		t.Fatalf("audit = %s", got)
	}
}

func TestViewerCannotRequestDisruptive(t *testing.T) {
	e := newEnv(t)
	_, err := e.submit("carol", "prd", "/talos roll v2")
	if err == nil || !strings.Contains(err.Error(), "carol is a viewer in production") {
		t.Fatalf("got %v", err)
	}
	recs, _ := e.store.QueryAudit(context.Background(), state.AuditQuery{Actor: "carol"})
	if len(recs) != 1 || recs[0].Action != "refused" {
		t.Fatalf("refusal not audited: %+v", recs)
	}
}

func TestStagingRollAndLockContention(t *testing.T) {
	e := newEnv(t)
	marker := filepath.Join(t.TempDir(), "m")
	id, err := e.submit("alice", "stg", "/talos roll v2 --mode wait --marker "+marker)
	if err != nil {
		t.Fatal(err)
	}
	e.await(id, state.StateRunning)
	// A second disruptive operation on the same cluster is refused, naming the holder.
	_, err = e.submit("bob", "stg", "/talos roll v3")
	if err == nil || !strings.Contains(err.Error(), "cluster staging is locked by operation "+id) || !strings.Contains(err.Error(), "by alice") {
		t.Fatalf("want lock refusal naming %s and alice, got %v", id, err)
	}
	// Read-only operations never wait for the lock.
	pid, err := e.submit("bob", "stg", "/talos probe")
	if err != nil {
		t.Fatal(err)
	}
	e.await(pid, state.StateSucceeded)
	status := func() string {
		_, _ = e.submit("bob", "stg", "/talos status staging")
		return e.sink.WaitReply(t, "lock: held by")
	}()
	if !strings.Contains(status, id) || !strings.Contains(status, "requested by alice") {
		t.Fatalf("status = %s", status)
	}
	// Cancellation reaches the plugin, and the lock is released. Cancel once
	// the plugin runs: a cancel while the run starts never reaches it.
	started, stop := context.WithTimeout(context.Background(), 60*time.Second)
	defer stop()
	if _, err := e.eng.Await(started, id, func(o *state.Operation) bool {
		return slices.ContainsFunc(o.Steps, func(st state.Step) bool { return st.ID == "s1" && st.Status == "running" })
	}); err != nil {
		t.Fatal(err)
	}
	if err := e.eng.Cancel(context.Background(), engine.Origin{User: "alice", Channel: "stg"}, id); err != nil {
		t.Fatal(err)
	}
	e.await(id, state.StateCancelled)
	waitFor(t, "the plugin to see the cancellation", func() bool {
		b, err := os.ReadFile(marker)
		return err == nil && string(b) == "cancelled"
	})
	id2, err := e.submit("bob", "stg", "/talos roll v3")
	if err != nil {
		t.Fatalf("lock not released after cancel: %v", err)
	}
	e.await(id2, state.StateSucceeded)
}

func TestProductionApprovalFlowAndRefusals(t *testing.T) {
	e := newEnv(t)
	e.promote("v2")
	id, err := e.submit("alice", "prd", "/talos roll v2")
	if err != nil {
		t.Fatal(err)
	}
	e.await(id, state.StateAwaitingApproval)
	approve := e.sink.Button(t, id, "Approve")
	ctx := context.Background()
	// Requester approving their own request.
	if err := e.eng.Act(ctx, engine.Origin{User: "alice"}, approve); err == nil || !strings.Contains(err.Error(), "alice requested") {
		t.Fatalf("self approval: %v", err)
	}
	// Not an approver.
	if err := e.eng.Act(ctx, engine.Origin{User: "carol"}, approve); err == nil || !strings.Contains(err.Error(), "carol is not an approver") {
		t.Fatalf("non-approver: %v", err)
	}
	// Forged action id.
	if err := e.eng.Act(ctx, engine.Origin{User: "bob"}, "aforged"); err == nil || !strings.Contains(err.Error(), "unknown") {
		t.Fatalf("forged: %v", err)
	}
	if err := e.eng.Act(ctx, engine.Origin{User: "bob"}, approve); err != nil {
		t.Fatal(err)
	}
	op := e.await(id, state.StateSucceeded)
	if op.Target != "v2" || op.Attempts != 1 {
		t.Fatalf("op = %+v", op)
	}
	// Action on a finished operation.
	if err := e.eng.Act(ctx, engine.Origin{User: "dave"}, approve); err == nil || !strings.Contains(err.Error(), "succeeded; there is nothing to approve") {
		t.Fatalf("late approve: %v", err)
	}
	want := "requested/alice approval requested/system action refused/alice action refused/carol approval/bob approved/bob started/system succeeded/system action refused/dave"
	if got := strings.Join(e.auditActions(id), " "); !strings.Contains(got, want) {
		t.Fatalf("audit = %s\nwant it to contain %s", got, want)
	}
	if _, err := e.store.VerifyAudit(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestApprovalExpires(t *testing.T) {
	e := newEnv(t)
	e.promote("v2")
	id, _ := e.submit("alice", "prd", "/talos roll v2")
	e.await(id, state.StateAwaitingApproval)
	approve := e.sink.Button(t, id, "Approve")
	e.clock.Add(31 * time.Minute)
	err := e.eng.Act(context.Background(), engine.Origin{User: "bob"}, approve)
	if err == nil || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("got %v", err)
	}
	e.await(id, state.StateExpired)
}

func TestDigestDriftVoidsApproval(t *testing.T) {
	e := newEnv(t)
	e.promote("v2")
	drift := filepath.Join(t.TempDir(), "versions")
	if err := os.WriteFile(drift, []byte("cp-1=v1.12.6"), 0o600); err != nil {
		t.Fatal(err)
	}
	id, _ := e.submit("alice", "prd", "/talos roll v2 --drift "+drift)
	first := e.await(id, state.StateAwaitingApproval)
	approve := e.sink.Button(t, id, "Approve")
	// The cluster changes between approval request and run.
	if err := os.WriteFile(drift, []byte("cp-1=v1.13.0"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := e.eng.Act(context.Background(), engine.Origin{User: "bob"}, approve); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := e.eng.Await(ctx, id, func(o *state.Operation) bool {
		return o.State == state.StateAwaitingApproval && o.Digest != first.Digest
	}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(e.auditActions(id), " "), "approvals voided/system") {
		t.Fatalf("voiding not audited: %v", e.auditActions(id))
	}
	var apps []state.Approval
	_ = e.store.View(ctx, func(tx *state.Tx) error { var err error; apps, err = tx.Approvals(id); return err })
	if len(apps) != 0 {
		t.Fatalf("approvals not voided: %v", apps)
	}
	// The old button no longer approves; the new one does.
	if err := e.eng.Act(ctx, engine.Origin{User: "bob"}, approve); err == nil {
		t.Fatal("old approve button still works after the plan changed")
	}
	if err := e.eng.Act(ctx, engine.Origin{User: "bob"}, e.sink.Button(t, id, "Approve", approve)); err != nil {
		t.Fatal(err)
	}
	if op := e.await(id, state.StateSucceeded); op.Digest == first.Digest {
		t.Fatal("ran the old plan")
	}
}

func TestPluginCrashFailsOperationAndBotKeepsServing(t *testing.T) {
	e := newEnv(t)
	id, _ := e.submit("alice", "stg", "/talos roll v2 --mode crash")
	op := e.await(id, state.StateFailed)
	// The host noticed the exit itself (no timeout ran out): the error says
	// so. How fast is a benchmark's business, not a wall-clock assert's.
	if !strings.Contains(op.Error, `plugin "eng" exited during run`) {
		t.Fatalf("error = %q", op.Error)
	}
	// The lock is released and the next use starts the plugin again.
	id2, err := e.submit("alice", "stg", "/talos roll v3")
	if err != nil {
		t.Fatal(err)
	}
	e.await(id2, state.StateSucceeded)
}

func TestFailureOffersSuggestedAction(t *testing.T) {
	e := newEnv(t)
	id, _ := e.submit("alice", "stg", "/talos roll v2 --mode fail")
	op := e.await(id, state.StateFailed)
	if op.Error != "cp-1 timed out" {
		t.Fatalf("error = %q", op.Error)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Clicking (Button waits for it) runs the suggested command as the clicking user.
	if err := e.eng.Act(ctx, engine.Origin{User: "bob", Channel: "stg"}, e.sink.Button(t, id, "Rollback node cp-1")); err != nil {
		t.Fatal(err)
	}
	recs, _ := e.store.QueryAudit(ctx, state.AuditQuery{Actor: "bob", Action: "requested"})
	if len(recs) != 1 || recs[0].Command != "probe" {
		t.Fatalf("suggested command not run as bob: %+v", recs)
	}
}

func TestRecoverMarksRunningInterruptedAndResume(t *testing.T) {
	e := newEnv(t)
	id, _ := e.submit("alice", "stg", "/talos roll v2 --mode wait")
	e.await(id, state.StateRunning)
	// Stop without finishing: like a crash, the operation stays running in the store.
	e.close()
	e.open()
	ids, err := e.eng.Recover(context.Background())
	if err != nil || len(ids) != 1 || ids[0] != id {
		t.Fatalf("recover = %v %v", ids, err)
	}
	e.await(id, state.StateInterrupted)
	if !strings.Contains(strings.Join(e.auditActions(id), " "), "interrupted/system") {
		t.Fatalf("audit: %v", e.auditActions(id))
	}
	// The lock stays until resume or abandon.
	if _, err := e.submit("bob", "stg", "/talos roll v3"); !errors.Is(err, state.ErrLocked) {
		t.Fatalf("lock released by the crash: %v", err)
	}
	// Resume re-runs the operation (this time it is cancelled by abandon-like cancel).
	if err := e.eng.Resume(context.Background(), engine.Origin{User: "alice", Channel: "stg"}, id); err != nil {
		t.Fatal(err)
	}
	if op := e.await(id, state.StateRunning); op.Attempts != 2 {
		t.Fatalf("attempts = %d", op.Attempts)
	}
	if err := e.eng.Cancel(context.Background(), engine.Origin{User: "alice"}, id); err != nil {
		t.Fatal(err)
	}
	e.await(id, state.StateCancelled)
	got := strings.Join(e.auditActions(id), " ")
	if !strings.Contains(got, "interrupted/system resumed/alice") {
		t.Fatalf("audit = %s", got)
	}
}

func TestAbandonReleasesLock(t *testing.T) {
	e := newEnv(t)
	id, _ := e.submit("alice", "stg", "/talos roll v2 --mode wait")
	e.await(id, state.StateRunning)
	e.close()
	e.open()
	if _, err := e.eng.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := e.submit("bob", "stg", "/talos abandon "+id); err != nil {
		t.Fatal(err)
	}
	e.await(id, state.StateCancelled)
	id2, err := e.submit("bob", "stg", "/talos roll v3")
	if err != nil {
		t.Fatal(err)
	}
	e.await(id2, state.StateSucceeded)
}

func TestPlanRefusalFailsWithRule(t *testing.T) {
	e := newEnv(t)
	id, _ := e.submit("alice", "stg", "/talos roll refuse")
	op := e.await(id, state.StateRefused)
	if !strings.Contains(op.Error, "R10: skipping a minor — upgrade to the next minor first") {
		t.Fatalf("error = %q", op.Error)
	}
}

// Credentials are read once to plan and once more, at the start, for the
// re-plan and the run together.
func TestCredentialsReadOncePerPhase(t *testing.T) {
	e := newEnv(t)
	id, _ := e.submit("alice", "stg", "/talos roll v2")
	e.await(id, state.StateSucceeded)
	if n := e.creds.Count(); n != 2 {
		t.Fatalf("credentials read %d times for one operation, want 2 (plan; re-plan + run)", n)
	}
}

// The host tells plugins which snapshots operation records still name
// (plugins never read the store): a disruptive operation's artifact is
// protected until the operation ended more than snapshots.soak ago.
func TestProtectedSnapshotsUntilSoak(t *testing.T) {
	e := newEnv(t)
	id, err := e.submit("alice", "stg", "/talos roll v2 --artifact staging/20261130T115900Z-cp-1")
	if err != nil {
		t.Fatal(err)
	}
	e.await(id, state.StateSucceeded)
	out := filepath.Join(t.TempDir(), "protected")
	probe := func() string {
		t.Helper()
		pid, err := e.submit("alice", "stg", "/talos probe --protected "+out)
		if err != nil {
			t.Fatal(err)
		}
		e.await(pid, state.StateSucceeded)
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if got := probe(); got != "staging/20261130T115900Z-cp-1" {
		t.Fatalf("protected = %q, want the roll's snapshot", got)
	}
	e.clock.Add(6 * 24 * time.Hour)
	if got := probe(); got != "staging/20261130T115900Z-cp-1" {
		t.Fatalf("after 6 days protected = %q, want it still protected (soak 7d)", got)
	}
	e.clock.Add(2 * 24 * time.Hour)
	if got := probe(); got != "" {
		t.Fatalf("after 8 days protected = %q, want nothing (soak over)", got)
	}
}

// The scheduler (a System origin) runs non-disruptive commands on the
// configuration's authority, but never a disruptive one.
func TestSystemOriginRunsOnlyNonDisruptive(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	sys := engine.Origin{User: "talosbot-schedule", Channel: "stg", System: true}
	// stash writes (operators only); the scheduler is no operator.
	if _, err := e.eng.Submit(ctx, engine.Origin{User: "talosbot-schedule", Channel: "stg"}, "/talos stash"); err == nil {
		t.Fatal("a user named like the scheduler ran an operator command")
	}
	id, err := e.eng.Submit(ctx, sys, "/talos stash")
	if err != nil {
		t.Fatal(err)
	}
	if op := e.await(id, state.StateSucceeded); op.Requester != "talosbot-schedule" {
		t.Fatalf("requester %q", op.Requester)
	}
	if _, err := e.eng.Submit(ctx, sys, "/talos roll v9"); err == nil || !strings.Contains(err.Error(), "a scheduled run may not run roll") {
		t.Fatalf("disruptive scheduled run: %v", err)
	}
	// The same user without System is just an unknown user.
	if _, err := e.eng.Submit(ctx, engine.Origin{User: "talosbot-schedule", Channel: "stg"}, "/talos roll v9"); err == nil {
		t.Fatal("a user named like the scheduler ran a disruptive command")
	}
}

// TestSecondResumeWhilePlanningIsRefused: a resume plans the rest before it runs, which can
// take a minute on a settling cluster while the operation still reads interrupted. A second
// resume meanwhile is refused at once, naming the one under way, instead of planning again
// and failing later with "illegal state transition from running to running" (soak seed 1055:
// a resume every 10 s, seven plans of the same cluster at once).
func TestSecondResumeWhilePlanningIsRefused(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	id, _ := e.submit("alice", "stg", "/talos roll v2 --mode wait")
	e.await(id, state.StateRunning)
	e.close()
	e.open()
	if _, err := e.eng.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	e.await(id, state.StateInterrupted)
	entered, release := make(chan struct{}, 2), make(chan struct{})
	e.plans.BeforePlan = func(req *lifecyclev1.OperationRequest) {
		if req.GetAttempt() > 1 {
			entered <- struct{}{}
			<-release
		}
	}
	first := make(chan error, 1)
	go func() { first <- e.eng.Resume(ctx, engine.Origin{User: "alice", Channel: "stg"}, id) }()
	within := time.After(30 * time.Second)
	select {
	case <-entered:
	case <-within:
		t.Fatal("the first resume did not plan")
	}
	second := make(chan error, 1)
	go func() { second <- e.eng.Resume(ctx, engine.Origin{User: "bob", Channel: "stg"}, id) }()
	select {
	case err := <-second:
		var ae *engine.ActionError
		if !errors.As(err, &ae) || !strings.Contains(err.Error(), "is being resumed already") {
			t.Fatalf("the second resume: %v", err)
		}
	case <-entered:
		close(release)
		t.Fatal("a second resume planned the rest again while the first was planning it")
	case <-within:
		t.Fatal("the second resume neither refused nor planned")
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatalf("the first resume: %v", err)
	}
	if op := e.await(id, state.StateRunning); op.Attempts != 2 {
		t.Fatalf("attempts = %d, want 2", op.Attempts)
	}
	e.sink.WaitReply(t, "is being resumed already")
	if err := e.eng.Cancel(ctx, engine.Origin{User: "alice"}, id); err != nil {
		t.Fatal(err)
	}
	e.await(id, state.StateCancelled)
}
