package k8supgrade

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/talosbot/talosbot/internal/testenv"
	"github.com/talosbot/talosbot/plugins/sdk/sdktest"
	"github.com/talosbot/talosbot/sim"
)

// TestPrePullStalledRegistryStops: with worker-1's registry unreachable, Talos holds the
// ImagePull of the new kubelet for up to 20 minutes. The pre-pull gives up after the node
// timeout with a failure that says what to check, and nothing was applied.
func TestPrePullStalledRegistryStops(t *testing.T) {
	t.Parallel()
	kube := testenv.StartKube(t)
	e := startEnv(t, kube, supportsTarget)
	ctx := ctxFor(t, 3*time.Minute)
	if err := e.c.Inject(ctx, "worker-1", sim.Fault{RegistryUnreachable: true}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.c.ClearAll(context.Background()) })
	req := e.request(target)
	req.Settings.NodeTimeoutMs = 2000

	rec, _ := sdktest.Run(ctx, New(), req, nil)
	res := rec.FinalResult()
	if res.OK || !strings.Contains(res.Summary, "stopped at the pre-pull (nothing was changed)") ||
		!strings.Contains(res.Error, "on worker-1 did not finish within 2s") || !strings.Contains(res.Error, "check that the node reaches the registry") {
		t.Fatalf("want a stop at the pre-pull naming worker-1's stalled pull, got %v", res)
	}
	wantCounts(t, "after a stalled pull", e.applies(), map[string]int{"cp-1": 0, "cp-2": 0, "cp-3": 0, "worker-1": 0})
}
