package gate

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/talosbot/talosbot/internal/storagetest"
	"github.com/talosbot/talosbot/internal/testenv"
	"github.com/talosbot/talosbot/plugins/cluster"
)

// TestStorageProbe: "not checked" (never a pass) without Longhorn and
// CNPG, or with them and nothing to read; with their real CRDs, a degraded volume fails naming it, and
// passes once it is healthy again.
func TestStorageProbe(t *testing.T) {
	t.Parallel()
	dir, err := storagetest.FixturesDir()
	if err != nil {
		t.Skip(err)
	}
	k := testenv.StartKube(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	g := &gateRun{c: &cluster.Clients{Kube: k.Client, Dynamic: k.Dynamic}}
	if r := probeStorage(ctx, g); r.Status != StatusNotChecked || !strings.Contains(r.Detail, "neither Longhorn nor CloudNativePG") {
		t.Fatalf("without the CRDs: %+v, want not checked", r)
	}
	if err := storagetest.InstallCRDs(ctx, k.Dynamic, dir, storagetest.LonghornCRDs, storagetest.CNPGCRDs); err != nil {
		t.Fatal(err)
	}
	if err := storagetest.CreateNodes(ctx, k.Client, "a", "b"); err != nil {
		t.Fatal(err)
	}
	if r := probeStorage(ctx, g); r.Status != StatusNotChecked || !strings.Contains(r.Detail, "no attached Longhorn volume") {
		t.Fatalf("CRDs installed, nothing to read: %+v, want not checked", r)
	}
	if err := storagetest.CreateVolume(ctx, k.Client, k.Dynamic, storagetest.Volume{Name: "pvc-data", Nodes: []string{"a", "b"}, PVC: "data", PVCNamespace: "app"}); err != nil {
		t.Fatal(err)
	}
	ctrl := &storagetest.Controller{Dyn: k.Dynamic, Kube: k.Client}
	if err := storagetest.SetNodeReady(ctx, k.Client, "b", false); err != nil {
		t.Fatal(err)
	}
	if err := ctrl.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if r := probeStorage(ctx, g); r.Status != StatusFail || !strings.Contains(r.Detail, "Longhorn volume app/data is degraded") {
		t.Fatalf("degraded volume: %+v, want a failure naming it", r)
	}
	if err := storagetest.SetNodeReady(ctx, k.Client, "b", true); err != nil {
		t.Fatal(err)
	}
	ctrl.RebuildTime = time.Nanosecond
	for range 2 { // start the rebuild, then finish it
		if err := ctrl.Reconcile(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if r := probeStorage(ctx, g); r.Status != StatusOK {
		t.Fatalf("healthy again: %+v", r)
	}
}
