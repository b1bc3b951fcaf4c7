package etcd_test

import (
	"slices"
	"testing"
	"time"

	"github.com/talosbot/talosbot/plugins/cluster/etcd"
	"github.com/talosbot/talosbot/plugins/cluster/identity"
	"github.com/talosbot/talosbot/plugins/cluster/internal/simtest"
	"github.com/talosbot/talosbot/sim"
)

// TestReadQuorumAsksEveryControlPlane is R4 at the quorum read: on a healthy
// three-member etcd every control plane reports its status, so all three are
// healthy under one leader and CheckRestored passes. Asking fewer than every
// control plane leaves members unaccounted for. The etcd member names differ
// from the inventory names (sim.DistinctNames): members are named by the
// inventory node they resolve to, never by their own names.
func TestReadQuorumAsksEveryControlPlane(t *testing.T) {
	c := simtest.Start(t, sim.Options{ControlPlanes: 3, Workers: 1, Naming: sim.DistinctNames})
	inv, cl := simtest.Connect(t, c, nil)
	ctx := simtest.Ctx(t, 2*time.Minute)
	q := etcd.ReadQuorum(ctx, cl, identity.Resolve(ctx, cl, inv, identity.Options{}))
	if want := []string{"cp-1", "cp-2", "cp-3"}; !slices.Equal(sorted(q.Healthy), want) || !slices.Equal(q.Members, want) {
		t.Fatalf("healthy %v, members %v; want every control plane (%s)", q.Healthy, q.Members, q.Summary())
	}
	if err := q.CheckRestored(); err != nil || q.Leader == "" {
		t.Fatalf("a healthy cluster's quorum: %v (leader %q)", err, q.Leader)
	}
}

func sorted(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}
