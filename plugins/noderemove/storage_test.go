package noderemove

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/talosbot/talosbot/internal/storagetest"
	"github.com/talosbot/talosbot/internal/testenv"
	"github.com/talosbot/talosbot/plugins/sdk/sdktest"
)

// TestRemovalSwitchesThePrimaryOverFirst: removing the node that runs a
// CloudNativePG primary forecasts it on the plan, switches the primary
// over before the reset drains the node (no uncontrolled failover), and a
// volume whose only replica is there refuses the plan (R3).
func TestRemovalSwitchesThePrimaryOverFirst(t *testing.T) {
	t.Parallel()
	slow(t)
	dir, err := storagetest.FixturesDir()
	if err != nil {
		t.Skip(err)
	}
	kube := testenv.StartKube(t)
	c := startSim(t, kube)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := storagetest.InstallCRDs(ctx, kube.Dynamic, dir, storagetest.LonghornCRDs, storagetest.CNPGCRDs); err != nil {
		t.Fatal(err)
	}
	w1, cp1 := nodeName(t, c, "worker-1"), nodeName(t, c, "cp-1")
	if err := storagetest.CreatePostgres(ctx, kube.Client, kube.Dynamic, storagetest.Postgres{Namespace: "db", Name: "pg", Nodes: []string{w1, cp1}}); err != nil {
		t.Fatal(err)
	}
	if err := storagetest.CreateVolume(ctx, kube.Client, kube.Dynamic, storagetest.Volume{Name: "pvc-solo", Nodes: []string{w1}, PVC: "solo", PVCNamespace: "app"}); err != nil {
		t.Fatal(err)
	}
	ctrl := &storagetest.Controller{Dyn: kube.Dynamic, Kube: kube.Client, SwitchoverTime: 300 * time.Millisecond}
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	go ctrl.Run(rctx, 50*time.Millisecond)

	req := request(c, kube, "worker-1")
	plan, err := New().Plan(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if r := plan.Refusal; r == nil || r.Rule != "R3" || !strings.Contains(r.Reason, "app/solo has its only replica on "+w1) {
		t.Fatalf("plan with a single-replica volume on %s: refusal %v, want R3 naming it", w1, r)
	}
	if err := kube.Dynamic.Resource(storagetest.VolumeGVR).Namespace(storagetest.LonghornNamespace).Delete(ctx, "pvc-solo", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	plan, err = New().Plan(ctx, req)
	if err != nil || plan.Refusal != nil {
		t.Fatalf("plan: %v %v", err, plan.Refusal)
	}
	if w := strings.Join(plan.Warnings, "\n"); !strings.Contains(w, "CloudNativePG db/pg: has its primary pg-1 on "+w1+": switched over to pg-2") {
		t.Fatalf("the plan does not forecast the switchover:\n%s", w)
	}
	rec, _ := sdktest.Run(ctx, New(), req, nil)
	res := rec.FinalResult()
	if !strings.Contains(strings.Join(res.Lines, "\n"), "primary switched over from pg-1 (on "+w1+") to pg-2") {
		t.Fatalf("the removal did not switch the primary over first: %v", res)
	}
	if c.Calls("worker-1", "Reset") != 1 {
		t.Fatalf("worker-1 was not reset: %v", res)
	}
	if fo := ctrl.FailedOver(); len(fo) != 0 {
		t.Fatalf("uncontrolled failover: %v", fo)
	}
}
