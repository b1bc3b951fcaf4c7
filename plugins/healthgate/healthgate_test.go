package healthgate

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/talosbot/talosbot/bot/render"
	"github.com/talosbot/talosbot/plugins/cluster/gate"
	"github.com/talosbot/talosbot/plugins/sdk"
	"github.com/talosbot/talosbot/plugins/sdk/sdktest"
	"github.com/talosbot/talosbot/sim"
	"github.com/talosbot/talosbot/state"
)

func request(c *sim.Cluster) *sdk.OperationRequest {
	pc := &sdk.Cluster{Name: "staging", Environment: "staging"}
	for _, n := range c.Nodes() {
		pc.Nodes = append(pc.Nodes, &sdk.Node{Name: n.Name, Address: n.IP, Role: n.Role})
	}
	return &sdk.OperationRequest{OperationID: "op-1", Command: Command, Cluster: *pc,
		Credentials: sdk.Credentials{Talosconfig: c.Talosconfig()},
		Settings:    sdk.Settings{GateTimeoutMs: 5000, HealthTimeoutMs: 8000}}
}

func TestDescribeIsReadOnly(t *testing.T) {
	m, err := New().Describe(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	cmd := m.Commands[0]
	if m.Name != Name || cmd.Name != "health" || cmd.Effect != sdk.EffectReadOnly ||
		cmd.Args[0].Name != "cluster" || cmd.Args[0].Required {
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
	if len(plan.Steps) != len(gate.Probes()) || len(plan.Warnings) != 1 || len(plan.CanonicalInputs) == 0 ||
		!strings.Contains(plan.Warnings[0], "Kubernetes nodes, Pods, Flux, PodDisruptionBudgets, Storage) will be not checked") {
		t.Fatalf("plan = %v", plan)
	}

	rec, err := sdktest.Run(ctx, New(), req, nil)
	if err != nil {
		t.Fatal(err)
	}
	res := rec.FinalResult()
	if !res.OK || !strings.Contains(res.Summary, "not checked: Kubernetes nodes, Pods, Flux, PodDisruptionBudgets") {
		t.Fatalf("healthy sim: result %v", res)
	}
	final := map[string]*sdk.StepEvent{}
	for _, s := range rec.Steps() {
		final[s.StepID] = s
	}
	for _, p := range gate.Probes() {
		want := sdk.StepOK
		if p.Kubernetes {
			want = sdk.StepSkipped // no kubeconfig: said, never silent
			if !strings.HasPrefix(final[p.Name].Detail, "not checked: ") {
				t.Errorf("step %s detail %q, want \"not checked: …\"", p.Name, final[p.Name].Detail)
			}
		}
		if final[p.Name].Status != want {
			t.Errorf("step %s = %s, want %s", p.Name, final[p.Name].Status, want)
		}
	}
	lines := strings.Join(res.Lines, "\n")
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
		logged += l.Message + "\n"
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
	if res.OK || !strings.Contains(res.Error, "unreachable: worker-1") || !strings.Contains(res.Summary, "unreachable: worker-1") {
		t.Fatalf("unreachable worker: result %v", res)
	}
}

// rendered is the operation's chat message as bot/render renders it from
// the plan's steps and the statuses the plugin reported (the engine stores
// a SKIPPED step as "skipped").
func rendered(plan *sdk.OperationPlan, rec *sdktest.Recorder) string {
	status := map[string]*sdk.StepEvent{}
	for _, s := range rec.Steps() {
		status[s.StepID] = s
	}
	names := map[sdk.StepStatus]string{sdk.StepOK: "ok", sdk.StepFailed: "failed", sdk.StepSkipped: "skipped", sdk.StepRunning: "running"}
	op := &state.Operation{ID: "op-1", Command: Command, Cluster: "staging", State: state.StateSucceeded}
	for _, s := range plan.Steps {
		ev := status[s.ID]
		op.Steps = append(op.Steps, state.Step{ID: s.ID, Title: s.Title, Status: names[ev.Status], Detail: ev.Detail})
	}
	res := rec.FinalResult()
	op.Result = res.Summary + "\n" + strings.Join(res.Lines, "\n")
	return render.RenderOperation(op, nil, time.Now()).Text
}
