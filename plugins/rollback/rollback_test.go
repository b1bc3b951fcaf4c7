package rollback

import (
	"context"
	"k8s.io/apimachinery/pkg/util/wait"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/talosbot/talosbot/bot/render"
	"github.com/talosbot/talosbot/plugins/cluster"
	"github.com/talosbot/talosbot/plugins/cluster/gate"
	"github.com/talosbot/talosbot/plugins/cluster/identity"
	"github.com/talosbot/talosbot/plugins/cluster/talos"
	"github.com/talosbot/talosbot/plugins/sdk"
	"github.com/talosbot/talosbot/plugins/sdk/sdktest"
	"github.com/talosbot/talosbot/sim"
	"github.com/talosbot/talosbot/state"
)

func startSim(t *testing.T, cps, workers int) *sim.Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Inventory, host, Node and etcd member names all differ (as on real clusters).
	c, err := sim.Start(ctx, sim.Options{ControlPlanes: cps, Workers: workers, RebootDelay: 300 * time.Millisecond, Naming: sim.DistinctNames})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// upgradeNode upgrades one node with the shared upgrade calls
// (plugins/cluster/talos; the talosupgrade plugin uses the same) and waits
// until it is back: the state a rollback starts from.
func upgradeNode(ctx context.Context, t *testing.T, c *sim.Cluster, name, from, to string) {
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
	fr, err := talos.ParseRelease(from)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := talos.ParseRelease(to)
	if err != nil {
		t.Fatal(err)
	}
	ns, err := talos.ReadNodeState(ctx, s, n)
	if err != nil {
		t.Fatal(err)
	}
	img, err := talos.TargetInstaller(ns, map[string]string{talos.DeclaredSchematic: sim.DefaultSchematic}, tr)
	if err != nil {
		t.Fatal(err)
	}
	st, err := talos.StartUpgrade(ctx, s, talos.NodeUpgrade{Node: n, From: fr, To: tr, Image: img.Ref()}, talos.UpgradeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := talos.TrackReboot(ctx, s, n, talos.TrackOptions{Timeout: time.Minute, OldBootID: boot, Actor: st.Actor}); err != nil {
		t.Fatalf("upgrade of %s: %v", name, err)
	}
	// TrackReboot sees the node back at its own address; the endpoint's apid
	// answers for it once its redial backoff has passed.
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := talos.TalosTag(ctx, s, n)
		return err == nil, nil
	}); err != nil {
		t.Fatalf("%s does not answer through the endpoints after its upgrade: %v", name, err)
	}
}

func request(t *testing.T, c *sim.Cluster, command string, args map[string]string) *sdk.OperationRequest {
	pc := &sdk.Cluster{Name: "staging", Environment: "staging", Declared: map[string]string{talos.DeclaredSchematic: sim.DefaultSchematic}}
	for _, n := range c.Nodes() {
		pc.Nodes = append(pc.Nodes, &sdk.Node{Name: n.Name, Address: n.IP, Role: n.Role, Host: n.Host, Platform: n.Platform})
	}
	return &sdk.OperationRequest{OperationID: "op", Command: command, Args: args, Cluster: *pc,
		Credentials: sdk.Credentials{Talosconfig: c.Talosconfig()},
		Evidence:    sdk.Evidence{Backups: &sdk.Backups{Dir: t.TempDir()}, Releases: sdktest.Releases("v1.13.9")},
		Settings:    sdk.Settings{NodeTimeoutMs: 20_000, GateTimeoutMs: 8_000}}
}

// TestRollbackAfterUpgrade: worker-1 is upgraded to v1.13.9, then rolled
// back; the rollback is tracked (new boot) and the version went back.
func TestRollbackAfterUpgrade(t *testing.T) {
	c := startSim(t, 1, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	upgradeNode(ctx, t, c, "worker-1", "v1.12.6", "v1.13.9")
	if c.NodeVersion("worker-1") != "v1.13.9" {
		t.Fatal("worker-1 not upgraded")
	}
	req := request(t, c, Command, map[string]string{"node": "worker-1"})
	plan, err := New().Plan(ctx, req)
	if err != nil || plan.Refusal != nil {
		t.Fatalf("plan: %v %v", err, plan)
	}
	// No kubeconfig: the approval card says the gate's Kubernetes probes
	// will not be checked.
	raw, err := protojson.Marshal(sdk.PlanToWire(plan))
	if err != nil {
		t.Fatal(err)
	}
	// The card says it in one line (a long risk is cut at a word); its
	// Details reply has the whole sentence.
	op := &state.Operation{ID: "op", Command: Command, Cluster: "staging", State: state.StateAwaitingApproval, Plan: raw}
	card := render.RenderOperation(op, nil, time.Now()).Text
	if !strings.Contains(card, "⚠️ warning: health gate: no kubeconfig for this cluster") {
		t.Fatalf("approval card must warn that there is no kubeconfig:\n%s", card)
	}
	if d := render.Details(op); !strings.Contains(d, "health gate: no kubeconfig for this cluster, so its Kubernetes probes (Kubernetes nodes, Pods, Flux, PodDisruptionBudgets, Storage) are not checked") {
		t.Fatalf("the card's Details must say which Kubernetes probes are not checked:\n%s", d)
	}
	rec, _ := sdktest.Run(ctx, New(), req, nil)
	res := rec.FinalResult()
	if !res.OK || !strings.Contains(res.Summary, "worker-1 rolled back to v1.12.6") {
		t.Fatalf("rollback: %v", res)
	}
	if c.NodeVersion("worker-1") != "v1.12.6" || c.Calls("worker-1", "Rollback") != 1 || c.Calls("worker-2", "Rollback") != 0 {
		t.Fatalf("worker-1 %s, rollback calls %d", c.NodeVersion("worker-1"), c.Calls("worker-1", "Rollback"))
	}
	var ev *sdk.StepEvent
	for _, s := range rec.Steps() {
		if s.StepID == "rollback" && s.Status == sdk.StepOK {
			ev = s
		}
	}
	if ev == nil || ev.FromVersion != "v1.13.9" || ev.ToVersion != "v1.12.6" || ev.Node != "worker-1" {
		t.Fatalf("rollback step event %v", ev)
	}
}

// TestRollbackRefusesWhileAnotherControlPlaneIsDown is R19: cp-2 is not a
// healthy member (it could be mid-rollback), so cp-1 is not rolled back.
func TestRollbackRefusesWhileAnotherControlPlaneIsDown(t *testing.T) {
	c := startSim(t, 3, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := c.Inject(ctx, "cp-2", sim.Fault{Unreachable: true}); err != nil {
		t.Fatal(err)
	}
	req := request(t, c, Command, map[string]string{"node": "cp-1"})
	plan, err := New().Plan(ctx, req)
	if err != nil || plan.Refusal.Rule != "R19" || !strings.Contains(plan.Refusal.Reason, "cp-2") {
		t.Fatalf("want an R19 refusal naming cp-2, got %v %v", plan, err)
	}
	rec, _ := sdktest.Run(ctx, New(), req, nil)
	if res := rec.FinalResult(); res.Refusal.Rule != "R19" {
		t.Fatalf("Run: %v", res)
	}
	if c.Calls("cp-1", "Rollback") != 0 {
		t.Fatal("cp-1 was rolled back")
	}
}

func TestRollbackTakesOneNode(t *testing.T) {
	c := startSim(t, 1, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	plan, err := New().Plan(ctx, request(t, c, Command, map[string]string{"node": "cp-1,worker-1"}))
	if err != nil || plan.Refusal.Rule != "R19" || !strings.Contains(plan.Refusal.Reason, "exactly one node") {
		t.Fatalf("want an R19 refusal, got %v %v", plan, err)
	}
}

// TestOneControlPlaneRollbackPerProcess: the plugin process refuses a second
// control-plane rollback of the same cluster while one runs.
func TestOneControlPlaneRollbackPerProcess(t *testing.T) {
	p := New().(*Plugin)
	release, err := p.claim("staging", "cp-1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.claim("staging", "cp-2"); err == nil || !strings.Contains(err.Error(), "cp-1") {
		t.Fatalf("second claim: %v", err)
	}
	if r2, err := p.claim("production", "cp-2"); err != nil {
		t.Fatalf("another cluster: %v", err)
	} else {
		r2()
	}
	release()
	if r3, err := p.claim("staging", "cp-2"); err != nil {
		t.Fatalf("after release: %v", err)
	} else {
		r3()
	}
}

// TestFailingBeforeGateRefusesRollback is R1 in the rollback: cp-1's kubelet
// is unhealthy, which is not the node being rolled back, so worker-1 is not
// touched.
func TestFailingBeforeGateRefusesRollback(t *testing.T) {
	c := startSim(t, 1, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := c.Inject(ctx, "cp-1", sim.Fault{UnhealthyService: "kubelet"}); err != nil {
		t.Fatal(err)
	}
	req := request(t, c, Command, map[string]string{"node": "worker-1"})
	rec, _ := sdktest.Run(ctx, New(), req, nil)
	res := rec.FinalResult()
	if res.OK || res.Refusal.Rule != "R1" || !strings.Contains(res.Refusal.Reason, "cp-1: kubelet unhealthy") {
		t.Fatalf("want an R1 refusal naming cp-1's kubelet, got %v", res)
	}
	if c.Calls("worker-1", "Rollback") != 0 {
		t.Fatal("worker-1 was rolled back after a failed gate")
	}
}

// TestRollbackRefusesTwoMemberEtcd is R16 in the rollback: both members of
// a two-member etcd are healthy, but rebooting one leaves no majority.
func TestRollbackRefusesTwoMemberEtcd(t *testing.T) {
	c := startSim(t, 2, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	req := request(t, c, Command, map[string]string{"node": "cp-1"})
	plan, err := New().Plan(ctx, req)
	if err != nil || plan.Refusal.Rule != "R16" || !strings.Contains(plan.Refusal.Reason, "1 of 2 members would remain") {
		t.Fatalf("want an R16 refusal, got %v %v", plan, err)
	}
	if c.Calls("cp-1", "Rollback") != 0 {
		t.Fatal("cp-1 was rolled back")
	}
}

// The gate before a rollback tolerates a failure that names only the node
// rolled back, by whole name: rolling back worker-1 must not excuse a probe
// that fails on worker-10, or on worker-12 that the inventory lacks.
func TestGateToleranceMatchesWholeNodeNames(t *testing.T) {
	var nodes []cluster.Node
	for _, n := range []string{"worker-1", "worker-10", "cp-1"} {
		nodes = append(nodes, cluster.Node{Name: n, Address: "10.0.0." + n[len(n)-1:], Role: "worker"})
	}
	ids := identity.Unresolved(cluster.Inventory{Name: "staging", Nodes: nodes})
	verdict := func(detail string) *gate.Result {
		return &gate.Result{Probes: []gate.ProbeResult{{Name: "nodes-ready", Title: "nodes ready", Status: gate.StatusFail, Detail: detail}}}
	}
	for detail, excused := range map[string]bool{
		"worker-1 not Ready":                  true,
		"node worker-1.":                      true,
		"worker-10 not Ready":                 false,
		"worker-1 and worker-10 not Ready":    false,
		"pod web-1 on worker-1a is not Ready": false,
		"cp-1 not Ready":                      false,
		// A Kubernetes Node the inventory does not know.
		"node worker-12 not Ready": false,
	} {
		got := othersFailing(verdict(detail), ids, "worker-1")
		if excused != (len(got) == 0) {
			t.Errorf("gate failure %q while rolling back worker-1: others failing = %v, want excused=%t", detail, got, excused)
		}
	}
}
