package engine_test

import (
	"context"
	"errors"
	"github.com/talosbot/talosbot/bot/auditview"
	"github.com/talosbot/talosbot/bot/engine"
	"github.com/talosbot/talosbot/state"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// nodesConfig has three nodes per cluster, for node-by-node rolls.
const nodesConfig = `
data_dir: %s
clusters:
  - name: staging
    environment: staging
    channels: [stg]
    endpoints: [127.0.0.1]
    nodes:
      - {name: cp-1, address: 127.0.0.1, role: controlplane, host: pve1}
      - {name: cp-2, address: 127.0.0.2, role: controlplane, host: pve1}
      - {name: cp-3, address: 127.0.0.3, role: controlplane, host: pve1}
    credentials: {source: files, talosconfig: "file:%s"}
  - name: production
    environment: production
    channels: [prd]
    endpoints: [127.0.0.5]
    nodes:
      - {name: cp-1, address: 127.0.0.5, role: controlplane, host: pve1}
      - {name: cp-2, address: 127.0.0.6, role: controlplane, host: pve1}
      - {name: cp-3, address: 127.0.0.7, role: controlplane, host: pve1}
    credentials: {source: files, talosconfig: "file:%s"}
policy:
  staging:
    operators: [alice, bob, carol]
  production:
    approvers: [bob, dave]
    operators: [alice, bob]
    viewers: [carol]
    expiry: 30m
`

// awaitStep waits until op's step id has status.
func (e *env) awaitStep(id, step, status string) *state.Operation {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	op, err := e.eng.Await(ctx, id, func(o *state.Operation) bool {
		for _, s := range o.Steps {
			if s.ID == step && s.Status == status {
				return true
			}
		}
		return false
	})
	if err != nil {
		e.t.Fatalf("step %s of %s never %s: %v", step, id, status, err)
	}
	return op
}

func noRunningSteps(t *testing.T, op *state.Operation) {
	t.Helper()
	for _, s := range op.Steps {
		if s.Status == "running" {
			t.Fatalf("step %s left running in the record of a %s operation", s.ID, op.State)
		}
	}
}

func mustContain(t *testing.T, what, got string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Fatalf("%s lacks %q:\n%s", what, w, got)
		}
	}
}

// A cancelled roll closes the step it stopped, says where every node was
// left and that the cluster is at mixed versions, and offers the command
// again as a button.
func TestCancelledRollEndsWithNodeStatesAndNextCommand(t *testing.T) {
	e := newEnvConfig(t, nodesConfig)
	vf := filepath.Join(t.TempDir(), "versions")
	id, err := e.submit("alice", "stg", "/talos roll v2 --mode nodes-wait --drift "+vf)
	if err != nil {
		t.Fatal(err)
	}
	e.awaitStep(id, "node/cp-2/upgrade", "running")
	if err := e.eng.Cancel(context.Background(), engine.Origin{User: "alice", Channel: "stg"}, id); err != nil {
		t.Fatal(err)
	}
	op := e.await(id, state.StateCancelled)
	noRunningSteps(t, op)
	mustContain(t, "ending", op.Result,
		"cp-1: done, at v2", "cp-2: stopped, version unknown", "was running when alice cancelled the run",
		"cp-3: not started, at v1", "mixed versions (v2, unknown, v1)", "Next: `/talos roll v2 --mode nodes-wait --drift "+vf+"`")
	// The next command is a button that runs it (as the clicker).
	btn := e.sink.Button(t, id, "Run again (finishes the rest)")
	if err := e.eng.Act(context.Background(), engine.Origin{User: "bob", Channel: "stg"}, btn); err != nil {
		t.Fatal(err)
	}
	recs, _ := e.store.QueryAudit(context.Background(), state.AuditQuery{Actor: "bob", Action: "requested"})
	if len(recs) != 1 || recs[0].Command != "roll" {
		t.Fatalf("the Run again button did not request the roll as bob: %+v", recs)
	}
}

// After a restart the interrupted roll is posted to its channel with Resume
// and Abandon; resuming finishes it, and the maintenance record keeps both
// attempts: the node done before the restart reads "done in attempt 1",
// not "already at".
func TestInterruptedRollIsPostedAndResumeKeepsEveryAttempt(t *testing.T) {
	e := newEnvConfig(t, nodesConfig)
	vf := filepath.Join(t.TempDir(), "versions")
	id, _ := e.submit("alice", "stg", "/talos roll v2 --mode nodes-wait --drift "+vf)
	e.awaitStep(id, "node/cp-2/upgrade", "running")
	e.close()
	e.open()
	if _, err := e.eng.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	op := e.await(id, state.StateInterrupted)
	noRunningSteps(t, op)
	post := e.sink.WaitReply(t, "was running when talosbot stopped")
	mustContain(t, "interruption post", post, id, "cp-1: done, at v2", "cp-2: stopped", "cp-3: not started, at v1", "mixed versions",
		"/talos resume "+id, "/talos abandon "+id)
	e.sink.Mu.Lock()
	var labels []string
	for _, b := range e.sink.Buttons["reply"] {
		labels = append(labels, b.Label)
	}
	e.sink.Mu.Unlock()
	if strings.Join(labels, ",") != "Resume,Abandon" {
		t.Fatalf("interruption post buttons = %v", labels)
	}
	// Resume through the posted button. It plans the rest again and runs
	// it with one request: the credentials (possibly a Terraform outputs
	// read) load once. (The plugin waits forever in attempt 1 only, so the
	// run's request also carries the attempt the resume counted.)
	loads := e.creds.Count()
	if err := e.eng.Act(context.Background(), engine.Origin{User: "alice", Channel: "stg"}, e.sink.Button(t, "reply", "Resume")); err != nil {
		t.Fatal(err)
	}
	op = e.await(id, state.StateSucceeded)
	if n := e.creds.Count() - loads; n != 1 {
		t.Errorf("the resume loaded the credentials %d times, want once for its plan and run", n)
	}
	if len(op.History) != 1 || op.History[0].N != 1 || op.Attempts != 2 {
		t.Fatalf("history = %+v, attempts %d", op.History, op.Attempts)
	}
	var recs []state.AuditRecord
	recs, _ = e.store.QueryAudit(context.Background(), state.AuditQuery{OpID: id, Limit: 1000})
	rec := auditview.MaintenanceRecord(op, recs, nil)
	mustContain(t, "maintenance record", rec,
		"Steps, attempt 1 (interrupted", "✅ cp-1: upgrade — done: at v2", "cp-2: upgrade — stopped: was running when talosbot stopped",
		"Steps, attempt 2 (succeeded)", "cp-1: upgrade — done: done in attempt 1 (now: already at v2)", "cp-3: upgrade — done: at v2")
	if strings.Contains(rec, "cp-1: upgrade — skipped") {
		t.Fatalf("the record calls cp-1 skipped although attempt 1 upgraded it:\n%s", rec)
	}
}

// A resume after a restart during which a node changed plans again: the
// approvals are void, the card says what changed, and the roll needs
// approval again before it goes on.
func TestResumeAfterNodeChangedAsksApprovalAgain(t *testing.T) {
	e := newEnvConfig(t, nodesConfig)
	e.promote("v2")
	vf := filepath.Join(t.TempDir(), "versions")
	id, _ := e.submit("alice", "prd", "/talos roll v2 --mode nodes-wait --drift "+vf)
	first := e.await(id, state.StateAwaitingApproval)
	if err := e.eng.Act(context.Background(), engine.Origin{User: "bob"}, e.sink.Button(t, id, "Approve")); err != nil {
		t.Fatal(err)
	}
	e.awaitStep(id, "node/cp-2/upgrade", "running")
	e.close()
	// While talosbot is down, someone changes cp-3.
	if err := os.WriteFile(vf, []byte("cp-1=v2\ncp-3=v1.5"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.open()
	if _, err := e.eng.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.await(id, state.StateInterrupted)
	if err := e.eng.Resume(context.Background(), engine.Origin{User: "alice", Channel: "prd"}, id); err != nil {
		t.Fatal(err)
	}
	op := e.await(id, state.StateAwaitingApproval)
	if op.Digest == first.Digest {
		t.Fatal("resume kept the approved digest although cp-3 changed")
	}
	mustContain(t, "re-planned card", op.Result, "approvals are void", "What changed", "cp-3: upgrade v1 → v2 ⇒ now cp-3: upgrade v1.5 → v2")
	var apps []state.Approval
	_ = e.store.View(context.Background(), func(tx *state.Tx) error { var err error; apps, err = tx.Approvals(id); return err })
	if len(apps) != 0 {
		t.Fatalf("approvals of the old plan survived the resume: %v", apps)
	}
	if err := e.eng.Act(context.Background(), engine.Origin{User: "bob"}, e.sink.Button(t, id, "Approve")); err != nil {
		t.Fatal(err)
	}
	op = e.await(id, state.StateSucceeded)
	if len(op.History) != 1 || op.History[0].End != "interrupted" {
		t.Fatalf("history = %+v", op.History)
	}
}

// Pause stops a roll at the next node boundary (the plugin checks the
// engine's pause mark before it touches a node): the operation waits as
// interrupted with Resume and Abandon, the next node untouched, and Resume
// carries on from there.
func TestPauseStopsBetweenNodesAndResumeContinues(t *testing.T) {
	e := newEnvConfig(t, nodesConfig)
	vf := filepath.Join(t.TempDir(), "versions")
	id, _ := e.submit("alice", "stg", "/talos roll v2 --mode nodes-pause --drift "+vf)
	e.awaitStep(id, "node/cp-1/check", "ok")
	if err := e.eng.Act(context.Background(), engine.Origin{User: "alice", Channel: "stg"}, e.sink.Button(t, id, "Pause")); err != nil {
		t.Fatal(err)
	}
	op := e.await(id, state.StateInterrupted)
	noRunningSteps(t, op)
	mustContain(t, "paused ending", op.Result, "paused by alice between nodes", "paused before cp-2", "cp-1: done, at v2", "cp-2: not started, at v1",
		"mixed versions", "Next: `/talos resume "+id+"`")
	if !strings.Contains(strings.Join(e.auditActions(id), " "), "pause requested/alice paused/alice") {
		t.Fatalf("audit = %v", e.auditActions(id))
	}
	if err := e.eng.Act(context.Background(), engine.Origin{User: "alice", Channel: "stg"}, e.sink.Button(t, id, "Resume")); err != nil {
		t.Fatal(err)
	}
	e.await(id, state.StateSucceeded)
	if b, _ := os.ReadFile(vf); string(b) != "cp-1=v2\ncp-2=v2\ncp-3=v2" {
		t.Fatalf("versions after the resumed roll = %q", b)
	}
	if _, err := os.Stat(filepath.Join(e.cfg.DataDir, "pause", id)); !os.IsNotExist(err) {
		t.Fatalf("the pause mark outlived the run: %v", err)
	}
}

// Pause is refused on an operation that is not running.
func TestPauseRefusedWhenNotRunning(t *testing.T) {
	e := newEnvConfig(t, nodesConfig)
	vf := filepath.Join(t.TempDir(), "versions")
	id, _ := e.submit("alice", "stg", "/talos roll v2 --mode nodes --drift "+vf)
	e.await(id, state.StateSucceeded)
	var ae *engine.ActionError
	if err := e.eng.Pause(context.Background(), engine.Origin{User: "alice", Channel: "stg"}, id); !errors.As(err, &ae) || !strings.Contains(ae.Msg, "only a running disruptive operation can pause") {
		t.Fatalf("pause of a finished op: %v", err)
	}
}

// PauseFor (the bot's own pause: alertpause on a firing alert) stops a roll
// before its next node like the Pause button, recorded as paused by its
// asker with its reasons first in the ending and the audit; a user's Pause
// that follows does not replace it.
func TestPauseForStopsBetweenNodesWithItsReasons(t *testing.T) {
	e := newEnvConfig(t, nodesConfig)
	vf := filepath.Join(t.TempDir(), "versions")
	id, _ := e.submit("alice", "stg", "/talos roll v2 --mode nodes-pause --drift "+vf)
	e.awaitStep(id, "node/cp-1/check", "ok")
	ctx := context.Background()
	if err := e.eng.PauseFor(ctx, id, "alertmanager", []string{"🚨 alert EtcdNoSpace", "Resume asks again"}); err != nil {
		t.Fatal(err)
	}
	if err := e.eng.PauseFor(ctx, id, "other", []string{"second asker reason"}); err != nil {
		t.Fatal(err)
	}
	op := e.await(id, state.StateInterrupted)
	mustContain(t, "paused ending", op.Result, "paused by alertmanager between nodes", "🚨 alert EtcdNoSpace", "Resume asks again", "paused before cp-2")
	if strings.Contains(op.Result, "second asker reason") {
		t.Fatalf("a second PauseFor replaced the first one's reasons:\n%s", op.Result)
	}
	recs, err := e.store.QueryAudit(ctx, state.AuditQuery{OpID: id, Action: "pause requested"})
	if err != nil || len(recs) != 1 || recs[0].Actor != "alertmanager" || !strings.Contains(recs[0].Detail["why"], "EtcdNoSpace") {
		t.Fatalf("pause audit: %v %+v", err, recs)
	}
	if err := e.eng.PauseFor(ctx, id, "alertmanager", nil); err == nil || errors.Is(err, engine.ErrNotPausable) {
		t.Fatalf("PauseFor on an interrupted operation: %v", err)
	}
}

// A plugin that pauses on its own (a storage wait past its limit: nobody
// clicked Pause) leaves the operation interrupted with Resume and Abandon,
// not failed, its lines saying why; Resume carries on.
func TestPluginsOwnPauseIsAPauseNotAFailure(t *testing.T) {
	e := newEnvConfig(t, nodesConfig)
	vf := filepath.Join(t.TempDir(), "versions")
	id, _ := e.submit("alice", "stg", "/talos roll v2 --mode nodes-selfpause --drift "+vf)
	op := e.await(id, state.StateInterrupted)
	noRunningSteps(t, op)
	mustContain(t, "self-paused ending", op.Result, "the run paused itself", "Longhorn not healthy again within 2h0m0s", "paused before cp-2",
		"Next: `/talos resume "+id+"`", "`/talos abandon "+id+"`")
	if err := e.eng.Act(context.Background(), engine.Origin{User: "alice", Channel: "stg"}, e.sink.Button(t, id, "Resume")); err != nil {
		t.Fatal(err)
	}
	e.await(id, state.StateSucceeded)
	if b, _ := os.ReadFile(vf); string(b) != "cp-1=v2\ncp-2=v2\ncp-3=v2" {
		t.Fatalf("versions after the resumed roll = %q", b)
	}
}
