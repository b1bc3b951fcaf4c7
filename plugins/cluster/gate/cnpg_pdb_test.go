package gate

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/talosbot/talosbot/internal/storagetest"
	"github.com/talosbot/talosbot/internal/testenv"
	"github.com/talosbot/talosbot/plugins/cluster"
	"github.com/talosbot/talosbot/plugins/cluster/storage"
)

// CloudNativePG's own budget for the primary (<cluster>-primary, 0
// disruptions allowed) does not fail the PDB probe for the primary's node
// when the plugin switches the primary over before the drain; with the
// switchover policy refuse, or a budget of the user's, it still does. The
// forecast says the same. Real kube-apiserver, CNPG's real CRD, the
// budgets as CNPG v1.30.0 builds them, their status as the disruption
// controller computes it.
func TestCNPGPrimaryBudgetMovesWithTheSwitchover(t *testing.T) {
	dir, err := storagetest.FixturesDir()
	if err != nil {
		t.Skip(err)
	}
	k := testenv.StartKube(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := storagetest.InstallCRDs(ctx, k.Dynamic, dir, storagetest.CNPGCRDs); err != nil {
		t.Fatal(err)
	}
	nodes := []string{"n1", "n2", "n3"}
	if err := storagetest.CreateNodes(ctx, k.Client, nodes...); err != nil {
		t.Fatal(err)
	}
	if err := storagetest.CreatePostgres(ctx, k.Client, k.Dynamic, storagetest.Postgres{Namespace: "db", Name: "pg", Nodes: nodes, PDB: true}); err != nil {
		t.Fatal(err)
	}
	ctrl := &storagetest.Controller{Dyn: k.Dynamic, Kube: k.Client}
	if err := wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		_ = ctrl.Reconcile(ctx)
		b, err := k.Client.PolicyV1().PodDisruptionBudgets("db").Get(ctx, "pg-primary", metav1.GetOptions{})
		return err == nil && b.Status.ObservedGeneration == b.Generation && b.Status.CurrentHealthy == 1, nil
	}); err != nil {
		t.Fatalf("the primary's budget never got its status: %v", err)
	}
	inv := cluster.Inventory{Name: "t", Nodes: []cluster.Node{{Name: "n1", Role: cluster.RoleWorker}, {Name: "n2", Role: cluster.RoleWorker}, {Name: "n3", Role: cluster.RoleWorker}}}
	g := &gateRun{c: &cluster.Clients{Kube: k.Client, Dynamic: k.Dynamic}, inv: inv, opts: Options{DrainNodes: []string{"n1"}}.withDefaults()}

	r := probePDBs(ctx, g)
	if r.Status != StatusOK || !strings.Contains(r.Detail, "PDB db/pg-primary covers the CloudNativePG primary pg-1 on n1: switched over before the drain") {
		t.Fatalf("the primary's own budget failed the probe although the primary is switched over first: %s", r.Line())
	}
	refuse := storage.Defaults()
	refuse.Switchover = storage.SwitchoverRefuse
	g.opts.Storage = &refuse
	if r := probePDBs(ctx, g); r.Status != StatusFail || !strings.Contains(r.Detail, "PDB db/pg-primary allows 0 disruptions and covers pg-1 on n1") {
		t.Fatalf("with switchover refuse the budget must block: %s", r.Line())
	}

	pdbs, err := PDBsByNode(ctx, k.Client, nodes)
	if err != nil {
		t.Fatal(err)
	}
	st, err := storage.Read(ctx, k.Client, k.Dynamic, storage.Defaults())
	if err != nil {
		t.Fatal(err)
	}
	f := storage.Build(st, storage.Input{Order: nodes, PDBs: pdbs}, storage.Defaults())
	if err := f.Refusal(); err != nil {
		t.Fatalf("the forecast refused: %v", err)
	}
	lines := strings.Join(f.Lines(), "\n")
	if !strings.Contains(lines, "PDB db/pg-primary (pg-1): is CloudNativePG's budget for the primary: it moves with the switchover") {
		t.Fatalf("the forecast does not say the primary's budget moves:\n%s", lines)
	}
}
