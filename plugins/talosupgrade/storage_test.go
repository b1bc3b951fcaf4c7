package talosupgrade

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/talosbot/talosbot/internal/storagetest"
	"github.com/talosbot/talosbot/plugins/cluster/storage"
	"github.com/talosbot/talosbot/plugins/sdk"
	"github.com/talosbot/talosbot/sim"
)

// storageEnv installs Longhorn's and CNPG's real CRDs in the sim's
// kube-apiserver, a volume with a replica on every node and a database
// whose primary runs on worker-1 (the first node of the roll), and runs
// the test controller, which learns of reboots from the Node Ready
// condition the sim flips.
func storageEnv(t *testing.T, e *env) *storagetest.Controller {
	t.Helper()
	dir, err := storagetest.FixturesDir()
	if err != nil {
		t.Skip(err)
	}
	ctx := ctxFor(t, 2*time.Minute)
	kube, dyn := e.kube.Client, e.kube.Dynamic
	if err := storagetest.InstallCRDs(ctx, dyn, dir, storagetest.LonghornCRDs, storagetest.CNPGCRDs); err != nil {
		t.Fatal(err)
	}
	var nodes []string
	for _, n := range []string{"worker-1", "worker-2", "cp-1"} {
		nodes = append(nodes, e.info(t, n).NodeName)
	}
	if err := storagetest.CreateVolume(ctx, kube, dyn, storagetest.Volume{Name: "pvc-data", Nodes: nodes, PVC: "data", PVCNamespace: "app"}); err != nil {
		t.Fatal(err)
	}
	if err := storagetest.CreatePostgres(ctx, kube, dyn, storagetest.Postgres{Namespace: "db", Name: "pg", Nodes: nodes}); err != nil {
		t.Fatal(err)
	}
	ctrl := &storagetest.Controller{Dyn: dyn, Kube: kube, RebuildTime: 2 * time.Second, SwitchoverTime: 300 * time.Millisecond}
	rctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go ctrl.Run(rctx, 50*time.Millisecond)
	return ctrl
}

// A roll of a cluster with a Longhorn volume and a CNPG cluster: the plan
// forecasts both, the primary is switched over before worker-1's drain,
// each node waits for the rebuild, and no volume is ever faulted nor the
// database failed over uncontrolled.
func TestRollWithLonghornAndCNPG(t *testing.T) {
	t.Parallel()
	slow(t)
	e := start(t, 1, 2, true, func(o *sim.Options) { o.TalosVersion = "v1.13.2" })
	ctrl := storageEnv(t, e)
	req := e.request(t, target)
	ctx := ctxFor(t, 5*time.Minute)
	w1 := e.info(t, "worker-1").NodeName

	plan, err := (&Plugin{}).Plan(ctx, req)
	if err != nil || plan.Refusal != nil {
		t.Fatalf("plan: %v %v", err, plan.Refusal)
	}
	warn := strings.Join(plan.Warnings, "\n")
	for _, want := range []string{"drain " + w1 + ": ", "CloudNativePG db/pg: has its primary pg-1 on " + w1 + ": switched over to",
		"Longhorn volume app/data: has a replica on " + w1} {
		if !strings.Contains(warn, want) {
			t.Fatalf("the plan's warnings lack %q:\n%s", want, warn)
		}
	}
	var storageSteps int
	for _, s := range plan.Steps {
		if s.Kind == "storage" {
			storageSteps++
		}
	}
	if storageSteps != 6 {
		t.Fatalf("%d storage steps, want a before and an after for each of 3 nodes", storageSteps)
	}

	var progress []string
	rec := runWatched(ctx, &Plugin{}, req, func(ev *sdk.StepEvent) {
		if strings.HasSuffix(ev.StepID, "/storage-after") && strings.Contains(ev.Detail, "rebuilding") {
			progress = append(progress, ev.Detail)
		}
	})
	res := rec.FinalResult()
	if !res.OK {
		t.Fatalf("roll failed: %s: %s\n%s", res.Summary, res.Error, dump(rec.Steps()))
	}
	lines := strings.Join(res.Lines, "\n")
	if !strings.Contains(lines, "db/pg: primary switched over from pg-1 (on "+w1+")") {
		t.Fatalf("the result does not record the switchover:\n%s", lines)
	}
	if len(progress) == 0 || !strings.Contains(progress[0], "app/data: rebuilding ") {
		t.Fatalf("no rebuild progress in the live message: %q", progress)
	}
	if f := ctrl.Faulted(); len(f) != 0 {
		t.Fatalf("volumes faulted during the roll: %v", f)
	}
	if fo := ctrl.FailedOver(); len(fo) != 0 {
		t.Fatalf("uncontrolled failover during the roll: %v", fo)
	}
}

// A volume whose only replica is on a node to drain refuses the plan (R3),
// naming the node, the volume and the fix.
func TestRollRefusesASingleReplicaVolume(t *testing.T) {
	t.Parallel()
	slow(t)
	e := start(t, 1, 1, true, func(o *sim.Options) { o.TalosVersion = "v1.13.2" })
	dir, err := storagetest.FixturesDir()
	if err != nil {
		t.Skip(err)
	}
	ctx := ctxFor(t, 2*time.Minute)
	if err := storagetest.InstallCRDs(ctx, e.kube.Dynamic, dir, storagetest.LonghornCRDs); err != nil {
		t.Fatal(err)
	}
	w1 := e.info(t, "worker-1").NodeName
	if err := storagetest.CreateVolume(ctx, e.kube.Client, e.kube.Dynamic, storagetest.Volume{Name: "pvc-solo", Nodes: []string{w1}, PVC: "solo", PVCNamespace: "app"}); err != nil {
		t.Fatal(err)
	}
	plan, err := (&Plugin{}).Plan(ctx, e.request(t, target))
	if err != nil {
		t.Fatal(err)
	}
	requireRefusal(t, plan, storage.Rule, "draining "+w1+": Longhorn volume app/solo has its only replica on "+w1)
	if !strings.Contains(plan.Refusal.Fix, "numberOfReplicas to 2") {
		t.Fatalf("fix %q", plan.Refusal.Fix)
	}
}
