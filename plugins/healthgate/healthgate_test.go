package healthgate

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/talosbot/talosbot/plugins/cluster"
	lifecyclev1 "github.com/talosbot/talosbot/plugins/proto/lifecycle/v1"
	"github.com/talosbot/talosbot/plugins/sdk/sdktest"
	"github.com/talosbot/talosbot/sim"
)

func request(c *sim.Cluster) *lifecyclev1.OperationRequest {
	pc := &lifecyclev1.Cluster{Name: "staging", Environment: "staging"}
	for _, n := range c.Nodes() {
		pc.Nodes = append(pc.Nodes, &lifecyclev1.Node{Name: n.Name, Address: n.IP, Role: n.Role})
	}
	return &lifecyclev1.OperationRequest{OperationId: "op-1", Command: Command, Cluster: pc,
		Credentials: &lifecyclev1.Credentials{Talosconfig: c.Talosconfig()},
		Settings:    &lifecyclev1.Settings{GateTimeoutMs: 5000}}
}

func TestDescribeIsReadOnly(t *testing.T) {
	m, err := New().Describe(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	cmd := m.GetCommands()[0]
	if m.GetName() != Name || cmd.GetName() != "health" || cmd.GetEffect() != lifecyclev1.Effect_EFFECT_READ_ONLY ||
		cmd.GetArgs()[0].GetName() != "cluster" || cmd.GetArgs()[0].GetRequired() {
		t.Fatalf("manifest = %v", m)
	}
}

func TestHealthCommand(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := sim.Start(ctx, sim.Options{ControlPlanes: 3, Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req := request(c)

	plan, err := New().Plan(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.GetSteps()) != len(cluster.Probes()) || len(plan.GetWarnings()) != 1 || len(plan.GetCanonicalInputs()) == 0 {
		t.Fatalf("plan = %v", plan)
	}

	rec, err := sdktest.Run(ctx, New(), req, nil)
	if err != nil {
		t.Fatal(err)
	}
	res := rec.FinalResult()
	if !res.GetOk() || len(res.GetLines()) != len(cluster.Probes()) {
		t.Fatalf("healthy sim: result %v", res)
	}
	final := map[string]lifecyclev1.StepStatus{}
	for _, s := range rec.Steps() {
		final[s.GetStepId()] = s.GetStatus()
	}
	for _, p := range cluster.Probes() {
		want := lifecyclev1.StepStatus_STEP_STATUS_OK
		if p.Kubernetes {
			want = lifecyclev1.StepStatus_STEP_STATUS_SKIPPED // no kubeconfig: said, never silent
		}
		if final[p.Name] != want {
			t.Errorf("step %s = %s, want %s", p.Name, final[p.Name], want)
		}
	}
	if !strings.Contains(strings.Join(res.GetLines(), "\n"), "⚠️ Kubernetes nodes: skipped: no Kubernetes API") {
		t.Fatalf("lines must say the Kubernetes probes were skipped: %v", res.GetLines())
	}

	if err := c.Inject(ctx, "worker-1", sim.Fault{Unreachable: true}); err != nil {
		t.Fatal(err)
	}
	rec, _ = sdktest.Run(ctx, New(), req, nil)
	res = rec.FinalResult()
	if res.GetOk() || !strings.Contains(res.GetError(), "unreachable: worker-1") || !strings.Contains(res.GetSummary(), "unreachable: worker-1") {
		t.Fatalf("unreachable worker: result %v", res)
	}
}
