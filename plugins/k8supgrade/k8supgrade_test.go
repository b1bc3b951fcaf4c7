package k8supgrade

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/talosbot/talosbot/internal/terraform/tftest"
	"github.com/talosbot/talosbot/internal/testenv"
	"github.com/talosbot/talosbot/plugins/cluster/planguard"
	"github.com/talosbot/talosbot/plugins/sdk"
	"github.com/talosbot/talosbot/plugins/sdk/sdktest"
	"github.com/talosbot/talosbot/sim"
)

const (
	from   = "v1.35.2"
	target = "v1.36.3" // the testenv kube-apiserver's own version, so discovery is no downgrade
	// supportsTarget is a Talos whose compatibility covers Kubernetes 1.36.
	supportsTarget = "v1.13.9"
)

func TestDescribe(t *testing.T) {
	t.Parallel()
	m, err := New().Describe(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// R11: this plugin serves the Kubernetes upgrade only; Talos upgrades are another plugin.
	if m.Name != Name || len(m.Commands) != 1 {
		t.Fatalf("manifest = %v", m)
	}
	cmd := m.Commands[0]
	args := map[string]*sdk.Arg{}
	for _, a := range cmd.Args {
		args[a.Name] = a
	}
	if cmd.Name != "upgrade k8s" || cmd.Effect != sdk.EffectDisruptive || !cmd.NeedsSnapshot ||
		!args["version"].Required || args["version"].Flag || args["cluster"].Required ||
		!args["dry-run"].Flag || !args["dry-run"].Boolean || cmd.Args[0].Name != "version" {
		t.Fatalf("command = %v", cmd)
	}
}

func TestPlanRejectsBadInput(t *testing.T) {
	t.Parallel()
	req := &sdk.OperationRequest{Command: Command, Args: map[string]string{"version": "1.36"},
		Cluster: sdk.Cluster{Name: "x", Nodes: []*sdk.Node{{Name: "cp-1", Address: "127.0.0.1", Role: "controlplane"}}}}
	if _, err := New().Plan(context.Background(), req); err == nil || !strings.Contains(err.Error(), "v1.36.3") {
		t.Fatalf("partial version: %v", err)
	}
	req.Args["version"] = "1.36.3"
	plan, err := New().Plan(context.Background(), req)
	if err != nil || plan.Refusal.Rule != "R20" || !strings.Contains(plan.Refusal.Fix, "kubeconfig") {
		t.Fatalf("no kubeconfig: plan %v, %v", plan, err)
	}
}

// env is one sim cluster over the test's kube-apiserver.
type env struct {
	c    *sim.Cluster
	kube *testenv.Kube
	dir  string
}

func startEnv(t *testing.T, kube *testenv.Kube, talos string) *env {
	t.Helper()
	return startEnvAt(t, kube, talos, from)
}

func (e *env) request(version string, args ...string) *sdk.OperationRequest {
	pc := &sdk.Cluster{Name: "staging", Environment: "staging",
		Declared: map[string]string{"talos_kubernetes_version": from}}
	for _, n := range e.c.Nodes() {
		pc.Nodes = append(pc.Nodes, &sdk.Node{Name: n.Name, Address: n.IP, Role: n.Role, Host: n.Host})
	}
	a := map[string]string{"version": version}
	for i := 0; i+1 < len(args); i += 2 {
		a[args[i]] = args[i+1]
	}
	// Every target must be a known release (knownTarget): the bot's release data comes
	// with kubeReleases as releases.kubernetes.
	return withReleases(&sdk.OperationRequest{OperationID: "op-1", Command: Command, Args: a, Cluster: *pc,
		Credentials: sdk.Credentials{Talosconfig: e.c.Talosconfig(), Kubeconfig: e.kube.Kubeconfig},
		Evidence:    sdk.Evidence{Backups: &sdk.Backups{Dir: e.dir}}, Settings: sdk.Settings{GateTimeoutMs: 10000, NodeTimeoutMs: 20000}}, kubeReleases)
}

// applies counts ApplyConfiguration calls per node.
func (e *env) applies() map[string]int {
	out := map[string]int{}
	for _, n := range e.c.Nodes() {
		out[n.Name] = e.c.Calls(n.Name, "ApplyConfiguration")
	}
	return out
}

func delta(after, before map[string]int) map[string]int {
	out := map[string]int{}
	for k, v := range after {
		out[k] = v - before[k]
	}
	return out
}

func wantCounts(t *testing.T, what string, got, want map[string]int) {
	t.Helper()
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("%s: ApplyConfiguration calls %v, want %v", what, got, want)
		}
	}
}

func ctxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// refused asserts a plan refusal, the same refusal from Run, and no change to the cluster.
func refused(t *testing.T, e *env, req *sdk.OperationRequest, rule string, want ...string) {
	t.Helper()
	ctx := ctxFor(t, 2*time.Minute)
	before := e.applies()
	plan, err := New().Plan(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	r := plan.Refusal
	text := r.Reason + " — " + r.Fix
	t.Logf("refusal %s: %s", r.Rule, text)
	if r.Rule != rule || r.Fix == "" {
		t.Fatalf("plan refusal = %v, want rule %s", r, rule)
	}
	for _, w := range want {
		if !strings.Contains(text, w) {
			t.Fatalf("refusal %q does not contain %q", text, w)
		}
	}
	rec, _ := sdktest.Run(ctx, New(), req, nil)
	if res := rec.FinalResult(); res.OK || res.Refusal.Rule != rule {
		t.Fatalf("run result = %v, want refusal %s", res, rule)
	}
	wantCounts(t, "after a refusal", delta(e.applies(), before), map[string]int{"cp-1": 0, "cp-2": 0, "cp-3": 0, "worker-1": 0})
}

// cancelAfter cancels the run once a step reports OK: what a SIGKILL right after that step
// leaves behind.
type cancelAfter struct {
	*sdktest.Recorder
	step   string
	cancel context.CancelFunc
}

func (c *cancelAfter) Step(ev *sdk.StepEvent) error {
	err := c.Recorder.Step(ev)
	if ev.StepID == c.step && ev.Status == sdk.StepOK {
		c.cancel()
	}
	return err
}

func finalSteps(rec *sdktest.Recorder) map[string]*sdk.StepEvent {
	out := map[string]*sdk.StepEvent{}
	for _, s := range rec.Steps() {
		out[s.StepID] = s
	}
	return out
}

func staticPodsAt(t *testing.T, e *env, node, version string) {
	t.Helper()
	for _, comp := range sim.StaticPodComponents() {
		p, err := e.kube.Client.CoreV1().Pods("kube-system").Get(context.Background(), sim.StaticPodName(comp, node), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ready := false
		for _, c := range p.Status.Conditions {
			ready = ready || (c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue)
		}
		if !strings.HasSuffix(p.Spec.Containers[0].Image, ":"+version) || !ready {
			t.Fatalf("%s: image %s ready %t, want %s Ready", p.Name, p.Spec.Containers[0].Image, ready, version)
		}
	}
}

func kubeletAt(t *testing.T, e *env, node, version string) {
	t.Helper()
	n, err := e.kube.Client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n.Status.NodeInfo.KubeletVersion != version {
		t.Fatalf("kubelet on %s at %s, want %s", node, n.Status.NodeInfo.KubeletVersion, version)
	}
}

// TestUpgradeK8s runs the plugin against the sim and a real kube-apiserver. The subtests
// share the apiserver and each starts a fresh sim (same node names, so it takes over the
// Node and mirror pod objects).
func TestUpgradeK8s(t *testing.T) {
	kube := testenv.StartKube(t)

	t.Run("refuses two minors at once without the release of the minor in between (R20)", func(t *testing.T) {
		// Two minors are a path of hops (hops.go); without a known 1.36 release the
		// path cannot be planned.
		e := startEnv(t, kube, supportsTarget)
		refused(t, e, withReleases(e.request("1.37.0"), "1.35.2,1.37.0"), "R20", "goes one minor at a time", "no 1.36 release is configured", "releases.kubernetes")
	})

	t.Run("refuses a target that is not a known release (R20)", func(t *testing.T) {
		// Only a release in releases.kubernetes is a target (knownTarget): 1.36.99 is
		// refused before the cluster is read, naming the newest 1.36 patch; without
		// release data (or with releases.kubernetes empty) every target is.
		e := startEnv(t, kube, supportsTarget)
		refused(t, e, e.request("1.36.99"), "R20", "1.36.99 is not a Kubernetes release the bot knows", "the newest 1.36 patch is 1.36.3", "releases.kubernetes")
		// A minor nobody knows: the newest known release, never an invented one.
		refused(t, e, e.request("9.9.9"), "R20", "9.9.9 is not a Kubernetes release the bot knows", "the newest known Kubernetes release is 1.36.3")
		refused(t, e, withReleases(e.request("1.36.3"), ""), "R20", "no Kubernetes release is known", "releases.kubernetes")
		req := e.request("1.36.3")
		req.Evidence.Releases = nil
		refused(t, e, req, "R20", "no Kubernetes release is known")
	})

	t.Run("refuses a Talos release as target (R11)", func(t *testing.T) {
		// A Talos release given to the Kubernetes upgrade is refused R11 naming the
		// Talos upgrade as its own operation (releases.CheckKind through
		// Notes.AllowedKubernetes), before the cluster is read.
		e := startEnv(t, kube, supportsTarget)
		refused(t, e, e.request("v1.13.9"), "R11", "v1.13.9 is a Talos release, not a Kubernetes one", "run /talos upgrade talos v1.13.9 as its own operation")
	})

	t.Run("refuses a downgrade (R21)", func(t *testing.T) {
		e := startEnv(t, kube, supportsTarget)
		refused(t, e, e.request("v1.35.1"), "R21", "downgrade is not a rollback", "v1.35.2 on kube-apiserver on cp-1", "etcd snapshot")
	})

	t.Run("refuses a version the nodes' Talos does not support (R20)", func(t *testing.T) {
		e := startEnv(t, kube, "v1.12.6")
		refused(t, e, e.request(target), "R20", "Talos v1.12.6 on cp-1, cp-2, cp-3, worker-1", "too new", "upgrade Talos first")
	})

	t.Run("refuses a node whose Kubernetes Node cannot be found", func(t *testing.T) {
		e := startEnv(t, kube, supportsTarget)
		if err := kube.Client.CoreV1().Nodes().Delete(ctxFor(t, time.Minute), "worker-1", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		refused(t, e, e.request(target), "identity", "cannot tell which machine", "worker-1 (", "kubectl get nodes")
	})

	t.Run("refuses without a snapshot directory (R12)", func(t *testing.T) {
		e := startEnv(t, kube, supportsTarget)
		req := e.request(target)
		req.Evidence.Backups.Dir = ""
		refused(t, e, req, "R12", "snapshot_dir", "--dry-run")
	})

	t.Run("refuses when the gate before fails (R1)", func(t *testing.T) {
		e := startEnv(t, kube, supportsTarget)
		ctx := ctxFor(t, 2*time.Minute)
		if err := e.c.Inject(ctx, "cp-2", sim.Fault{UnhealthyService: "kubelet"}); err != nil {
			t.Fatal(err)
		}
		rec, _ := sdktest.Run(ctx, New(), e.request(target), nil)
		res := rec.FinalResult()
		if res.OK || res.Refusal.Rule != "R1" || !strings.Contains(res.Refusal.Reason, "cp-2: kubelet unhealthy") {
			t.Fatalf("want an R1 refusal naming cp-2's kubelet, got %v", res)
		}
		wantCounts(t, "after a failed gate", e.applies(), map[string]int{"cp-1": 0, "cp-2": 0, "cp-3": 0, "worker-1": 0})
	})

	t.Run("the Terraform plan guard stops it (R5)", func(t *testing.T) {
		// With plan_before_upgrade listing the cluster, a plan that would replace the cluster secrets
		// stops the upgrade before the snapshot and any machine-config change.
		bin := tftest.Binary(t)
		root := tftest.Root(t, bin, nil)
		e := startEnv(t, kube, supportsTarget)
		ctx := ctxFor(t, 2*time.Minute)
		req := e.request(target)
		req.Evidence.Terraform = &sdk.Terraform{Root: root, Binary: bin, ConfigKey: "clusters[0].credentials.terraform"}
		req.Config = []byte(`{"plan_before_upgrade": ["staging"]}`) // plugins.k8supgrade
		plan, err := New().Plan(ctx, req)
		if err != nil || plan.Steps[0].ID != planguard.Step().ID {
			t.Fatalf("the plan does not start with the guard: %v %v", plan, err)
		}
		t.Setenv("TF_VAR_secrets_generation", "2") // the fixture replaces talos_machine_secrets
		t.Setenv("TF_CLI_CONFIG_FILE", "")         // a stale one on the machine is not this test's subject
		rec, _ := sdktest.Run(ctx, New(), req, nil)
		res := rec.FinalResult()
		if res.OK || res.Refusal.Rule != "R5" || !strings.Contains(res.Refusal.Reason, "talos_machine_secrets") {
			t.Fatalf("want an R5 refusal, got %v", res)
		}
		if len(rec.Artifacts()) != 0 {
			t.Fatal("a snapshot was taken before the guard refused")
		}
		wantCounts(t, "after the plan guard refused", e.applies(), map[string]int{"cp-1": 0, "cp-2": 0, "cp-3": 0, "worker-1": 0})
	})

	t.Run("dry run reports the plan and changes nothing", func(t *testing.T) {
		e := startEnv(t, kube, supportsTarget)
		ctx := ctxFor(t, 2*time.Minute)
		req := e.request("1.36.3", "dry-run", "true")
		plan, err := New().Plan(ctx, req)
		if err != nil || plan.Refusal != nil || plan.Target != target {
			t.Fatalf("plan %v, %v", plan, err)
		}
		if !strings.Contains(strings.Join(plan.Warnings, "\n"), "deprecation-guide") ||
			!strings.Contains(strings.Join(plan.Warnings, "\n"), "kube-proxy DaemonSet's image is patched directly") {
			t.Fatalf("plan warnings must link the API removals and say what differs from talosctl: %q", plan.Warnings)
		}
		rec, err := sdktest.Run(ctx, New(), req, nil)
		res := rec.FinalResult()
		lines := strings.Join(res.Lines, "\n")
		if err != nil || !res.OK || !strings.Contains(res.Summary, "dry run") ||
			!strings.Contains(lines, "kube-apiserver on cp-1 v1.35.2 → v1.36.3") || !strings.Contains(lines, "kubelet on worker-1 v1.35.2 → v1.36.3") ||
			!strings.Contains(lines, "pre-flight checks: v1.35.2 → v1.36.3: no removed flag") {
			t.Fatalf("dry run: %v %v", res, err)
		}
		wantCounts(t, "dry run", e.applies(), map[string]int{"cp-1": 0, "cp-2": 0, "cp-3": 0, "worker-1": 0})
		if len(rec.Artifacts()) != 0 {
			t.Fatalf("dry run took a snapshot: %v", rec.Artifacts())
		}
	})

	t.Run("happy path v1.35.2 to v1.36.3", func(t *testing.T) {
		e := startEnv(t, kube, supportsTarget)
		ctx := ctxFor(t, 3*time.Minute)
		req := e.request("1.36.3")
		plan, err := New().Plan(ctx, req)
		if err != nil || plan.Refusal != nil {
			t.Fatalf("plan %v, %v", plan, err)
		}
		again, _ := New().Plan(ctx, req)
		if string(again.CanonicalInputs) != string(plan.CanonicalInputs) {
			t.Fatal("re-planning an unchanged cluster changed the canonical inputs (the approval would be voided)")
		}
		rec, err := sdktest.Run(ctx, New(), req, nil)
		res := rec.FinalResult()
		if err != nil || !res.OK {
			t.Fatalf("run: %v %v\n%s", res, err, strings.Join(res.Lines, "\n"))
		}
		for _, n := range []string{"cp-1", "cp-2", "cp-3"} {
			staticPodsAt(t, e, n, target)
		}
		for _, n := range e.c.Nodes() {
			kubeletAt(t, e, n.Name, target)
			// R11: a Kubernetes upgrade never upgrades Talos.
			if e.c.Calls(n.Name, "Upgrade") != 0 || e.c.NodeVersion(n.Name) != supportsTarget {
				t.Fatalf("%s: Talos touched: %d upgrade calls, version %s", n.Name, e.c.Calls(n.Name, "Upgrade"), e.c.NodeVersion(n.Name))
			}
		}
		// Control planes: one apply per static pod, kube-proxy image, kubelet; the worker: kubelet only.
		wantCounts(t, "happy path", e.applies(), map[string]int{"cp-1": 5, "cp-2": 5, "cp-3": 5, "worker-1": 1})
		if len(rec.Artifacts()) != 1 || rec.Artifacts()[0].Name != "etcd snapshot" {
			t.Fatalf("want the etcd snapshot artifact first, got %v", rec.Artifacts())
		}
		assertOrder(t, rec)
		lines := strings.Join(res.Lines, "\n")
		t.Logf("%s\n%s", res.Summary, lines)
		for _, w := range []string{`talos_kubernetes_version = "v1.36.3"`, `Terraform declares "v1.35.2"`, "kube-proxy DaemonSet's image is patched directly",
			"kube-apiserver on cp-1 v1.35.2 → v1.36.3", "kube-scheduler on cp-3 v1.35.2 → v1.36.3", "kubelet on worker-1 v1.35.2 → v1.36.3"} {
			if !strings.Contains(lines, w) {
				t.Fatalf("result lines lack %q:\n%s", w, lines)
			}
		}

		// Idempotent: a second run changes nothing and skips every node.
		before := e.applies()
		rec, err = sdktest.Run(ctx, New(), req, nil)
		if err != nil || !rec.FinalResult().OK {
			t.Fatalf("second run: %v %v", rec.FinalResult(), err)
		}
		wantCounts(t, "second run", delta(e.applies(), before), map[string]int{"cp-1": 0, "cp-2": 0, "cp-3": 0, "worker-1": 0})
		steps := finalSteps(rec)
		for _, id := range []string{"kube-apiserver/cp-1", "kube-scheduler/cp-3", "kube-proxy", "kubelet/cp-2", "kubelet/worker-1"} {
			if steps[id].Status != sdk.StepSkipped {
				t.Fatalf("second run: step %s = %v, want SKIPPED", id, steps[id])
			}
		}
	})

	t.Run("a static pod that never becomes Ready stops the upgrade and is named", func(t *testing.T) {
		e := startEnv(t, kube, supportsTarget)
		ctx := ctxFor(t, 3*time.Minute)
		if err := e.c.Inject(ctx, "cp-2", sim.Fault{StaticPodNotReady: sim.ComponentScheduler}); err != nil {
			t.Fatal(err)
		}
		req := e.request(target)
		req.Settings.NodeTimeoutMs = 3000
		rec, _ := sdktest.Run(ctx, New(), req, nil)
		res := rec.FinalResult()
		text := res.Summary + "\n" + res.Error + "\n" + strings.Join(res.Lines, "\n")
		t.Log(text)
		if res.OK || !strings.Contains(res.Summary, "stopped at kube-scheduler on cp-2") ||
			!strings.Contains(res.Error, "kube-system/kube-scheduler-cp-2 not Ready") {
			t.Fatalf("want a failure naming kube-scheduler-cp-2:\n%s", text)
		}
		if s := finalSteps(rec)["kube-scheduler/cp-2"]; s.Status != sdk.StepFailed {
			t.Fatalf("step kube-scheduler/cp-2 = %v", s)
		}
		// Stopped: every apiserver and controller-manager is done (they come first), cp-3's
		// scheduler and every kubelet untouched.
		wantCounts(t, "stopped at cp-2", e.applies(), map[string]int{"cp-1": 3, "cp-2": 3, "cp-3": 2, "worker-1": 0})
		kubeletAt(t, e, "worker-1", from)
	})

	t.Run("resume after the first control plane skips it", func(t *testing.T) {
		e := startEnv(t, kube, supportsTarget)
		ctx := ctxFor(t, 3*time.Minute)
		req := e.request(target)

		// First run: killed right after cp-1's control plane was done.
		runCtx, cancel := context.WithCancel(ctx)
		rec := &cancelAfter{Recorder: sdktest.NewRecorder(nil), step: "kube-apiserver/cp-1", cancel: cancel}
		err := New().Run(runCtx, req, rec)
		cancel()
		if err == nil {
			t.Fatal("cancelled run returned no error")
		}
		wantCounts(t, "first run", e.applies(), map[string]int{"cp-1": 1, "cp-2": 0, "cp-3": 0, "worker-1": 0})
		if err := waitStaticPodImage(ctx, e, sim.ComponentAPIServer, "cp-1", target); err != nil {
			t.Fatal(err)
		}

		// The plan of the resumed operation says what is already done.
		plan, err := New().Plan(ctx, req)
		if err != nil || plan.Refusal != nil {
			t.Fatalf("plan after a partial run: %v %v", plan, err)
		}
		if !strings.Contains(plan.Steps[len(plan.Steps)-1].Title, "talos_kubernetes_version") {
			t.Fatalf("last step = %v", plan.Steps[len(plan.Steps)-1])
		}

		before := e.applies()
		rec2, err := sdktest.Run(ctx, New(), req, nil)
		if err != nil || !rec2.FinalResult().OK {
			t.Fatalf("resumed run: %v %v", rec2.FinalResult(), err)
		}
		// cp-1's apiserver is not applied again: the rest is.
		wantCounts(t, "resumed run", delta(e.applies(), before), map[string]int{"cp-1": 4, "cp-2": 5, "cp-3": 5, "worker-1": 1})
		steps := finalSteps(rec2)
		if steps["kube-apiserver/cp-1"].Status != sdk.StepSkipped ||
			steps["kube-apiserver/cp-2"].Status != sdk.StepOK {
			t.Fatalf("resumed run steps: cp-1 %v, cp-2 %v", steps["kube-apiserver/cp-1"], steps["kube-apiserver/cp-2"])
		}
		for _, n := range e.c.Nodes() {
			kubeletAt(t, e, n.Name, target)
		}
	})
}

// assertOrder checks the order the steps report: snapshot, gate, pre-pull, then component by
// component across all control planes (each finished before the next starts), kube-proxy,
// kubelets with control planes first, gate. TestOrderSeenByKubernetes checks the same order
// from the cluster's side.
func assertOrder(t *testing.T, rec *sdktest.Recorder) {
	t.Helper()
	var seq []string
	seen := map[string]bool{}
	for _, s := range rec.Steps() {
		if s.Status == sdk.StepRunning || seen[s.StepID] {
			continue
		}
		seen[s.StepID] = true
		id := s.StepID
		switch {
		case strings.HasPrefix(id, "snapshot-"):
			id = "snapshot"
		case strings.HasPrefix(id, gateBefore):
			id = "gate-before"
		case strings.HasPrefix(id, gateAfter):
			id = "gate-after"
		}
		if len(seq) == 0 || seq[len(seq)-1] != id {
			seq = append(seq, id)
		}
	}
	want := []string{"snapshot", "gate-before", "pre-pull",
		"kube-apiserver/cp-1", "kube-apiserver/cp-2", "kube-apiserver/cp-3",
		"kube-controller-manager/cp-1", "kube-controller-manager/cp-2", "kube-controller-manager/cp-3",
		"kube-scheduler/cp-1", "kube-scheduler/cp-2", "kube-scheduler/cp-3", "kube-proxy",
		"kubelet/cp-1", "kubelet/cp-2", "kubelet/cp-3", "kubelet/worker-1", stepManifests, "gate-after", "drift-note"}
	if strings.Join(seq, " ") != strings.Join(want, " ") {
		t.Fatalf("step order:\n got %v\nwant %v", seq, want)
	}
}

// waitStaticPodImage waits until a mirror pod runs version and is Ready.
func waitStaticPodImage(ctx context.Context, e *env, comp, node, version string) error {
	for {
		p, err := e.kube.Client.CoreV1().Pods("kube-system").Get(ctx, sim.StaticPodName(comp, node), metav1.GetOptions{})
		if err == nil && strings.HasSuffix(p.Spec.Containers[0].Image, ":"+version) {
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s on %s not Ready at %s: %w", comp, node, version, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
