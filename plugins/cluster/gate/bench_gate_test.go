package gate_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/talosbot/talosbot/plugins/cluster/gate"
	"github.com/talosbot/talosbot/plugins/cluster/internal/simtest"
	"github.com/talosbot/talosbot/sim"
)

// BenchmarkGate measures gate wall time with 20 ms of injected latency on
// every node's API. Goal: nodes=30 within 1.5× of nodes=3 (probes and
// per-node calls run in parallel). Kubernetes probes are skipped here.
func BenchmarkGate(b *testing.B) {
	for _, n := range []struct{ cps, workers int }{{3, 0}, {3, 27}} {
		b.Run(fmt.Sprintf("nodes=%d", n.cps+n.workers), func(b *testing.B) {
			c := simtest.Start(b, sim.Options{ControlPlanes: n.cps, Workers: n.workers})
			ctx := context.Background()
			for _, node := range c.Nodes() {
				if err := c.Inject(ctx, node.Name, sim.Fault{Latency: 20 * time.Millisecond}); err != nil {
					b.Fatal(err)
				}
			}
			inv, cl := simtest.Connect(b, c, nil)
			if res := gate.Run(ctx, cl, inv, gate.Options{}); !res.Passed {
				b.Fatalf("gate failed: %v", res.Reasons)
			}
			b.ResetTimer()
			for b.Loop() {
				if res := gate.Run(ctx, cl, inv, gate.Options{}); !res.Passed {
					b.Fatalf("gate failed: %v", res.Reasons)
				}
			}
		})
	}
}
