package bot_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/talosbot/talosbot/state"
)

// statusConfig has one cluster whose status provider answers, one that is
// down (the provider waits for the host's deadline) and one whose provider
// fails; production has a maintenance window (the test clock is Monday
// 2026-11-30 12:00 UTC). The timeout is what the down cluster costs the
// test, and must be well above a loaded machine's round trip to the plugin
// process (2 s was not, under the flake check's load, for the clusters that
// do answer).
const statusConfig = `
data_dir: %s
timeouts: {status: 8s}
clusters:
  - name: staging
    environment: staging
    channels: [stg]
    endpoints: [127.0.0.1]
    nodes: [{name: cp-1, address: 127.0.0.1, role: controlplane, host: pve1}]
    credentials: {source: files, talosconfig: "file:%s"}
    declared: {versions: "Talos v1.13.9 (1 node),Kubernetes v1.36.3"}
  - name: production
    environment: production
    channels: [prd]
    endpoints: [127.0.0.5]
    nodes: [{name: cp-1, address: 127.0.0.5, role: controlplane, host: pve1}]
    credentials: {source: files, talosconfig: "file:%s"}
    declared: {versions: down}
  - name: lab
    environment: staging
    channels: [lab]
    endpoints: [127.0.0.9]
    nodes: [{name: cp-1, address: 127.0.0.9, role: controlplane, host: pve1}]
    credentials: {source: files, talosconfig: "file:%[3]s"}
    declared: {versions: fail}
policy:
  staging:
    operators: [alice, bob]
  production:
    approvers: [bob, dave]
    operators: [alice, bob]
    viewers: [carol]
    maintenance_windows: [{days: [tue, thu], start: "20:00", end: "23:00", timezone: UTC}]
`

// Status prints the versions a status provider read from each cluster
// (through its Plan, no plugin named by the bot); a cluster that does not
// answer within timeouts.status, or whose provider fails, reads "not read"
// with the reason, never a value; and a closed window says when it opens.
func TestStatusShowsVersionsAndNotReadWhenTheClusterIsDown(t *testing.T) {
	e := newEnvConfig(t, statusConfig)
	if _, err := e.submit("alice", "prd", "/talos status"); err != nil {
		t.Fatal(err)
	}
	got := e.sink.WaitReply(t, "*lab* (staging)")
	mustContain(t, "status", got,
		"*staging* (staging)\n  lock: free\n  freeze: none\n  versions: Talos v1.13.9 (1 node) · Kubernetes v1.36.3\n",
		"*production* (production)",
		"maintenance window: closed now, next opens Tue 2026-12-01 20:00 UTC (in 1 day 8 h) (tue,thu 20:00–23:00 UTC)",
		"versions: not read (no answer within 8 s, timeouts.status)",
		"versions: not read (plugin \"eng\": plan: no node answered with its Talos version)")
	for _, l := range strings.Split(got, "\n") {
		if strings.Contains(l, "versions:") && strings.Contains(l, "not read") && strings.Contains(l, "v1.") {
			t.Errorf("a cluster that was not read shows a version: %q", l)
		}
	}
}

// Status reads each cluster through its plugins and shows what runs there,
// so it needs a role that may read, like audit: a user sees the clusters
// whose environment gives them one, and the others are never planned
// against; a cluster named without a role, or no readable cluster at all,
// is refused and audited.
func TestStatusShowsOnlyTheClustersTheUserMayRead(t *testing.T) {
	// production answers here (not "down"), so the test costs no timeout.
	e := newEnvConfig(t, strings.Replace(statusConfig, "versions: down", `versions: "Talos v1.13.8 (1 node)"`, 1))
	if _, err := e.submit("carol", "prd", "/talos status"); err != nil {
		t.Fatal(err)
	}
	got := e.sink.WaitReply(t, "*production* (production)")
	mustContain(t, "status", got, "versions: Talos v1.13.8 (1 node)", "(not shown, as carol may not read them: staging, lab)")
	for _, other := range []string{"*staging*", "*lab*", "v1.13.9", "not read ("} {
		if strings.Contains(got, other) {
			t.Errorf("carol, who has no role in staging, sees %q:\n%s", other, got)
		}
	}
	for _, cl := range []string{"staging", "lab"} {
		if n := e.plans.Count(cl); n != 0 {
			t.Errorf("status planned %d times against %s, which carol may not read", n, cl)
		}
	}

	refusals := func() int {
		t.Helper()
		recs, err := e.store.QueryAudit(context.Background(), state.AuditQuery{Action: "refused", Command: "status", Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		return len(recs)
	}
	if _, err := e.submit("carol", "stg", "/talos status staging"); err == nil {
		t.Fatal("carol read the status of staging, where she has no role")
	}
	e.sink.WaitReply(t, "refused: carol has no role in staging")
	if _, err := e.submit("mallory", "stg", "/talos status"); err == nil {
		t.Fatal("a user with no role anywhere read the status")
	}
	e.sink.WaitReply(t, "refused: mallory may read the status of no cluster: mallory has no role in")
	if n := refusals(); n != 2 {
		t.Fatalf("audited status refusals = %d, want 2", n)
	}
	for _, cl := range []string{"staging", "lab"} {
		if n := e.plans.Count(cl); n != 0 {
			t.Errorf("a refused status planned %d times against %s", n, cl)
		}
	}
}

func TestStatusListsLateSteps(t *testing.T) {
	e := newEnv(t)
	start := e.clock.Now().Add(-2 * time.Hour)
	err := e.store.Update(context.Background(), func(tx *state.Tx) error {
		op := &state.Operation{ID: "late01", Cluster: "staging", Environment: "staging", Command: "upgrade talos", Disruptive: true, Requester: "alice",
			State: state.StatePlanned, CreatedAt: start}
		if err := tx.PutOperation(op); err != nil {
			return err
		}
		_, err := tx.Transition(op.ID, state.StateRunning, func(o *state.Operation) {
			o.Steps = []state.Step{{ID: "node/cp-1/upgrade", Title: "cp-1: upgrade", Node: "cp-1", Status: "running", Detail: "booted, not ready: kubelet", StartedAt: start}}
		})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.submit("alice", "stg", "/talos status staging"); err != nil {
		t.Fatal(err)
	}
	got := e.sink.WaitReply(t, "*staging* (staging)")
	mustContain(t, "status", got, "`late01` upgrade talos — running", "⏳ cp-1: upgrade is late: running 2 h,", "now: booted, not ready: kubelet")
}
