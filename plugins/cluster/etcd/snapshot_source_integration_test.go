package etcd_test

import (
	"context"
	"testing"
	"time"

	"github.com/talosbot/talosbot/plugins/cluster/etcd"
	"github.com/talosbot/talosbot/plugins/cluster/internal/simtest"
	"github.com/talosbot/talosbot/sim"
)

// TestPickSnapshotSourceWithAStoppedMember: a member whose etcd is stopped
// holds its etcd status call until the deadline. The pick asks each member
// on its own, so the stopped member costs at most the bound and the others'
// answers still pick a healthy source; one one-to-many call would fail for
// every member ("no healthy control plane").
func TestPickSnapshotSourceWithAStoppedMember(t *testing.T) {
	c := simtest.Start(t, sim.Options{ControlPlanes: 3, Workers: 1})
	inv, cl := simtest.Connect(t, c, nil)
	ctx := simtest.Ctx(t, 2*time.Minute)
	if err := c.Inject(ctx, "cp-2", sim.Fault{EtcdStopped: true}); err != nil {
		t.Fatal(err)
	}
	const within = 3 * time.Second
	start := time.Now()
	src, size, err := etcd.PickSnapshotSource(context.Background(), cl, inv, within)
	took := time.Since(start)
	if err != nil {
		t.Fatalf("pick with cp-2's etcd stopped: %v", err)
	}
	if src.Name == "cp-2" || size <= 0 {
		t.Fatalf("picked %s (db %d bytes); want a healthy member other than cp-2", src.Name, size)
	}
	if took > within+2*time.Second {
		t.Fatalf("pick took %s, beyond its bound %s", took, within)
	}
}
