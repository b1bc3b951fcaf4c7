package rollback

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
	"github.com/talosbot/talosbot/plugins/cluster"
	"github.com/talosbot/talosbot/plugins/cluster/storage"
	"github.com/talosbot/talosbot/plugins/cluster/talos"
	"github.com/talosbot/talosbot/plugins/sdk"
	"github.com/talosbot/talosbot/plugins/sdk/sdktest"
	"github.com/talosbot/talosbot/sim"
)

// offsetClock is the real clock moved forward by the test: a limit passes
// when the test says so, without sleeping it out.
type offsetClock struct {
	mu  sync.Mutex
	off time.Duration
}

func (c *offsetClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.off)
}

func (c *offsetClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.off += d
	c.mu.Unlock()
}

type storageCluster struct {
	c     *sim.Cluster
	kube  *testenv.Kube
	ctrl  *storagetest.Controller
	clock *offsetClock // the controller's
	nodes []string     // Kubernetes names of worker-1, worker-2, cp-1
}

// startStorage: worker-1 upgraded to v1.13.9 (so it can roll back), a
// Longhorn volume with a replica on each node and a CNPG cluster whose
// primary runs on worker-1, the controller playing both on its own clock
// with a rebuild of rebuild.
func startStorage(ctx context.Context, t *testing.T, rebuild time.Duration) *storageCluster {
	t.Helper()
	return startStorageWith(ctx, t, rebuild, 300*time.Millisecond)
}

// startStorageWith is startStorage with a switchover of switchover.
func startStorageWith(ctx context.Context, t *testing.T, rebuild, switchover time.Duration) *storageCluster {
	t.Helper()
	dir, err := storagetest.FixturesDir()
	if err != nil {
		t.Skip(err)
	}
	kube := testenv.StartKube(t)
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
	sc := &storageCluster{c: c, kube: kube, clock: &offsetClock{}}
	for _, n := range []string{"worker-1", "worker-2", "cp-1"} {
		for _, info := range c.Nodes() {
			if info.Name == n {
				sc.nodes = append(sc.nodes, info.NodeName)
			}
		}
	}
	if err := storagetest.CreateVolume(ctx, kube.Client, kube.Dynamic, storagetest.Volume{Name: "pvc-data", Nodes: sc.nodes, PVC: "data", PVCNamespace: "app"}); err != nil {
		t.Fatal(err)
	}
	if err := storagetest.CreatePostgres(ctx, kube.Client, kube.Dynamic, storagetest.Postgres{Namespace: "db", Name: "pg", Nodes: sc.nodes}); err != nil {
		t.Fatal(err)
	}
	sc.ctrl = &storagetest.Controller{Dyn: kube.Dynamic, Kube: kube.Client, Now: sc.clock.Now, RebuildTime: rebuild, SwitchoverTime: switchover}
	rctx, stop := context.WithCancel(ctx)
	t.Cleanup(stop)
	go sc.ctrl.Run(rctx, 50*time.Millisecond)
	return sc
}

func (sc *storageCluster) request(t *testing.T, config string) *sdk.OperationRequest {
	req := request(t, sc.c, Command, map[string]string{"node": "worker-1"})
	req.Credentials.Kubeconfig = sc.kube.Kubeconfig
	req.Config = []byte(config)
	return req
}

// The rollback reads its storage settings from its own section
// (plugins.rollback.storage): switchover refuse turns the primary on the
// node into an R3 refusal; cnpg false leaves CloudNativePG unread.
func TestRollbackReadsItsStorageSection(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	sc := startStorage(ctx, t, time.Second)
	plan, err := New().Plan(ctx, sc.request(t, `{"storage": {"switchover": "refuse"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if r := plan.Refusal; r == nil || r.Rule != storage.Rule || !strings.Contains(r.Reason, "CloudNativePG db/pg has its primary pg-1 on "+sc.nodes[0]) ||
		!strings.Contains(r.Fix, "kubectl cnpg promote pg pg-2 -n db") {
		t.Fatalf("switchover: refuse did not refuse the primary's node: %+v", plan.Refusal)
	}
	plan, err = New().Plan(ctx, sc.request(t, `{"storage": {"cnpg": false}}`))
	if err != nil || plan.Refusal != nil {
		t.Fatalf("plan: %v %v", err, plan.Refusal)
	}
	if w := strings.Join(plan.Warnings, "\n"); strings.Contains(w, "CloudNativePG") || !strings.Contains(w, "Longhorn volume app/data") {
		t.Fatalf("cnpg: false still forecasts the database, or Longhorn went missing:\n%s", w)
	}
	if _, err := New().Plan(ctx, sc.request(t, `{"storage": {"last_replica": "maybe"}}`)); err == nil || !strings.Contains(err.Error(), "storage.last_replica") {
		t.Fatalf("a bad section planned: %v", err)
	}
}

// When the volumes are not healthy again within rebuild_wait after the
// rollback, the run pauses (it does not fail); Resume waits again and runs
// the closing gate without rolling the node back a second time.
func TestRollbackPausesWhenTheRebuildOutlastsItsLimit(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sc := startStorage(ctx, t, time.Hour) // rebuilds take an hour of the controller's clock
	runClock := &offsetClock{}
	p := &Plugin{active: map[string]string{}, now: runClock.Now}
	req := sc.request(t, `{"storage": {"rebuild_wait": "2h"}}`)
	req.OperationID = "op-rb-pause"
	plan1, err := p.Plan(ctx, req)
	if err != nil || plan1.Refusal != nil {
		t.Fatalf("plan: %v %v", err, plan1.Refusal)
	}

	rec := sdktest.NewRecorder(nil)
	ran := make(chan error, 1)
	go func() { ran <- p.Run(ctx, req, rec) }()
	// Once the run waits for the rebuild, two hours pass on its clock.
	if err := wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(context.Context) (bool, error) {
		for _, l := range rec.Logs() {
			if strings.Contains(l.Message, "app/data: rebuilding") {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatalf("the run never waited for the rebuild: %v\n%v", err, rec.Logs())
	}
	runClock.Advance(2*time.Hour + time.Minute)
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	_ = rec.Finish(nil)
	res := rec.FinalResult()
	lines := strings.Join(res.Lines, "\n")
	if res.OK || res.Summary != sdk.PausedSummary || !strings.Contains(lines, "Longhorn not healthy again within 2h0m0s") ||
		!strings.Contains(lines, "Resume waits for Longhorn again") || !strings.Contains(lines, "rolled back v1.13.9 → v1.12.6") {
		t.Fatalf("want a pause after the rollback, got %s: %s\n%s", res.Summary, res.Error, lines)
	}
	n, err := sc.kube.Client.CoreV1().Nodes().Get(ctx, sc.nodes[0], metav1.GetOptions{})
	if err != nil || n.Annotations[rolledBackAnnotation] != "op-rb-pause v1.13.9 v1.12.6" {
		t.Fatalf("the rolled-back mark: %v %v", err, n.Annotations)
	}
	boot := bootOf(ctx, t, sc.c, "worker-1")

	// Resume (attempt 2, planned again): the same inputs, no second rollback.
	sc.clock.Advance(2 * time.Hour) // Longhorn has rebuilt meanwhile
	req.Attempt = 2
	plan2, err := p.Plan(ctx, req)
	if err != nil || plan2.Refusal != nil {
		t.Fatalf("resume plan: %v %v", err, plan2.Refusal)
	}
	if string(plan2.CanonicalInputs) != string(plan1.CanonicalInputs) || !strings.Contains(plan2.Summary, "already rolled back v1.13.9 → v1.12.6") {
		t.Fatalf("the resume's plan differs: %q vs %q (%s)", plan2.CanonicalInputs, plan1.CanonicalInputs, plan2.Summary)
	}
	rec2, _ := sdktest.Run(ctx, p, req, nil)
	res2 := rec2.FinalResult()
	if !res2.OK || !strings.Contains(strings.Join(res2.Lines, "\n"), "1 Longhorn volume(s) healthy again") {
		t.Fatalf("resumed rollback: %s: %s %v", res2.Summary, res2.Error, res2.Lines)
	}
	for _, s := range rec2.Steps() {
		if s.StepID == "rollback" && s.Status != sdk.StepSkipped {
			t.Fatalf("the resume touched the rollback step: %+v", s)
		}
	}
	if got := bootOf(ctx, t, sc.c, "worker-1"); got != boot {
		t.Fatalf("the resume rebooted worker-1 (boot id %s → %s)", boot, got)
	}
	if n, _ := sc.kube.Client.CoreV1().Nodes().Get(ctx, sc.nodes[0], metav1.GetOptions{}); n.Annotations[rolledBackAnnotation] != "" {
		t.Fatalf("the finished run left its mark: %v", n.Annotations)
	}
	if f, fo := sc.ctrl.Faulted(), sc.ctrl.FailedOver(); len(f)+len(fo) != 0 {
		t.Fatalf("faulted %v, failed over %v", f, fo)
	}
}

// bootOf reads a node's boot id through its Talos API.
func bootOf(ctx context.Context, t *testing.T, c *sim.Cluster, name string) string {
	t.Helper()
	inv, err := cluster.InventoryFrom(&request(t, c, Command, nil).Cluster)
	if err != nil {
		t.Fatal(err)
	}
	s, err := cluster.Open(ctx, inv, &sdk.Credentials{Talosconfig: c.Talosconfig()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close() //nolint:errcheck
	n, _ := inv.Node(name)
	boot, err := talos.BootID(ctx, s, n)
	if err != nil {
		t.Fatal(err)
	}
	return boot
}

// A switchover that does not finish within switchover_wait pauses the run
// before the rollback: the node is not rebooted, no rolled-back mark is
// written, and the resume plans the whole rollback again.
func TestRollbackPausesBeforeTheRebootWhenTheSwitchoverOutlastsItsLimit(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The switchover takes an hour of the controller's clock, which
	// stands still: the run's wait for it runs out on the run's clock.
	sc := startStorageWith(ctx, t, time.Second, time.Hour)
	runClock := &offsetClock{}
	p := &Plugin{active: map[string]string{}, now: runClock.Now}
	req := sc.request(t, `{"storage": {"switchover_wait": "10m"}}`)
	req.OperationID = "op-rb-before"
	plan, err := p.Plan(ctx, req)
	if err != nil || plan.Refusal != nil {
		t.Fatalf("plan: %v %v", err, plan.Refusal)
	}
	boot := bootOf(ctx, t, sc.c, "worker-1")

	rec := sdktest.NewRecorder(nil)
	ran := make(chan error, 1)
	go func() { ran <- p.Run(ctx, req, rec) }()
	if err := wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(context.Context) (bool, error) {
		select {
		case err := <-ran:
			_ = rec.Finish(nil)
			res := rec.FinalResult()
			t.Fatalf("the run ended before the switchover: %v %s: %s %v", err, res.Summary, res.Error, res.Lines)
		default:
		}
		for _, l := range rec.Logs() {
			if strings.Contains(l.Message, "db/pg: switching the primary over") {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		var msgs []string
		for _, l := range rec.Logs() {
			msgs = append(msgs, l.Message)
		}
		t.Fatalf("the run never started the switchover: %v\n%s", err, strings.Join(msgs, "\n"))
	}
	runClock.Advance(10*time.Minute + time.Minute)
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	_ = rec.Finish(nil)
	res := rec.FinalResult()
	lines := strings.Join(res.Lines, "\n")
	if res.OK || res.Summary != sdk.PausedSummary || !strings.Contains(lines, "CloudNativePG db/pg: switchover to pg-2 not done within 10m0s") ||
		!strings.Contains(lines, "paused before worker-1") || strings.Contains(lines, "rolled back") {
		t.Fatalf("want a pause before the rollback, got %s: %s\n%s", res.Summary, res.Error, lines)
	}
	if got := bootOf(ctx, t, sc.c, "worker-1"); got != boot {
		t.Fatalf("the paused run rebooted worker-1 (boot id %s → %s)", boot, got)
	}
	if n, err := sc.kube.Client.CoreV1().Nodes().Get(ctx, sc.nodes[0], metav1.GetOptions{}); err != nil || n.Annotations[rolledBackAnnotation] != "" {
		t.Fatalf("a run paused before the rollback left a mark: %v %v", err, n.Annotations)
	}
	// The resume plans the rollback itself again, not "already rolled back".
	req.Attempt = 2
	plan2, err := p.Plan(ctx, req)
	if err != nil || plan2.Refusal != nil || strings.Contains(plan2.Summary, "already rolled back") || string(plan2.CanonicalInputs) != string(plan.CanonicalInputs) {
		t.Fatalf("resume plan: %v %v %q", err, plan2.Refusal, plan2.Summary)
	}
}

// A run stopped (its context cancelled: the bot shutting down) while it
// waits for Longhorn after the rollback keeps the rolled-back mark: the
// operation is interrupted, and its resume must not roll the node back a
// second time (that would boot the newer entry again).
func TestRollbackStoppedAfterTheRebootKeepsItsMark(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sc := startStorage(ctx, t, time.Hour) // the rebuild outlasts the test
	p := &Plugin{active: map[string]string{}}
	req := sc.request(t, `{"storage": {"rebuild_wait": "2h"}}`)
	req.OperationID = "op-rb-stop"
	if plan, err := p.Plan(ctx, req); err != nil || plan.Refusal != nil {
		t.Fatalf("plan: %v %v", err, plan.Refusal)
	}
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	rec := sdktest.NewRecorder(nil)
	ran := make(chan error, 1)
	go func() { ran <- p.Run(rctx, req, rec) }()
	if err := wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(context.Context) (bool, error) {
		for _, l := range rec.Logs() {
			if strings.Contains(l.Message, "app/data: rebuilding") {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatalf("the run never waited for the rebuild: %v", err)
	}
	stop()
	<-ran
	n, err := sc.kube.Client.CoreV1().Nodes().Get(ctx, sc.nodes[0], metav1.GetOptions{})
	if err != nil || n.Annotations[rolledBackAnnotation] != "op-rb-stop v1.13.9 v1.12.6" {
		t.Fatalf("the stopped run cleared its mark: %v %v", err, n.Annotations)
	}
	req.Attempt = 2
	var plan *sdk.OperationPlan
	_ = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(context.Context) (bool, error) {
		plan, err = p.Plan(ctx, req)
		return err == nil && plan.Refusal == nil, nil // worker-1's Talos API may still be coming up
	})
	if err != nil || plan.Refusal != nil || !strings.Contains(plan.Summary, "already rolled back") {
		t.Fatalf("the resume would roll worker-1 back again: %v %+v", err, plan)
	}
}
