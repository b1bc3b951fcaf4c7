package talosupgrade

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/talosbot/talosbot/internal/testenv"
	"github.com/talosbot/talosbot/plugins/sdk/sdktest"
	"github.com/talosbot/talosbot/sim"
)

// runningPods creates unmanaged pods on a Kubernetes node, Running and Ready
// (the eviction API applies budgets only to those), labelled app=label.
func runningPods(t *testing.T, e *env, kubeNode, label string, names ...string) {
	t.Helper()
	ctx := ctxFor(t, time.Minute)
	kc := e.kube.Client
	for _, name := range names {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{"app": label}},
			Spec: corev1.PodSpec{NodeName: kubeNode, Containers: []corev1.Container{{Name: "c", Image: "nginx"}}}}
		if _, err := kc.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := testenv.SetPodRunningReady(ctx, kc, "default", name); err != nil {
			t.Fatal(err)
		}
	}
}

// budget creates a PodDisruptionBudget over app=label allowing `allowed`
// disruptions now (the status the disruption controller would write).
func budget(t *testing.T, e *env, label string, allowed int32) {
	t.Helper()
	ctx := ctxFor(t, time.Minute)
	one := intstr.FromInt32(1)
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: label, Namespace: "default"},
		Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: &one, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": label}}}}
	if _, err := e.kube.Client.PolicyV1().PodDisruptionBudgets("default").Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := testenv.SetPDBStatus(ctx, e.kube.Client, "default", label, allowed); err != nil {
		t.Fatal(err)
	}
}

// cordonWatch records every Kubernetes node seen cordoned from now on.
func cordonWatch(t *testing.T, e *env) func() []string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w, err := e.kube.Client.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[string]bool{}
	go func() {
		for ev := range w.ResultChan() {
			if n, ok := ev.Object.(*corev1.Node); ok && ev.Type != watch.Deleted && n.Spec.Unschedulable {
				mu.Lock()
				seen[n.Name] = true
				mu.Unlock()
			}
		}
	}()
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		var out []string
		for n := range seen {
			out = append(out, n)
		}
		return out
	}
}

// TestPDBBlockingTheDrainNeverReboots: a budget lets one of the two pods on
// the first worker go, then blocks the second. The drain runs out of time:
// the node is never rebooted, the result names the budget and says the new
// version is its default boot entry without a reboot, and the node is
// uncordoned. No later node is touched.
func TestPDBBlockingTheDrainNeverReboots(t *testing.T) {
	t.Parallel()
	slow(t)
	e := start(t, 1, 2, true, func(o *sim.Options) { o.TalosVersion = "v1.13.2" })
	ctx := ctxFor(t, 3*time.Minute)
	w1 := e.info(t, "worker-1")
	runningPods(t, e, w1.NodeName, "web", "web-0", "web-1")
	budget(t, e, "web", 1)
	req := e.request(t, target)
	req.Settings.NodeTimeoutMs = 20_000 // drain timeout: half of it

	rec, _ := sdktest.Run(ctx, &Plugin{}, req, nil)
	res := rec.FinalResult()
	if res.OK {
		t.Fatalf("the roll passed a blocked drain:\n%s", dump(rec.Steps()))
	}
	if n := e.c.Calls("worker-1", "/machine.MachineService/Reboot"); n != 0 {
		t.Fatalf("worker-1 was rebooted %d time(s) with its drain blocked", n)
	}
	if !strings.Contains(res.Error, "PDB default/web") {
		t.Fatalf("the result does not name the budget: %v", res)
	}
	all := strings.Join(append(res.Lines, res.Summary, res.Error), "\n")
	for _, want := range []string{target + " is the default boot entry but the node did not reboot", "uncordoned"} {
		if !strings.Contains(all, want) {
			t.Fatalf("the result does not say %q:\n%s", want, all)
		}
	}
	kn, err := e.kube.Client.CoreV1().Nodes().Get(ctx, w1.NodeName, metav1.GetOptions{})
	if err != nil || kn.Spec.Unschedulable {
		t.Fatalf("Kubernetes node %s left cordoned (%v)", w1.NodeName, err)
	}
	for _, n := range []string{"worker-2", "cp-1"} {
		if c := e.c.Calls(n, "/machine.LifecycleService/Upgrade") + e.c.Calls(n, "/machine.MachineService/Reboot"); c != 0 {
			t.Fatalf("%s was touched after the failed drain: %v", n, e.c.CallCounts()[n])
		}
	}
	for _, a := range res.SuggestedActions {
		if strings.HasPrefix(a.Command, "/talos rollback") {
			t.Fatalf("a rollback is offered for a node that did not reboot: %v", a)
		}
	}
}

// TestInstallerPullFailureOnTheLastNodeStopsBeforeAnyCordon: v1.13 nodes
// pull the installer on every node first; a registry failure on the last
// node of the roll stops it before the first node is cordoned or changed.
func TestInstallerPullFailureOnTheLastNodeStopsBeforeAnyCordon(t *testing.T) {
	t.Parallel()
	slow(t)
	e := start(t, 1, 2, true, func(o *sim.Options) { o.TalosVersion = "v1.13.2" })
	ctx := ctxFor(t, 3*time.Minute)
	// The control plane is the last node of the roll (workers first).
	if err := e.c.Inject(ctx, "cp-1", sim.Fault{ImagePullFailure: true}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.c.ClearAll(context.Background()) })
	cordoned := cordonWatch(t, e)

	rec, _ := sdktest.Run(ctx, &Plugin{}, e.request(t, target), nil)
	res := rec.FinalResult()
	if res.OK || !strings.Contains(res.Error, "cp-1") {
		t.Fatalf("want a pull failure naming cp-1, got %v\n%s", res, dump(rec.Steps()))
	}
	if c := cordoned(); len(c) != 0 {
		t.Fatalf("nodes were cordoned before the pull failure stopped the roll: %v", c)
	}
	for _, n := range e.names() {
		if c := e.c.Calls(n, "/machine.LifecycleService/Upgrade") + e.c.Calls(n, "/machine.MachineService/Reboot"); c != 0 {
			t.Fatalf("%s was changed: %v", n, e.c.CallCounts()[n])
		}
	}
	if e.c.Calls("worker-1", "/machine.ImageService/Pull") != 1 {
		t.Fatalf("worker-1 did not pull first: %v", e.c.CallCounts()["worker-1"])
	}
	all := strings.Join(append(res.Lines, res.Summary), "\n")
	if !strings.Contains(all, "no node was cordoned") {
		t.Fatalf("the result does not say the nodes are untouched:\n%s", all)
	}
}
