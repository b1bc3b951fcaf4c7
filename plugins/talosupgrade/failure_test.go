package talosupgrade

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/talosbot/talosbot/plugins/sdk"
	"github.com/talosbot/talosbot/plugins/sdk/sdktest"
	"github.com/talosbot/talosbot/sim"
)

// requireNoRollback: a rollback is offered only where it can work (the node
// runs the new version and answers).
func requireNoRollback(t *testing.T, res *sdk.Result) {
	t.Helper()
	for _, a := range res.SuggestedActions {
		if strings.HasPrefix(a.Command, "/talos rollback") {
			t.Fatalf("a rollback is offered where it cannot work: %v", res.SuggestedActions)
		}
	}
}

// requireState: the result says what state the node was left in.
func requireState(t *testing.T, res *sdk.Result, want string) {
	t.Helper()
	if !strings.Contains(res.Summary, want) || !strings.Contains(strings.Join(res.Lines, "\n"), want) {
		t.Fatalf("the result does not say %q: %v", want, res)
	}
}

func requireRollbackOffered(t *testing.T, res *sdk.Result, node string) {
	t.Helper()
	for _, a := range res.SuggestedActions {
		if a.Label == "Rollback node "+node && a.Command == "/talos rollback "+node+" staging" {
			return
		}
	}
	t.Fatalf("no Rollback button for %s in %v", node, res.SuggestedActions)
}

// TestQuorumFailureMidRollStops: etcd loses its leader right after the first
// control plane is upgraded; the quorum check after it stops the roll and no
// later node is touched.
func TestQuorumFailureMidRollStops(t *testing.T) {
	t.Parallel()
	slow(t)
	e := start(t, 3, 1, false, nil)
	ctx := ctxFor(t, 3*time.Minute)
	req := e.request(t, target)
	req.Settings.GateTimeoutMs = 3000
	leader := e.leader(t)
	t.Cleanup(func() { _ = e.c.ClearAll(context.Background()) })

	var once sync.Once
	var first string
	rec := runWatched(ctx, &Plugin{}, req, func(ev *sdk.StepEvent) {
		if strings.HasPrefix(ev.Node, "cp-") && strings.HasSuffix(ev.StepID, "/upgrade") && ev.Status == sdk.StepOK {
			once.Do(func() {
				first = ev.Node
				if err := e.c.Inject(ctx, leader, sim.Fault{NoEtcdLeader: true}); err != nil {
					t.Error(err)
				}
			})
		}
	})
	res := rec.FinalResult()
	if first == "" || first == leader {
		t.Fatalf("first control plane upgraded = %q (leader %s); result %v", first, leader, res)
	}
	if res.OK || !strings.Contains(res.Error, "R16") || !strings.Contains(res.Summary, "no later node was touched") {
		t.Fatalf("want an R16 stop, got %v", res)
	}
	var quorumFailed bool
	for _, s := range rec.Steps() {
		quorumFailed = quorumFailed || (s.StepID == "node/"+first+"/quorum-after" && s.Status == sdk.StepFailed)
	}
	if !quorumFailed {
		t.Fatalf("quorum-after of %s not reported failed:\n%s", first, dump(rec.Steps()))
	}
	// It runs the new version and answers: a rollback can work, and is offered.
	requireRollbackOffered(t, res, first)
	requireState(t, res, first+" runs "+target)
	// The sim's counts: worker-1 and the first control plane once, nobody else.
	for _, n := range e.names() {
		want := 0
		if n == "worker-1" || n == first {
			want = 1
		}
		if got := e.upgradeCalls(n); got != want {
			t.Errorf("%s: %d upgrade calls, want %d", n, got, want)
		}
	}
}

// TestBootFailureAutomaticRollback: worker-1's new image does not boot and
// Talos falls back to v1.12.6 (a failed boot, the bootloader reverted, a 10 s
// countdown, a second reboot). The operation fails saying the node fell back (no Rollback offered: there is nothing left to roll back),
// worker-2 is not touched.
func TestBootFailureAutomaticRollback(t *testing.T) {
	t.Parallel()
	slow(t)
	e := start(t, 1, 2, false, nil)
	ctx := ctxFor(t, 2*time.Minute)
	if err := e.c.Inject(ctx, "worker-1", sim.Fault{BootFailure: true}); err != nil {
		t.Fatal(err)
	}
	rec, _ := sdktest.Run(ctx, &Plugin{}, e.request(t, target), nil)
	res := rec.FinalResult()
	if res.OK || !strings.Contains(res.Error, "worker-1 came back on "+from+": the new image did not boot, Talos fell back (booted entry Talos-"+from+".efi") {
		t.Fatalf("want a failure naming the A/B fallback, got %v", res)
	}
	// Talos already fell back: nothing to roll back, the upgrade may be retried.
	requireNoRollback(t, res)
	requireState(t, res, "worker-1 rolled back: it came back on "+from+", not "+target+": the new image did not boot, Talos fell back")
	if e.c.NodeVersion("worker-1") != from || e.upgradeCalls("worker-1") != 1 || e.upgradeCalls("worker-2") != 0 || e.upgradeCalls("cp-1") != 0 {
		t.Fatalf("worker-1 %s (%d calls), worker-2 %d calls, cp-1 %d calls", e.c.NodeVersion("worker-1"),
			e.upgradeCalls("worker-1"), e.upgradeCalls("worker-2"), e.upgradeCalls("cp-1"))
	}
}

// TestNodeNeverReturnsTimesOut: worker-1 goes down for its reboot and stays
// down; the per-node timeout fails the operation.
func TestNodeNeverReturnsTimesOut(t *testing.T) {
	t.Parallel()
	slow(t)
	e := start(t, 1, 2, false, nil)
	ctx := ctxFor(t, 2*time.Minute)
	if err := e.c.Inject(ctx, "worker-1", sim.Fault{NeverReturn: true}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.c.ClearAll(context.Background()) })
	req := e.request(t, target)
	req.Settings.NodeTimeoutMs = 3000
	start := time.Now()
	rec, _ := sdktest.Run(ctx, &Plugin{}, req, nil)
	res := rec.FinalResult()
	if res.OK || !strings.Contains(res.Error, "worker-1 did not come back within the node timeout 3s") {
		t.Fatalf("want a node timeout, got %v", res)
	}
	if d := time.Since(start); d > time.Minute {
		t.Fatalf("took %s", d)
	}
	// A rollback needs the node's API: none is offered for a node that is down.
	requireNoRollback(t, res)
	requireState(t, res, "worker-1 was rebooted into "+target+" and has not come back")
	if e.upgradeCalls("worker-2") != 0 || e.upgradeCalls("cp-1") != 0 {
		t.Fatal("a later node was touched after the timeout")
	}
}

// TestImagePullFailureLegacyStops: the legacy Upgrade API pulls and
// validates the installer before it acknowledges (Talos v1.13.9
// internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go), so a
// registry failure is the RPC's error: the node never left its version, the
// roll stops, and no rollback is offered.
func TestImagePullFailureLegacyStops(t *testing.T) {
	t.Parallel()
	e := start(t, 1, 2, false, nil)
	ctx := ctxFor(t, 2*time.Minute)
	if err := e.c.Inject(ctx, "worker-1", sim.Fault{ImagePullFailure: true}); err != nil {
		t.Fatal(err)
	}
	req := e.request(t, target)
	req.Settings.NodeTimeoutMs = 60_000
	rec, _ := sdktest.Run(ctx, &Plugin{}, req, nil)
	res := rec.FinalResult()
	if res.OK || !strings.Contains(res.Error, "upgrade worker-1") || !strings.Contains(res.Error, "error validating installer image") {
		t.Fatalf("want the Upgrade RPC's failure, got %v", res)
	}
	requireNoRollback(t, res)
	requireState(t, res, "worker-1 is unchanged: it runs "+from)
	if e.upgradeCalls("worker-2") != 0 {
		t.Fatal("worker-2 touched")
	}
}

// TestQuorumBeforeRefusesTwoMemberEtcd is R16's check before a control plane
// goes down: the gate passes on a healthy two-control-plane cluster, but
// rebooting either member leaves 1 of 2, no majority. The roll stops at the
// first quorum-before and no node is upgraded.
func TestQuorumBeforeRefusesTwoMemberEtcd(t *testing.T) {
	t.Parallel()
	slow(t)
	e := start(t, 2, 0, false, nil)
	ctx := ctxFor(t, 2*time.Minute)
	req := e.request(t, target)
	rec, _ := sdktest.Run(ctx, &Plugin{}, req, nil)
	res := rec.FinalResult()
	if res.OK || !strings.Contains(res.Error, "R16") || !strings.Contains(res.Error, "1 of 2 members would remain") {
		t.Fatalf("want an R16 stop before the first control plane, got %v", res)
	}
	var quorumFailed bool
	for _, s := range rec.Steps() {
		quorumFailed = quorumFailed || (strings.HasSuffix(s.StepID, "/quorum-before") && s.Status == sdk.StepFailed)
	}
	if !quorumFailed {
		t.Fatalf("no quorum-before step failed:\n%s", dump(rec.Steps()))
	}
	for _, n := range e.names() {
		if c := e.upgradeCalls(n); c != 0 {
			t.Fatalf("%s got %d upgrade calls although quorum would be lost", n, c)
		}
	}
}
