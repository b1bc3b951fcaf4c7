package talosupgrade

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/talosbot/talosbot/internal/releases"
	"github.com/talosbot/talosbot/plugins/cluster"
	"github.com/talosbot/talosbot/plugins/sdk"
	"github.com/talosbot/talosbot/sim"
)

// TestGateAfterAWorkerStopsTheRoll is R15: workers one at a time, the
// health gate after each. A control-plane service turns unhealthy right
// after worker-1 is upgraded; the gate after worker-1 fails, the roll
// stops there, and no later node (worker-2, the control plane) is touched.
func TestGateAfterAWorkerStopsTheRoll(t *testing.T) {
	e := start(t, 1, 2, false, nil)
	ctx := ctxFor(t, 2*time.Minute)
	req := e.request(t, target)
	req.Settings.GateTimeoutMs = 2000
	req.Settings.GateAfterTimeoutMs = 2000
	t.Cleanup(func() { _ = e.c.ClearAll(context.Background()) })

	var once sync.Once
	var first string
	rec := runWatched(ctx, &Plugin{}, req, func(ev *sdk.StepEvent) {
		if strings.HasSuffix(ev.StepID, "/upgrade") && ev.Status == sdk.StepOK {
			once.Do(func() {
				first = ev.Node
				if err := e.c.Inject(ctx, "cp-1", sim.Fault{UnhealthyService: "apid"}); err != nil {
					t.Error(err)
				}
			})
		}
	})
	res := rec.FinalResult()
	if first != "worker-1" {
		t.Fatalf("first node upgraded = %q, want worker-1 (workers first); result %v", first, res)
	}
	if res.OK || !strings.Contains(res.Summary, "health gate after worker-1 failed") || !strings.Contains(res.Summary, "no later node was touched") {
		t.Fatalf("want the roll stopped by the gate after worker-1, got %v", res)
	}
	var gateFailed bool
	for _, s := range rec.Steps() {
		gateFailed = gateFailed || (s.StepID == "node/worker-1/gate" && s.Status == sdk.StepFailed)
	}
	if !gateFailed {
		t.Fatalf("the gate after worker-1 is not reported failed:\n%s", dump(rec.Steps()))
	}
	for _, n := range []string{"worker-2", "cp-1"} {
		if got := e.upgradeCalls(n); got != 0 {
			t.Errorf("%s: %d upgrade calls after the failed gate, want 0", n, got)
		}
	}
}

// TestPreflightInstallerChecksOnFacts is R13's pre-flight half in the fast
// tier: a hop into v1.14 refuses a node whose machine.install.image is not
// an Image Factory installer (v1.14 publishes no other), and a node on the
// LifecycleService path (v1.13+) with machine.install.extraKernelArgs, which
// that path drops, unless grubUseUKICmdline makes them inert anyway (a
// warning). The refusal names the node and the argument, never its value.
func TestPreflightInstallerChecksOnFacts(t *testing.T) {
	inv := cluster.Inventory{Name: "staging", Nodes: []cluster.Node{
		{Name: "cp-1", Role: cluster.RoleControlPlane, Address: "10.0.0.1"},
		{Name: "w-1", Role: cluster.RoleWorker, Address: "10.0.0.2"}}}
	v := func(s string) releases.Version { x, _ := releases.Parse(s); return x }
	hop := []preflightHop{{n: 1, of: 1, to: v("v1.14.1"), from: map[string]releases.Version{"cp-1": v("v1.13.9"), "w-1": v("v1.13.9")}}}
	factory := "factory.talos.dev/nocloud-installer/" + strings.Repeat("a", 64) + ":v1.13.9"
	facts := func() *clusterFacts {
		return &clusterFacts{nodes: map[string]nodeFacts{
			"cp-1": {node: inv.Nodes[0], installImage: factory}, "w-1": {node: inv.Nodes[1], installImage: factory}},
			etcd: map[string]string{"cp-1": "3.6.9"}, kube: true}
	}
	if r := targetPreflight(facts(), hop, inv); r.refusal != nil {
		t.Fatalf("factory installers, no kernel arguments: refused %v", r.refusal)
	}

	f := facts()
	w := f.nodes["w-1"]
	w.installImage = "ghcr.io/siderolabs/installer:v1.13.9"
	f.nodes["w-1"] = w
	if r := targetPreflight(f, hop, inv); r.refusal == nil || r.refusal.Rule != "R13" ||
		!strings.Contains(r.refusal.Reason, "machine.install.image is not from Image Factory on w-1 (ghcr.io/siderolabs/installer:v1.13.9)") {
		t.Errorf("a non-factory installer into v1.14: %v", r.refusal)
	}

	f = facts()
	w = f.nodes["w-1"]
	w.extraKernelArgs = []string{"siderolink.api=https://x?jointoken=secret", "console=ttyS0"}
	f.nodes["w-1"] = w
	r := targetPreflight(f, hop, inv)
	if r.refusal == nil || r.refusal.Rule != "R13" ||
		!strings.Contains(r.refusal.Reason, "machine.install.extraKernelArgs on w-1 (siderolink.api console)") {
		t.Fatalf("extraKernelArgs on the LifecycleService path: %v", r.refusal)
	}
	if strings.Contains(r.refusal.Error(), "secret") {
		t.Errorf("a kernel argument's value reached the refusal: %v", r.refusal)
	}
	w.grubUKI = true
	f.nodes["w-1"] = w
	if r := targetPreflight(f, hop, inv); r.refusal != nil {
		t.Errorf("inert kernel arguments (grubUseUKICmdline) refused: %v", r.refusal)
	}
}
