package rollback

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/talosbot/talosbot/internal/storagetest"
	"github.com/talosbot/talosbot/internal/testenv"
	"github.com/talosbot/talosbot/plugins/sdk/sdktest"
	"github.com/talosbot/talosbot/sim"
)

// TestRollbackSwitchesOverAndWaitsForTheRebuild: rolling back the node
// that runs a CloudNativePG primary and a Longhorn replica switches the
// primary over before the reboot (no uncontrolled failover) and waits
// until the volume is healthy again; nothing was ever faulted.
func TestRollbackSwitchesOverAndWaitsForTheRebuild(t *testing.T) {
	dir, err := storagetest.FixturesDir()
	if err != nil {
		t.Skip(err)
	}
	kube := testenv.StartKube(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c, err := sim.Start(ctx, sim.Options{ControlPlanes: 1, Workers: 2, RebootDelay: 300 * time.Millisecond, Naming: sim.DistinctNames,
		Kube: kube.Client, Kubeconfig: kube.Kubeconfig})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	upgradeNode(ctx, t, c, "worker-1", "v1.12.6", "v1.13.9")
	if err := storagetest.InstallCRDs(ctx, kube.Dynamic, dir, storagetest.LonghornCRDs, storagetest.CNPGCRDs); err != nil {
		t.Fatal(err)
	}
	var nodes []string
	for _, n := range []string{"worker-1", "worker-2", "cp-1"} {
		for _, info := range c.Nodes() {
			if info.Name == n {
				nodes = append(nodes, info.NodeName)
			}
		}
	}
	if err := storagetest.CreateVolume(ctx, kube.Client, kube.Dynamic, storagetest.Volume{Name: "pvc-data", Nodes: nodes, PVC: "data", PVCNamespace: "app"}); err != nil {
		t.Fatal(err)
	}
	if err := storagetest.CreatePostgres(ctx, kube.Client, kube.Dynamic, storagetest.Postgres{Namespace: "db", Name: "pg", Nodes: nodes}); err != nil {
		t.Fatal(err)
	}
	ctrl := &storagetest.Controller{Dyn: kube.Dynamic, Kube: kube.Client, RebuildTime: time.Second, SwitchoverTime: 300 * time.Millisecond}
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	go ctrl.Run(rctx, 50*time.Millisecond)

	req := request(t, c, Command, map[string]string{"node": "worker-1"})
	req.Credentials.Kubeconfig = kube.Kubeconfig
	plan, err := New().Plan(ctx, req)
	if err != nil || plan.Refusal != nil {
		t.Fatalf("plan: %v %v", err, plan.Refusal)
	}
	if w := strings.Join(plan.Warnings, "\n"); !strings.Contains(w, "CloudNativePG db/pg: has its primary pg-1 on "+nodes[0]) {
		t.Fatalf("the plan does not forecast the primary:\n%s", w)
	}
	rec, _ := sdktest.Run(ctx, New(), req, nil)
	res := rec.FinalResult()
	lines := strings.Join(res.Lines, "\n")
	for _, want := range []string{"primary switched over from pg-1 (on " + nodes[0] + ") to pg-2", "1 Longhorn volume(s) healthy again"} {
		if !strings.Contains(lines, want) {
			t.Fatalf("the result lacks %q: %v", want, res)
		}
	}
	if f, fo := ctrl.Faulted(), ctrl.FailedOver(); len(f)+len(fo) != 0 {
		t.Fatalf("faulted %v, failed over %v", f, fo)
	}
}
