package talosupgrade

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/talosbot/talosbot/plugins/cluster/etcd"
	"github.com/talosbot/talosbot/plugins/sdk"
	"github.com/talosbot/talosbot/sim"
)

const (
	hopFrom = "v1.11.3"
	hopPath = "v1.11.6 → v1.12.6 → v1.13.9"
)

var hopStops = []string{"v1.11.6", "v1.12.6", "v1.13.9"}

// startHops runs a sim whose nodes start at v1.11.3 with Kubernetes 1.34
// (supported by Talos v1.11, v1.12 and v1.13), and a request to v1.13.9
// with release data that knows the latest patch of each minor.
func startHops(t *testing.T, cps, workers int) (*env, *sdk.OperationRequest) {
	t.Helper()
	e := start(t, cps, workers, true, func(o *sim.Options) { o.TalosVersion, o.KubernetesVersion = hopFrom, "v1.34.5" })
	req := e.request(t, target)
	known := []string{"v1.11.3", "v1.11.6", "v1.12.0", "v1.12.6", "v1.13.2", "v1.13.9"}
	req.Evidence.Releases = &sdk.Releases{Versions: known, Targets: known, Origin: "Image Factory (test)"}
	return e, req
}

// hopOf is the stop a step id belongs to ("" for the last hop's ids).
func hopOf(id string) string {
	for _, s := range hopStops[:len(hopStops)-1] {
		if strings.HasPrefix(id, s+"/") {
			return s
		}
	}
	return hopStops[len(hopStops)-1]
}

// TestMultiHopPlan: from v1.11.3 to v1.13.9 the plan is three full rolling
// upgrades, v1.11.6 → v1.12.6 → v1.13.9 (the latest patch of each minor),
// each with its snapshot, gates and per-node steps and the installer of its
// version; the target the promotion gate (R6) matches spells the path; the
// one digest covers every hop.
func TestMultiHopPlan(t *testing.T) {
	t.Parallel()
	slow(t)
	e, req := startHops(t, 1, 1)
	ctx := ctxFor(t, time.Minute)
	plan, err := (&Plugin{}).Plan(ctx, req)
	if err != nil || plan.Refusal != nil {
		t.Fatalf("plan: %v %v", err, plan.Refusal)
	}
	if plan.Target != hopPath {
		t.Fatalf("target %q, want the path %q", plan.Target, hopPath)
	}
	for _, n := range e.names() {
		if e.upgradeCalls(n) != 0 {
			t.Fatalf("Plan upgraded %s", n)
		}
	}
	prev := map[string]string{"worker-1": hopFrom, "cp-1": hopFrom}
	var snapshots, gatesAfter, upgrades int
	for _, s := range plan.Steps {
		stop := hopOf(s.ID)
		switch {
		case strings.HasSuffix(s.ID, etcd.StepSnapshotSource):
			snapshots++
		case strings.HasSuffix(s.ID, "gate-after/pdb"):
			gatesAfter++
		case s.Kind == "upgrade":
			upgrades++
			img := "factory.talos.dev/nocloud-installer/" + simSchematic + ":" + stop
			if s.FromVersion != prev[s.Node] || s.ToVersion != stop || s.Image != img {
				t.Errorf("step %s: %s → %s with %s, want %s → %s with %s", s.ID, s.FromVersion, s.ToVersion, s.Image, prev[s.Node], stop, img)
			}
			prev[s.Node] = stop
		}
	}
	if snapshots != 3 || gatesAfter != 3 || upgrades != 6 {
		t.Fatalf("%d snapshots, %d closing gates, %d node upgrades: want 3, 3 and 6 (one roll per hop)", snapshots, gatesAfter, upgrades)
	}
	if !slices.ContainsFunc(plan.Steps, func(s *sdk.Step) bool { return s.ID == "v1.12.6/node/cp-1/upgrade" }) {
		t.Fatal("no hop-prefixed step id v1.12.6/node/cp-1/upgrade")
	}
	in := string(plan.CanonicalInputs)
	for _, want := range []string{`hop[1].to="v1.11.6"`, `hop[2].to="v1.12.6"`, `hop[3].to="v1.13.9"`, ":v1.12.6"} {
		if !strings.Contains(in, want) {
			t.Errorf("canonical inputs lack %s:\n%s", want, in)
		}
	}
	// Release data with a newer v1.12 patch is another path: another digest.
	req.Evidence.Releases.Targets = append(slices.Clone(req.Evidence.Releases.Targets), "v1.12.7")
	other, err := (&Plugin{}).Plan(ctx, req)
	if err != nil || other.Refusal != nil {
		t.Fatalf("plan: %v %v", err, other.Refusal)
	}
	if other.Target != "v1.11.6 → v1.12.7 → v1.13.9" || string(other.CanonicalInputs) == in {
		t.Fatalf("a different path kept target %q or the inputs", other.Target)
	}
}

// TestMultiHopRefusals: --nodes with a path of several hops is refused (it
// would leave the other nodes minors behind); a hop that strands
// Kubernetes is refused naming the Kubernetes upgrade; neither touches a
// node.
func TestMultiHopRefusals(t *testing.T) {
	t.Parallel()
	slow(t)
	e, req := startHops(t, 1, 1)
	req.Args["nodes"] = "worker-1"
	refusedEverywhere(t, e, req, "R10", "--nodes would leave the other nodes minors behind")

	k := start(t, 1, 1, true, func(o *sim.Options) { o.TalosVersion, o.KubernetesVersion = hopFrom, "v1.30.4" })
	kreq := k.request(t, target)
	kreq.Evidence.Releases = req.Evidence.Releases
	refusedEverywhere(t, k, kreq, "R20", "would leave Kubernetes 1.30.4 unsupported")
}

// TestMultiHopRun: one Run takes every node through each hop — one upgrade
// per node per hop, with the installer of that hop — each hop opening with
// its snapshot and gate and closing with its verification and gate before
// the next hop starts; the result declares the final version.
func TestMultiHopRun(t *testing.T) {
	t.Parallel()
	slow(t)
	e, req := startHops(t, 3, 1)
	ctx := ctxFor(t, 8*time.Minute)
	p := &Plugin{}
	rec := runWatched(ctx, p, req, nil)
	res := rec.FinalResult()
	if !res.OK {
		t.Fatalf("run failed: %s: %s\n%s", res.Summary, res.Error, dump(rec.Steps()))
	}
	for _, n := range e.names() {
		if got := e.upgradeCalls(n); got != 3 {
			t.Errorf("%s: %d upgrade calls, want 3 (one per hop)", n, got)
		}
		if v := e.c.NodeVersion(n); v != target {
			t.Errorf("%s runs %s", n, v)
		}
	}
	checkHopOrder(t, rec.Steps(), hopStops)
	if len(rec.Artifacts()) != 3 {
		t.Errorf("%d snapshot artifacts, want one per hop", len(rec.Artifacts()))
	}
	if res.Declared["talos_version"] != target || !strings.Contains(res.Summary, "after 3 hops") {
		t.Errorf("result %q declares %v", res.Summary, res.Declared)
	}
}

// checkHopOrder: per hop, in order, the snapshot, the opening gate, every
// node upgrade to the hop's version and the closing gate; no step of a hop
// before the previous hop's closing gate passed.
func checkHopOrder(t *testing.T, steps []*sdk.StepEvent, stops []string) {
	t.Helper()
	var seq []string
	for _, s := range steps {
		if s.Status != sdk.StepOK {
			continue
		}
		id := s.StepID
		switch {
		case strings.HasSuffix(id, etcd.StepSnapshotSource):
			seq = append(seq, hopOf(id)+" snapshot")
		case strings.HasSuffix(id, "gate-before/pdb"):
			seq = append(seq, hopOf(id)+" gate-before")
		case strings.HasSuffix(id, "/upgrade"):
			if s.ToVersion != hopOf(id) {
				t.Errorf("%s goes to %s", id, s.ToVersion)
			}
			if n := len(seq); n == 0 || seq[n-1] != hopOf(id)+" nodes" {
				seq = append(seq, hopOf(id)+" nodes")
			}
		case strings.HasSuffix(id, "gate-after/pdb"):
			seq = append(seq, hopOf(id)+" gate-after")
		}
	}
	var want []string
	for _, s := range stops {
		want = append(want, s+" snapshot", s+" gate-before", s+" nodes", s+" gate-after")
	}
	if !slices.Equal(seq, want) {
		t.Fatalf("hop order\n got %v\nwant %v\n%s", seq, want, dump(steps))
	}
}

// TestMultiHopResume: the run stops in the middle of hop 2 (its first node
// done, as a crash would leave it); the next attempt of the same request
// lands on hop 2: hop 1 is not run again, the node done in hop 2 is
// skipped, and every node ends with exactly one upgrade per hop.
func TestMultiHopResume(t *testing.T) {
	t.Parallel()
	slow(t)
	e, req := startHops(t, 1, 2)
	p := &Plugin{}
	ctx, cancel := context.WithCancel(ctxFor(t, 8*time.Minute))
	var first string
	rec := runWatched(ctx, p, req, func(ev *sdk.StepEvent) {
		if strings.HasPrefix(ev.StepID, "v1.12.6/node/") && strings.HasSuffix(ev.StepID, "/upgrade") &&
			ev.Status == sdk.StepOK && first == "" {
			first = ev.Node
			cancel() // the bot is gone
		}
	})
	if first == "" {
		t.Fatalf("hop 2 never upgraded a node:\n%s", dump(rec.Steps()))
	}
	if rec.FinalResult().OK {
		t.Fatal("the interrupted run succeeded")
	}
	at := map[string]int{}
	for _, n := range e.names() {
		at[n] = e.upgradeCalls(n)
	}
	if at[first] != 2 {
		t.Fatalf("at the stop: %v, want %s upgraded twice", at, first)
	}

	req.Attempt = 2
	rec = runWatched(ctxFor(t, 8*time.Minute), p, req, nil)
	res := rec.FinalResult()
	if !res.OK {
		t.Fatalf("resumed run failed: %s: %s\n%s", res.Summary, res.Error, dump(rec.Steps()))
	}
	for _, s := range rec.Steps() {
		if strings.HasPrefix(s.StepID, "v1.11.6/") {
			t.Fatalf("the resumed run went back to hop 1: %s", s.StepID)
		}
		if s.StepID == "v1.12.6/node/"+first+"/upgrade" && s.Status != sdk.StepSkipped {
			t.Fatalf("%s done in hop 2 was not skipped: %v", first, s)
		}
	}
	checkHopOrder(t, rec.Steps(), hopStops[1:])
	for _, n := range e.names() {
		if got := e.upgradeCalls(n); got != 3 {
			t.Errorf("%s: %d upgrade calls over both runs, want 3 (at the stop %d)", n, got, at[n])
		}
		if v := e.c.NodeVersion(n); v != target {
			t.Errorf("%s runs %s", n, v)
		}
	}
}

// TestMultiHopFailureSaysWhereEachNodeIs: a node that fails in hop 2 stops
// the path at that hop (hop 3 never starts), and the result says which hop
// each node reached.
func TestMultiHopFailureSaysWhereEachNodeIs(t *testing.T) {
	t.Parallel()
	slow(t)
	e, req := startHops(t, 1, 1)
	p := &Plugin{}
	ctx := ctxFor(t, 8*time.Minute)
	rec := runWatched(ctx, p, req, func(ev *sdk.StepEvent) {
		if ev.StepID == "v1.12.6/node/worker-1/upgrade" && ev.Status == sdk.StepRunning {
			if err := e.c.Inject(ctx, "worker-1", sim.Fault{ImagePullFailure: true}); err != nil {
				t.Error(err)
			}
		}
	})
	res := rec.FinalResult()
	if res.OK {
		t.Fatal("the run succeeded with a failing installer pull")
	}
	for _, s := range rec.Steps() {
		if hopOf(s.StepID) == "v1.13.9" && strings.HasSuffix(s.StepID, "/upgrade") {
			t.Fatalf("hop 3 started after hop 2 failed: %s", s.StepID)
		}
	}
	if e.c.NodeVersion("cp-1") != "v1.11.6" || e.upgradeCalls("cp-1") != 1 {
		t.Fatalf("cp-1 runs %s after %d upgrades: the roll went on past the failure", e.c.NodeVersion("cp-1"), e.upgradeCalls("cp-1"))
	}
	for _, want := range []string{"path " + hopPath + "; where each node is:", "worker-1 v1.11.6 (hop 1/3 done)", "cp-1 v1.11.6 (hop 1/3 done)"} {
		if !slices.ContainsFunc(res.Lines, func(l string) bool { return strings.Contains(l, want) }) {
			t.Fatalf("result lines lack %q: %v", want, res.Lines)
		}
	}
}

var _ sdk.Reporter = (*watcher)(nil)

// TestMultiHopNodeAlreadyPastAHop: a worker already on v1.12.6 (the
// operator upgraded it alone) when the path v1.11.6 → v1.12.6 → v1.13.9
// starts is skipped by hops 1 and 2, and the final check of hop 1 accepts
// it (a hop before the last asks for its target or later, R17); the path
// goes on and ends with every node on the target.
func TestMultiHopNodeAlreadyPastAHop(t *testing.T) {
	t.Parallel()
	slow(t)
	e, req := startHops(t, 1, 1)
	ctx := ctxFor(t, 8*time.Minute)
	p := &Plugin{}
	ahead := e.request(t, "v1.12.6")
	ahead.Args["nodes"] = "worker-1"
	ahead.Evidence.Releases = req.Evidence.Releases
	if res := runWatched(ctx, p, ahead, nil).FinalResult(); !res.OK || e.c.NodeVersion("worker-1") != "v1.12.6" {
		t.Fatalf("setup: worker-1 to v1.12.6: %s: %s (runs %s)", res.Summary, res.Error, e.c.NodeVersion("worker-1"))
	}
	// As an operator would: the endpoint reaches the rebooted worker again
	// only after apid's reconnect backoff.
	if err := e.c.WaitEndpointsAnswer(ctx); err != nil {
		t.Fatal(err)
	}

	rec := runWatched(ctx, p, req, nil)
	res := rec.FinalResult()
	if !res.OK {
		t.Fatalf("run failed: %s: %s\n%s", res.Summary, res.Error, dump(rec.Steps()))
	}
	for _, id := range []string{"v1.11.6/node/worker-1/upgrade", "v1.12.6/node/worker-1/upgrade"} {
		if !slices.ContainsFunc(rec.Steps(), func(s *sdk.StepEvent) bool {
			return s.StepID == id && s.Status == sdk.StepSkipped
		}) {
			t.Errorf("%s was not skipped:\n%s", id, dump(rec.Steps()))
		}
	}
	for n, want := range map[string]int{"worker-1": 2, "cp-1": 3} {
		if got := e.upgradeCalls(n); got != want {
			t.Errorf("%s: %d upgrade calls, want %d", n, got, want)
		}
		if v := e.c.NodeVersion(n); v != target {
			t.Errorf("%s runs %s", n, v)
		}
	}
}
