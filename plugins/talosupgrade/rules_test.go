package talosupgrade

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

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
