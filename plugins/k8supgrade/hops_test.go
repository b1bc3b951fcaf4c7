package k8supgrade

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/talosbot/talosbot/internal/releases"
	"github.com/talosbot/talosbot/internal/testenv"
	"github.com/talosbot/talosbot/plugins/sdk"
	"github.com/talosbot/talosbot/plugins/sdk/sdktest"
	"github.com/talosbot/talosbot/sim"
)

// hopFrom is where the multi-hop tests start: two minors below the testenv kube-apiserver,
// so the path is hopFrom → v1.35.2 → v1.36.3 (the sim's static pods and kubelets follow
// the images the plugin sets; the apiserver that answers discovery stays v1.36.3).
const hopFrom = "v1.34.1"

// kubeReleases is releases.kubernetes as the bot hands it over (Evidence.Releases).
var kubeReleases = "1.34.5,1.35.1,1.35.2,1.36.3"

func startEnvAt(t *testing.T, kube *testenv.Kube, talos, kubernetes string) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := sim.Start(ctx, sim.Options{ControlPlanes: 3, Workers: 1, TalosVersion: talos, KubernetesVersion: kubernetes,
		Kube: kube.Client, Kubeconfig: kube.Kubeconfig, StaticPods: true, StaticPodReadyDelay: 100 * time.Millisecond})
	if err != nil {
		t.Fatalf("start sim: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return &env{c: c, kube: kube, dir: t.TempDir()}
}

// withReleases adds the bot's release data to a request.
func withReleases(req *sdk.OperationRequest, kube string) *sdk.OperationRequest {
	l := &releases.List{Versions: releases.ParseAll([]string{"v1.12.6", "v1.13.9"})}
	req.Evidence.Releases = releases.NotesOf(l, strings.Split(kube, ","), time.Now())
	return req
}

// onStep calls do once a step reports status.
type onStep struct {
	*sdktest.Recorder
	step   string
	status sdk.StepStatus
	do     func()
	done   bool
}

func (o *onStep) Step(ev *sdk.StepEvent) error {
	err := o.Recorder.Step(ev)
	if !o.done && ev.StepID == o.step && ev.Status == o.status {
		o.done = true
		o.do()
	}
	return err
}

func stepIDs(steps []*sdk.Step) map[string]*sdk.Step {
	out := map[string]*sdk.Step{}
	for _, s := range steps {
		out[s.ID] = s
	}
	return out
}

func preconditionText(p *sdk.OperationPlan) string {
	var out []string
	for _, c := range p.Preconditions {
		out = append(out, c.Name+": "+c.Detail)
	}
	return strings.Join(out, "\n")
}

func everyComponentAt(t *testing.T, e *env, version string) {
	t.Helper()
	for _, n := range []string{"cp-1", "cp-2", "cp-3"} {
		staticPodsAt(t, e, n, version)
	}
	for _, n := range e.c.Nodes() {
		kubeletAt(t, e, n.Name, version)
	}
}

// TestKubernetesMultiHop plans and runs v1.34.1 → v1.35.2 → v1.36.3 on the sim and a real
// kube-apiserver: the whole path in one plan, with each hop's Talos support and pre-flight
// checks; the refusals; one run where every component passes each hop; a failure at a hop
// boundary (the health gate between hops), a kill inside the next hop, and the resume that
// continues at that hop.
func TestKubernetesMultiHop(t *testing.T) {
	t.Parallel()
	kube := testenv.StartKube(t)

	t.Run("the plan shows the whole path, each hop with its checks, under one digest", func(t *testing.T) {
		e := startEnvAt(t, kube, supportsTarget, hopFrom)
		ctx := ctxFor(t, 2*time.Minute)
		req := withReleases(e.request(target), kubeReleases)
		plan, err := New().Plan(ctx, req)
		if err != nil || plan.Refusal != nil {
			t.Fatalf("plan %v, %v", plan, err)
		}
		// R6 compares this target with staging's: the stops, the newest 1.35 patch first.
		if plan.Target != "v1.35.2 → v1.36.3" || !strings.Contains(plan.Summary, "v1.34.1 → v1.35.2 → v1.36.3") {
			t.Fatalf("target %q summary %q", plan.Target, plan.Summary)
		}
		ids := stepIDs(plan.Steps)
		for _, id := range []string{"v1.35.2/kube-apiserver/cp-1", "v1.35.2/kubelet/worker-1", "v1.35.2/gate-after/kube-nodes", "kube-apiserver/cp-1", "kubelet/worker-1", stepDriftNote} {
			if ids[id] == nil {
				t.Errorf("no step %s in the plan", id)
			}
		}
		if s := ids["v1.35.2/kubelet/worker-1"]; s != nil && !strings.Contains(s.Title, "hop 1/2 → v1.35.2: kubelet on worker-1 v1.34.1 → v1.35.2") {
			t.Errorf("hop 1 title %q", s.Title)
		}
		if s := ids["kubelet/worker-1"]; s != nil && !strings.Contains(s.Title, "hop 2/2 → v1.36.3: kubelet on worker-1 v1.35.2 → v1.36.3") {
			t.Errorf("hop 2 title %q", s.Title)
		}
		pre := preconditionText(plan)
		for _, want := range []string{"hop 1/2 → v1.35.2: pre-flight checks (talosctl upgrade-k8s): v1.34.1 → v1.35.2",
			"hop 2/2 → v1.36.3: pre-flight checks (talosctl upgrade-k8s): v1.35.2 → v1.36.3",
			"hop 2/2 → v1.36.3: Talos supports v1.36.3 on worker-1: Talos " + supportsTarget} {
			if !strings.Contains(pre, want) {
				t.Errorf("preconditions lack %q:\n%s", want, pre)
			}
		}
		again, _ := New().Plan(ctx, req)
		if string(again.CanonicalInputs) != string(plan.CanonicalInputs) {
			t.Fatal("re-planning an unchanged cluster changed the digest")
		}
		other, _ := New().Plan(ctx, withReleases(e.request(target), "1.35.1,1.36.3"))
		if other.Target != "v1.35.1 → v1.36.3" || string(other.CanonicalInputs) == string(plan.CanonicalInputs) {
			t.Fatalf("another path (%q) must have another digest", other.Target)
		}
	})

	t.Run("refuses a path whose hop the running Talos does not support", func(t *testing.T) {
		e := startEnvAt(t, kube, "v1.12.6", hopFrom)
		refused(t, e, withReleases(e.request(target), kubeReleases), "R20", "hop 2 (1.35.2 → 1.36.3)", "Talos v1.12.6 supports Kubernetes 1.30–1.35",
			"upgrade Talos first", "/talos upgrade talos v1.13.9")
	})

	t.Run("refuses a path through a minor with no known release", func(t *testing.T) {
		e := startEnvAt(t, kube, supportsTarget, hopFrom)
		refused(t, e, withReleases(e.request(target), "1.34.5,1.36.3"), "R20", "no 1.35 release is configured", "releases.kubernetes")
	})

	t.Run("every hop, a stop at the hop boundary, and the resume at the right hop", func(t *testing.T) {
		e := startEnvAt(t, kube, supportsTarget, hopFrom)
		ctx := ctxFor(t, 8*time.Minute)
		req := withReleases(e.request(target), kubeReleases)
		req.Settings.GateAfterTimeoutMs = 5000 // the failed gate between the hops gives up soon
		before := e.applies()

		// Run 1: cp-2's kubelet turns unhealthy once hop 1's last kubelet is done, so the
		// health gate between the hops fails: hop 2 never starts.
		rec := &onStep{Recorder: sdktest.NewRecorder(nil), step: "v1.35.2/kubelet/worker-1", status: sdk.StepOK, do: func() {
			if err := e.c.Inject(ctx, "cp-2", sim.Fault{UnhealthyService: "kubelet"}); err != nil {
				t.Error(err)
			}
		}}
		_ = New().Run(ctx, req, rec)
		_ = rec.Finish(nil)
		res := rec.FinalResult()
		lines := strings.Join(res.Lines, "\n")
		if res.OK || !strings.Contains(res.Summary, "hop 1/2 → v1.35.2: the health gate after the upgrade") ||
			!strings.Contains(lines, "stopped in hop 1/2 (→ v1.35.2)") || !strings.Contains(lines, "v1.34.1 → v1.35.2 → v1.36.3") {
			t.Fatalf("run 1: %v\n%s", res, lines)
		}
		everyComponentAt(t, e, "v1.35.2")
		hop1 := delta(e.applies(), before)
		for _, s := range rec.Steps() {
			if !strings.HasPrefix(s.StepID, "v1.35.2/") && s.StepID != "" {
				t.Fatalf("run 1 reported %s of hop 2", s.StepID)
			}
		}
		if hop1["worker-1"] != 1 || hop1["cp-1"] < 4 {
			t.Fatalf("hop 1 applies %v: want every static pod and kubelet once", hop1)
		}
		if err := e.c.ClearAll(ctx); err != nil {
			t.Fatal(err)
		}

		// The resumed operation plans the hop that is left, with the last hop's step ids.
		plan, err := New().Plan(ctx, req)
		if err != nil || plan.Refusal != nil || plan.Target != target || stepIDs(plan.Steps)["kubelet/worker-1"] == nil {
			t.Fatalf("plan after hop 1: %v %v", plan, err)
		}

		// Run 2: killed inside hop 2, right after kube-apiserver on cp-1.
		mid := e.applies()
		runCtx, cancel := context.WithCancel(ctx)
		killed := &cancelAfter{Recorder: sdktest.NewRecorder(nil), step: "kube-apiserver/cp-1", cancel: cancel}
		if err := New().Run(runCtx, req, killed); err == nil {
			t.Fatal("the cancelled run returned no error")
		}
		cancel()

		// Run 3: the resume finishes hop 2 and runs nothing of hop 1 again.
		done, err := sdktest.Run(ctx, New(), req, nil)
		res = done.FinalResult()
		if err != nil || !res.OK || !strings.Contains(res.Summary, "v1.36.3") {
			t.Fatalf("resumed run: %v %v\n%s", res, err, strings.Join(res.Lines, "\n"))
		}
		steps := finalSteps(done)
		if s := steps["kube-apiserver/cp-1"]; s.Status != sdk.StepSkipped {
			t.Fatalf("kube-apiserver on cp-1 after the resume: %v, want skipped", s)
		}
		for id := range steps {
			if strings.HasPrefix(id, "v1.35.2/") {
				t.Fatalf("the resume ran %s of hop 1 again", id)
			}
		}
		everyComponentAt(t, e, target)
		// Every node was changed as often in hop 2 (over both runs) as in hop 1.
		wantCounts(t, "hop 2 over the kill and the resume", delta(e.applies(), mid), hop1)
	})
}

// TestPauseBetweenSteps: the host's pause mark stops the run before the next step that
// touches a node, with sdk.PausedResult; the next run carries on and does not redo it.
func TestPauseBetweenSteps(t *testing.T) {
	t.Parallel()
	kube := testenv.StartKube(t)
	e := startEnv(t, kube, supportsTarget)
	ctx := ctxFor(t, 5*time.Minute)
	req := e.request(target)
	mark := filepath.Join(t.TempDir(), "pause")
	req.Evidence.PauseMark = mark
	before := e.applies()
	rec := &onStep{Recorder: sdktest.NewRecorder(nil), step: "kube-apiserver/cp-1", status: sdk.StepOK, do: func() {
		if err := os.WriteFile(mark, nil, 0o600); err != nil {
			t.Error(err)
		}
	}}
	if err := New().Run(ctx, req, rec); err != nil {
		t.Fatal(err)
	}
	_ = rec.Finish(nil)
	res := rec.FinalResult()
	if res.OK || res.Summary != sdk.PausedSummary || !strings.Contains(strings.Join(res.Lines, "\n"), "paused before kube-apiserver on cp-2") {
		t.Fatalf("paused run: %v", res)
	}
	wantCounts(t, "paused", delta(e.applies(), before), map[string]int{"cp-1": 1, "cp-2": 0, "cp-3": 0, "worker-1": 0})

	if err := os.Remove(mark); err != nil {
		t.Fatal(err)
	}
	done, err := sdktest.Run(ctx, New(), req, nil)
	if res := done.FinalResult(); err != nil || !res.OK {
		t.Fatalf("run after the pause: %v %v", res, err)
	}
	if s := finalSteps(done)["kube-apiserver/cp-1"]; s.Status != sdk.StepSkipped {
		t.Fatalf("kube-apiserver on cp-1 after the pause: %v, want skipped", s)
	}
	everyComponentAt(t, e, target)
}
