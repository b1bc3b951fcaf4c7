package healthgate

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/talosbot/talosbot/bot/render"
	"github.com/talosbot/talosbot/plugins/cluster/gate"
	lifecyclev1 "github.com/talosbot/talosbot/plugins/sdk/proto/lifecycle/v1"
	"github.com/talosbot/talosbot/plugins/sdk/sdktest"
	"github.com/talosbot/talosbot/sim"
	"github.com/talosbot/talosbot/state"
)

func request(c *sim.Cluster) *lifecyclev1.OperationRequest {
	pc := &lifecyclev1.Cluster{Name: "staging", Environment: "staging"}
	for _, n := range c.Nodes() {
		pc.Nodes = append(pc.Nodes, &lifecyclev1.Node{Name: n.Name, Address: n.IP, Role: n.Role})
	}
	return &lifecyclev1.OperationRequest{OperationId: "op-1", Command: Command, Cluster: pc,
		Credentials: &lifecyclev1.Credentials{Talosconfig: c.Talosconfig()},
		Settings:    &lifecyclev1.Settings{GateTimeoutMs: 5000, HealthTimeoutMs: 8000}}
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
	if len(plan.GetSteps()) != len(gate.Probes()) || len(plan.GetWarnings()) != 1 || len(plan.GetCanonicalInputs()) == 0 ||
		!strings.Contains(plan.GetWarnings()[0], "Kubernetes nodes, Pods, Flux, PodDisruptionBudgets, Storage) will be not checked") {
		t.Fatalf("plan = %v", plan)
	}

	rec, err := sdktest.Run(ctx, New(), req, nil)
	if err != nil {
		t.Fatal(err)
	}
	res := rec.FinalResult()
	if !res.GetOk() || !strings.Contains(res.GetSummary(), "not checked: Kubernetes nodes, Pods, Flux, PodDisruptionBudgets") {
		t.Fatalf("healthy sim: result %v", res)
	}
	final := map[string]*lifecyclev1.StepEvent{}
	for _, s := range rec.Steps() {
		final[s.GetStepId()] = s
	}
	for _, p := range gate.Probes() {
		want := lifecyclev1.StepStatus_STEP_STATUS_OK
		if p.Kubernetes {
			want = lifecyclev1.StepStatus_STEP_STATUS_SKIPPED // no kubeconfig: said, never silent
			if !strings.HasPrefix(final[p.Name].GetDetail(), "not checked: ") {
				t.Errorf("step %s detail %q, want \"not checked: …\"", p.Name, final[p.Name].GetDetail())
			}
		}
		if final[p.Name].GetStatus() != want {
			t.Errorf("step %s = %s, want %s", p.Name, final[p.Name].GetStatus(), want)
		}
	}
	lines := strings.Join(res.GetLines(), "\n")
	if !strings.Contains(lines, "❔ Kubernetes nodes: not checked: no Kubernetes API") || strings.Contains(lines, "✅ Flux") {
		t.Fatalf("lines must say the Kubernetes probes were not checked:\n%s", lines)
	}
	// A passed cluster-health probe counts Talos's checks; their lines
	// ("waiting for …: OK", eleven of them) are in the operation's log,
	// not in chat (issue 31).
	if strings.Contains(lines, "waiting for etcd to be healthy: OK") || !strings.Contains(lines, "✅ Cluster health: ") ||
		!strings.Contains(lines, " checks passed on ") {
		t.Fatalf("lines must count the passed checks, not list them:\n%s", lines)
	}
	var logged string
	for _, l := range rec.Logs() {
		logged += l.GetMessage() + "\n"
	}
	if !strings.Contains(logged, "waiting for etcd to be healthy: OK") {
		t.Fatalf("the check lines must be in the operation's log:\n%s", logged)
	}

	// What chat shows: the operation's message, rendered as the bot renders
	// it, never shows a probe that did not run as passed.
	text := rendered(plan, rec)
	for _, p := range gate.Probes() {
		if !p.Kubernetes {
			continue
		}
		var line string
		for _, l := range strings.Split(text, "\n") {
			if strings.Contains(l, " "+p.Title+" — ") && !strings.HasPrefix(l, "staging:") {
				line = l
			}
		}
		if !strings.Contains(line, "❔ not checked") || !strings.Contains(line, "not checked") || strings.Contains(line, "✅") {
			t.Errorf("rendered %s as %q, want ❔ not checked, never ✅ or ⏭️ skipped:\n%s", p.Title, line, text)
		}
	}

	if err := c.Inject(ctx, "worker-1", sim.Fault{Unreachable: true}); err != nil {
		t.Fatal(err)
	}
	rec, _ = sdktest.Run(ctx, New(), req, nil)
	res = rec.FinalResult()
	// A failing gate is re-run for settings.health_timeout_ms, then reported.
	if res.GetOk() || !strings.Contains(res.GetError(), "unreachable: worker-1") || !strings.Contains(res.GetSummary(), "unreachable: worker-1") {
		t.Fatalf("unreachable worker: result %v", res)
	}
}

// rendered is the operation's chat message as bot/render renders it from
// the plan's steps and the statuses the plugin reported (the engine stores
// a SKIPPED step as "skipped").
func rendered(plan *lifecyclev1.OperationPlan, rec *sdktest.Recorder) string {
	status := map[string]*lifecyclev1.StepEvent{}
	for _, s := range rec.Steps() {
		status[s.GetStepId()] = s
	}
	names := map[lifecyclev1.StepStatus]string{lifecyclev1.StepStatus_STEP_STATUS_OK: "ok", lifecyclev1.StepStatus_STEP_STATUS_FAILED: "failed",
		lifecyclev1.StepStatus_STEP_STATUS_SKIPPED: "skipped", lifecyclev1.StepStatus_STEP_STATUS_RUNNING: "running"}
	op := &state.Operation{ID: "op-1", Command: Command, Cluster: "staging", State: state.StateSucceeded}
	for _, s := range plan.GetSteps() {
		ev := status[s.GetId()]
		op.Steps = append(op.Steps, state.Step{ID: s.GetId(), Title: s.GetTitle(), Status: names[ev.GetStatus()], Detail: ev.GetDetail()})
	}
	res := rec.FinalResult()
	op.Result = res.GetSummary() + "\n" + strings.Join(res.GetLines(), "\n")
	return render.RenderOperation(op, nil, time.Now()).Text
}
