package k8s_test

import (
	"testing"
	"time"

	"github.com/talosbot/talosbot/internal/testenv"
	"github.com/talosbot/talosbot/plugins/cluster/identity"
	"github.com/talosbot/talosbot/plugins/cluster/internal/simtest"
	"github.com/talosbot/talosbot/plugins/cluster/k8s"
	"github.com/talosbot/talosbot/sim"
)

// TestReadVersionsWithDistinctNames: the mirror pods are named after the
// Kubernetes Node (component-<Node name>) and kubelets are read from their
// Nodes, whose names differ from the inventory's (sim.DistinctNames); the
// versions are still keyed by inventory name.
func TestReadVersionsWithDistinctNames(t *testing.T) {
	kube := testenv.StartKube(t)
	c := simtest.Start(t, sim.Options{ControlPlanes: 1, Workers: 1, Kube: kube.Client, Kubeconfig: kube.Kubeconfig,
		StaticPods: true, Naming: sim.DistinctNames})
	inv, cl := simtest.Connect(t, c, kube.Kubeconfig)
	ctx := simtest.Ctx(t, 2*time.Minute)
	v, err := k8s.ReadVersions(ctx, cl, identity.Resolve(ctx, cl, inv, identity.Options{}))
	if err != nil {
		t.Fatal(err)
	}
	want := sim.DefaultKubernetesVersion
	for _, comp := range k8s.StaticPodComponents() {
		if got := v.StaticPods["cp-1"][comp]; got != want {
			t.Fatalf("%s on cp-1: %q, want %s (static pods %v)", comp, got, want, v.StaticPods)
		}
	}
	for _, n := range []string{"cp-1", "worker-1"} {
		if got := v.Kubelets[n]; got != want {
			t.Fatalf("kubelet on %s: %q, want %s (%v)", n, got, want, v.Kubelets)
		}
	}
}
