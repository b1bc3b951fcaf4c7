package soak

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/talosbot/talosbot/internal/storagetest"
	"github.com/talosbot/talosbot/internal/testenv"
	"github.com/talosbot/talosbot/sim"
)

// InvStorage holds when the scenario's cluster runs Longhorn and
// CloudNativePG (the fixtures exist: ../shared/fixtures/crds): the bot's
// drains never leave a volume without a healthy replica, and never take a
// primary down before switching it over (docs/UPGRADES.md, "Storage").
const InvStorage = "no volume ever faulted and no uncontrolled failover"

// storageFixtures are a scenario's Longhorn volume and CNPG cluster and the
// test controller playing both operators (internal/storagetest). Nil
// without the CRD fixtures: the invariant is then not checked.
type storageFixtures struct {
	ctrl *storagetest.Controller
	stop context.CancelFunc
}

// startStorage installs the real CRDs in the scenario's kube-apiserver, a
// volume with a replica on three nodes and a CNPG cluster of three
// instances (its primary on the first, CNPG's budgets on), and runs the
// controller until the scenario ends. Rebuilds take a second and a
// switchover 300 ms, so a roll's storage waits cost a few seconds.
func startStorage(t testing.TB, kube *testenv.Kube, c *sim.Cluster) *storageFixtures {
	t.Helper()
	byName := map[string]string{}
	for _, n := range c.Nodes() {
		byName[n.Name] = n.NodeName
	}
	var nodes []string
	for _, n := range []string{"worker-1", "cp-1", "cp-2"} {
		if kn := byName[n]; kn != "" {
			nodes = append(nodes, kn)
		}
	}
	return newStorageFixtures(t, kube, nodes)
}

// newStorageFixtures is startStorage on the Kubernetes Nodes named.
func newStorageFixtures(t testing.TB, kube *testenv.Kube, nodes []string) *storageFixtures {
	t.Helper()
	dir, err := storagetest.FixturesDir()
	if err != nil {
		return nil
	}
	ctx := context.Background()
	if err := storagetest.InstallCRDs(ctx, kube.Dynamic, dir, storagetest.LonghornCRDs, storagetest.CNPGCRDs); err != nil {
		t.Fatalf("storage fixtures: %v", err)
	}
	if err := storagetest.CreateVolume(ctx, kube.Client, kube.Dynamic, storagetest.Volume{Name: "pvc-soak", Nodes: nodes, PVC: "data", PVCNamespace: "app"}); err != nil {
		t.Fatalf("storage fixtures: %v", err)
	}
	if err := storagetest.CreatePostgres(ctx, kube.Client, kube.Dynamic, storagetest.Postgres{Namespace: "db", Name: "pg", Nodes: nodes, PDB: true}); err != nil {
		t.Fatalf("storage fixtures: %v", err)
	}
	rctx, stop := context.WithCancel(ctx)
	t.Cleanup(stop)
	f := &storageFixtures{ctrl: &storagetest.Controller{Dyn: kube.Dynamic, Kube: kube.Client, RebuildTime: time.Second, SwitchoverTime: 300 * time.Millisecond}, stop: stop}
	go f.ctrl.Run(rctx, 100*time.Millisecond)
	return f
}

// Notes says, for the scenario's log, when InvStorage was not checked
// (no CRD fixtures): a scenario without breaks then says nothing of
// storage, rather than holding the invariant without having looked.
func (f *storageFixtures) Notes() []string {
	if f != nil {
		return nil
	}
	_, err := storagetest.FixturesDir()
	return []string{fmt.Sprintf("%q not checked: %v", InvStorage, err)}
}

// Breaks stops the controller and reports InvStorage's breaks: every
// volume that was ever faulted and every primary lost without a switchover.
func (f *storageFixtures) Breaks() []Break {
	if f == nil {
		return nil
	}
	f.stop()
	var out []Break
	for _, v := range f.ctrl.Faulted() {
		out = append(out, Break{Invariant: InvStorage, Detail: fmt.Sprintf("Longhorn volume %s was faulted", v)})
	}
	for _, fo := range f.ctrl.FailedOver() {
		out = append(out, Break{Invariant: InvStorage, Detail: fmt.Sprintf("CloudNativePG %s failed over without a switchover", fo)})
	}
	return out
}
