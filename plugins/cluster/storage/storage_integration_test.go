package storage_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/talosbot/talosbot/internal/storagetest"
	"github.com/talosbot/talosbot/internal/testenv"
	"github.com/talosbot/talosbot/plugins/cluster/storage"
	"github.com/talosbot/talosbot/plugins/sdk"
)

// clock is the controller's injected clock, moved by the test; with step
// set, every reading moves it on by step (time passing as the operators
// reconcile, without the test sleeping).
type clock struct {
	mu   sync.Mutex
	t    time.Time
	step time.Duration
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(c.step)
	return c.t
}

func (c *clock) Step(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.step = d
}
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

type env struct {
	k     *testenv.Kube
	clk   *clock
	ctrl  *storagetest.Controller
	nodes []string
}

// startEnv: a real kube-apiserver with Longhorn's and CNPG's real CRDs,
// three Ready nodes, and the test controller reconciling in the background.
func startEnv(t *testing.T) *env {
	t.Helper()
	dir, err := storagetest.FixturesDir()
	if err != nil {
		t.Skip(err)
	}
	k := testenv.StartKube(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := storagetest.InstallCRDs(ctx, k.Dynamic, dir, storagetest.LonghornCRDs, storagetest.CNPGCRDs); err != nil {
		t.Fatal(err)
	}
	e := &env{k: k, clk: &clock{t: time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)}, nodes: []string{"n1", "n2", "n3"}}
	if err := storagetest.CreateNodes(ctx, k.Client, e.nodes...); err != nil {
		t.Fatal(err)
	}
	e.ctrl = &storagetest.Controller{Dyn: k.Dynamic, Kube: k.Client, Now: e.clk.Now, RebuildTime: 100 * time.Second, SwitchoverTime: 2 * time.Second}
	go e.ctrl.Run(ctx, 20*time.Millisecond)
	return e
}

func (e *env) waiter(s storage.Settings) storage.Waiter {
	return storage.Waiter{Kube: e.k.Client, Dyn: e.k.Dynamic, Settings: s, Interval: 20 * time.Millisecond, Now: e.clk.Now}
}

func (e *env) read(t *testing.T) storage.State {
	t.Helper()
	st, err := storage.Read(context.Background(), e.k.Client, e.k.Dynamic, storage.Defaults())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func volume(st storage.State, name string) storage.Volume {
	for _, v := range st.Volumes {
		if v.Name == name {
			return v
		}
	}
	return storage.Volume{}
}

func postgres(st storage.State, key string) storage.Postgres {
	for _, p := range st.Postgres {
		if p.Key() == key {
			return p
		}
	}
	return storage.Postgres{}
}

// waitFor polls cond until it holds or a deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return cond(), nil
	})
	if err != nil {
		t.Fatalf("timed out waiting for %s", what)
	}
}

func TestStorageThroughRealCRDs(t *testing.T) {
	e := startEnv(t)
	ctx := context.Background()
	kube, dyn := e.k.Client, e.k.Dynamic
	if err := storagetest.CreateVolume(ctx, kube, dyn, storagetest.Volume{Name: "pvc-data", Nodes: e.nodes, PVC: "data", PVCNamespace: "app"}); err != nil {
		t.Fatal(err)
	}
	if err := storagetest.CreatePostgres(ctx, kube, dyn, storagetest.Postgres{Namespace: "db", Name: "pg", Nodes: e.nodes}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the volume read healthy", func() bool {
		v := volume(e.read(t), "pvc-data")
		return v.Robustness == "healthy" && len(v.HealthyOn()) == 3
	})

	t.Run("controller: replica lost with its node, rebuilt over time", func(t *testing.T) {
		if err := storagetest.SetNodeReady(ctx, kube, "n3", false); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "degraded", func() bool { return volume(e.read(t), "pvc-data").Robustness == "degraded" })
		if err := storagetest.SetNodeReady(ctx, kube, "n3", true); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "rebuild started", func() bool { _, ok := volume(e.read(t), "pvc-data").Progress(); return ok })
		e.clk.Add(50 * time.Second)
		waitFor(t, "rebuild at 50 %", func() bool { p, ok := volume(e.read(t), "pvc-data").Progress(); return ok && p == 50 })
		if v := volume(e.read(t), "pvc-data"); v.Robustness != "degraded" {
			t.Fatalf("robustness %q half way through the rebuild, want degraded", v.Robustness)
		}
		e.clk.Add(50 * time.Second)
		waitFor(t, "healthy again", func() bool { return volume(e.read(t), "pvc-data").Robustness == "healthy" })
		if f := e.ctrl.Faulted(); len(f) != 0 {
			t.Fatalf("faulted: %v", f)
		}
	})

	t.Run("forecast: single replica refused, primary switched over, replicas waited for", func(t *testing.T) {
		if err := storagetest.CreateVolume(ctx, kube, dyn, storagetest.Volume{Name: "pvc-solo", Nodes: []string{"n2"}, PVC: "solo", PVCNamespace: "app"}); err != nil {
			t.Fatal(err)
		}
		defer func() {
			_ = dyn.Resource(storagetest.VolumeGVR).Namespace(storagetest.LonghornNamespace).Delete(ctx, "pvc-solo", metav1.DeleteOptions{})
		}()
		waitFor(t, "pvc-solo read", func() bool { return len(volume(e.read(t), "pvc-solo").HealthyOn()) == 1 })
		f := storage.Build(e.read(t), storage.Input{Order: e.nodes, PDBs: map[string][]string{"n3": {"PDB app/web"}}}, storage.Defaults())
		lines := strings.Join(f.Lines(), "\n")
		for _, want := range []string{
			"drain n1: ", "CloudNativePG db/pg: has its primary pg-1 on n1: switched over to pg-2 before the drain",
			"⛔ Longhorn volume app/solo: has its only replica on n2", "PDB app/web: allows 0 disruptions",
			"Longhorn volume app/data: has a replica on n1 (3 of 3 healthy)",
		} {
			if !strings.Contains(lines, want) {
				t.Errorf("forecast lacks %q:\n%s", want, lines)
			}
		}
		re, ok := sdk.AsRefusal(f.Refusal())
		if !ok || re.Rule != "R3" || !strings.Contains(re.Reason, "draining n2") || !strings.Contains(re.Reason, "app/solo") ||
			!strings.Contains(re.Fix, "numberOfReplicas") {
			t.Fatalf("refusal = %v, want R3 naming n2, app/solo and the fix", f.Refusal())
		}
	})

	t.Run("before a node: the primary is switched over first, no failover", func(t *testing.T) {
		e.clk.Step(100 * time.Millisecond)
		defer e.clk.Step(0)
		lines, err := e.waiter(storage.Defaults()).Before(ctx, "n1")
		if err != nil {
			t.Fatal(err)
		}
		if p := postgres(e.read(t), "db/pg"); p.CurrentPrimary != "pg-2" || p.PrimaryNode() != "n2" {
			t.Fatalf("primary %s on %s after Before(n1), want pg-2 on n2", p.CurrentPrimary, p.PrimaryNode())
		}
		if !strings.Contains(strings.Join(lines, "\n"), "primary switched over from pg-1 (on n1) to pg-2") {
			t.Fatalf("lines %q do not record the switchover", lines)
		}
		// The drain takes n1 down now: no uncontrolled failover.
		if err := storagetest.SetNodeReady(ctx, kube, "n1", false); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "pg-1 not ready", func() bool { return !postgres(e.read(t), "db/pg").PodReady["pg-1"] })
		// CNPG is not "healthy" with an instance down: the phase says it
		// waits for the instances (PhaseWaitingForInstancesToBeActive).
		waitFor(t, "the phase waiting for pg-1", func() bool {
			return postgres(e.read(t), "db/pg").Phase == "Waiting for the instances to become active"
		})
		if fo := e.ctrl.FailedOver(); len(fo) != 0 {
			t.Fatalf("uncontrolled failover: %v", fo)
		}
		if err := storagetest.SetNodeReady(ctx, kube, "n1", true); err != nil {
			t.Fatal(err)
		}
		e.clk.Step(10 * time.Second)
		waitFor(t, "healthy after n1", func() bool { return volume(e.read(t), "pvc-data").Robustness == "healthy" })
	})

	t.Run("after a node: the rebuild is waited for with progress", func(t *testing.T) {
		w := e.waiter(storage.Defaults())
		affected, err := w.Affected(ctx, "n2")
		if err != nil || len(affected) != 1 || affected[0] != "pvc-data" {
			t.Fatalf("affected %v, %v; want [pvc-data]", affected, err)
		}
		if err := storagetest.SetNodeReady(ctx, kube, "n2", false); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "degraded", func() bool { return volume(e.read(t), "pvc-data").Robustness == "degraded" })
		if err := storagetest.SetNodeReady(ctx, kube, "n2", true); err != nil {
			t.Fatal(err)
		}
		var progress []string
		w.Progress = func(l string) {
			progress = append(progress, l)
			if strings.Contains(l, "rebuilding") {
				e.clk.Add(20 * time.Second)
			}
		}
		if _, err := w.After(ctx, "n2", affected); err != nil {
			t.Fatalf("After: %v (progress %q)", err, progress)
		}
		if volume(e.read(t), "pvc-data").Robustness != "healthy" {
			t.Fatal("After returned before the volume was healthy")
		}
		joined := strings.Join(progress, "\n")
		if !strings.Contains(joined, "app/data: rebuilding ") || !strings.Contains(joined, "0 of 1 volumes healthy") {
			t.Fatalf("progress lacks the rebuild: %q", progress)
		}
	})

	t.Run("after a node: the limit passing is a LimitError (the roll pauses)", func(t *testing.T) {
		// The default 2 h limit, measured on the waiter's clock: each
		// reading moves it on 30 min, so the limit passes after a few
		// polls and the test never sleeps it out.
		w := e.waiter(storage.Defaults())
		w.Now = (&clock{t: time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC), step: 30 * time.Minute}).Now
		if err := storagetest.SetNodeReady(ctx, kube, "n3", false); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "degraded", func() bool { return volume(e.read(t), "pvc-data").Robustness == "degraded" })
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		_, err := w.After(wctx, "n3", []string{"pvc-data"})
		if !storage.IsLimit(err) || !strings.Contains(err.Error(), "app/data: degraded") || !strings.Contains(err.Error(), "within 2h0m0s") {
			t.Fatalf("After with n3 down = %v, want a LimitError after 2h naming app/data", err)
		}
		if err := storagetest.SetNodeReady(ctx, kube, "n3", true); err != nil {
			t.Fatal(err)
		}
		e.clk.Step(10 * time.Second)
		defer e.clk.Step(0)
		waitFor(t, "healthy after n3", func() bool { return volume(e.read(t), "pvc-data").Robustness == "healthy" })
	})

	t.Run("before a node with the last healthy replica: waited out, or refused per settings", func(t *testing.T) {
		// n1 and n3 go down and come back: their replicas rebuild from n2,
		// the last healthy one. (Taking nodes down without a switchover,
		// as this test does, fails the database over: time runs until it
		// settles, then stops so that the rebuild stays in progress.)
		e.clk.Step(time.Second)
		for _, n := range []string{"n1", "n3"} {
			if err := storagetest.SetNodeReady(ctx, kube, n, false); err != nil {
				t.Fatal(err)
			}
		}
		waitFor(t, "only n2 healthy", func() bool { return volume(e.read(t), "pvc-data").OnlyHealthyOn("n2") })
		waitFor(t, "the database settled", func() bool {
			p := postgres(e.read(t), "db/pg")
			return p.CurrentPrimary == p.TargetPrimary && p.PrimaryNode() == "n2"
		})
		e.clk.Step(0)
		for _, n := range []string{"n1", "n3"} {
			if err := storagetest.SetNodeReady(ctx, kube, n, true); err != nil {
				t.Fatal(err)
			}
		}
		waitFor(t, "rebuilding, every instance ready", func() bool {
			_, ok := volume(e.read(t), "pvc-data").Progress()
			return ok && postgres(e.read(t), "db/pg").Healthy()
		})
		target := postgres(e.read(t), "db/pg").TargetPrimary
		refuse := storage.Defaults()
		refuse.LastReplica = storage.LastReplicaRefuse
		_, err := e.waiter(refuse).Before(ctx, "n2")
		if re, ok := sdk.AsRefusal(err); !ok || re.Rule != "R3" || !strings.Contains(re.Reason, "last healthy replica on n2") {
			t.Fatalf("Before(n2) with last_replica refuse = %v, want R3 naming the last replica", err)
		}
		if p := postgres(e.read(t), "db/pg"); p.TargetPrimary != target {
			t.Fatalf("a refused Before(n2) changed the database: target primary %s", p.TargetPrimary)
		}
		e.clk.Step(time.Second)
		defer e.clk.Step(0)
		lines, err := e.waiter(storage.Defaults()).Before(ctx, "n2")
		if err != nil {
			t.Fatal(err)
		}
		if p := postgres(e.read(t), "db/pg"); p.PrimaryNode() == "n2" || !p.Healthy() {
			t.Fatalf("Before(n2) left the primary %s on %s (healthy %v)", p.CurrentPrimary, p.PrimaryNode(), p.Healthy())
		}
		if v := volume(e.read(t), "pvc-data"); v.OnlyHealthyOn("n2") {
			t.Fatalf("Before(n2) returned with the last healthy replica still on n2: %+v", v)
		}
		if !strings.Contains(strings.Join(lines, "\n"), "a healthy replica on another node before draining n2") {
			t.Fatalf("lines %q", lines)
		}
	})
}
