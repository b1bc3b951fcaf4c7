package rollback

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/talosbot/talosbot/plugins/cluster"
	lifecyclev1 "github.com/talosbot/talosbot/plugins/proto/lifecycle/v1"
	"github.com/talosbot/talosbot/plugins/sdk/sdktest"
	"github.com/talosbot/talosbot/plugins/talosupgrade"
	"github.com/talosbot/talosbot/sim"
)

func startSim(t *testing.T, cps, workers int) *sim.Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := sim.Start(ctx, sim.Options{ControlPlanes: cps, Workers: workers, RebootDelay: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func request(t *testing.T, c *sim.Cluster, command string, args map[string]string) *lifecyclev1.OperationRequest {
	pc := &lifecyclev1.Cluster{Name: "staging", Environment: "staging", Declared: map[string]string{cluster.DeclaredSchematic: sim.DefaultSchematic}}
	for _, n := range c.Nodes() {
		pc.Nodes = append(pc.Nodes, &lifecyclev1.Node{Name: n.Name, Address: n.IP, Role: n.Role, Host: n.Host, Platform: n.Platform})
	}
	return &lifecyclev1.OperationRequest{OperationId: "op", Command: command, Args: args, Cluster: pc,
		Credentials: &lifecyclev1.Credentials{Talosconfig: c.Talosconfig()},
		Settings: &lifecyclev1.Settings{SnapshotDir: t.TempDir(), NodeTimeoutMs: 20_000, GateTimeoutMs: 8_000,
			KnownTalosReleases: []string{"v1.13.9"}}}
}

// TestRollbackAfterUpgrade: worker-1 is upgraded to v1.13.9, then rolled
// back; the rollback is tracked (new boot) and the version went back.
func TestRollbackAfterUpgrade(t *testing.T) {
	c := startSim(t, 1, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	up := request(t, c, talosupgrade.Command, map[string]string{"version": "v1.13.9", "nodes": "worker-1"})
	if rec, _ := sdktest.Run(ctx, talosupgrade.New(), up, nil); !rec.FinalResult().GetOk() {
		t.Fatalf("upgrade: %v", rec.FinalResult())
	}
	if c.NodeVersion("worker-1") != "v1.13.9" {
		t.Fatal("worker-1 not upgraded")
	}
	req := request(t, c, Command, map[string]string{"node": "worker-1"})
	plan, err := New().Plan(ctx, req)
	if err != nil || plan.GetRefusal() != nil {
		t.Fatalf("plan: %v %v", err, plan)
	}
	rec, _ := sdktest.Run(ctx, New(), req, nil)
	res := rec.FinalResult()
	if !res.GetOk() || !strings.Contains(res.GetSummary(), "worker-1 rolled back to v1.12.6") {
		t.Fatalf("rollback: %v", res)
	}
	if c.NodeVersion("worker-1") != "v1.12.6" || c.Calls("worker-1", "Rollback") != 1 || c.Calls("worker-2", "Rollback") != 0 {
		t.Fatalf("worker-1 %s, rollback calls %d", c.NodeVersion("worker-1"), c.Calls("worker-1", "Rollback"))
	}
	var ev *lifecyclev1.StepEvent
	for _, s := range rec.Steps() {
		if s.GetStepId() == "rollback" && s.GetStatus() == lifecyclev1.StepStatus_STEP_STATUS_OK {
			ev = s
		}
	}
	if ev == nil || ev.GetFromVersion() != "v1.13.9" || ev.GetToVersion() != "v1.12.6" || ev.GetNode() != "worker-1" {
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
	if err != nil || plan.GetRefusal().GetRule() != "R19" || !strings.Contains(plan.GetRefusal().GetReason(), "cp-2") {
		t.Fatalf("want an R19 refusal naming cp-2, got %v %v", plan, err)
	}
	rec, _ := sdktest.Run(ctx, New(), req, nil)
	if res := rec.FinalResult(); res.GetRefusal().GetRule() != "R19" {
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
	if err != nil || plan.GetRefusal().GetRule() != "R19" || !strings.Contains(plan.GetRefusal().GetReason(), "exactly one node") {
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
	if res.GetOk() || res.GetRefusal().GetRule() != "R1" || !strings.Contains(res.GetRefusal().GetReason(), "cp-1: kubelet unhealthy") {
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
	if err != nil || plan.GetRefusal().GetRule() != "R16" || !strings.Contains(plan.GetRefusal().GetReason(), "1 of 2 members would remain") {
		t.Fatalf("want an R16 refusal, got %v %v", plan, err)
	}
	if c.Calls("cp-1", "Rollback") != 0 {
		t.Fatal("cp-1 was rolled back")
	}
}
