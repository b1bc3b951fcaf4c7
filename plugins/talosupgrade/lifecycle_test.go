package talosupgrade

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/talosbot/talosbot/internal/testenv"
	"github.com/talosbot/talosbot/plugins/sdk/sdktest"
	"github.com/talosbot/talosbot/sim"
)

// TestLifecyclePathV113: hosts at v1.13 upgrade through ImageService.Pull,
// LifecycleService.Upgrade, a client-side drain through the eviction API and
// Reboot; the drained node is uncordoned once back. A second run skips every
// node (idempotent, what a resume relies on).
func TestLifecyclePathV113(t *testing.T) {
	t.Parallel()
	slow(t)
	e := start(t, 1, 1, true, func(o *sim.Options) { o.TalosVersion = "v1.13.2" })
	ctx := ctxFor(t, 3*time.Minute)
	kc := e.kube.Client
	w1 := e.info(t, "worker-1").NodeName

	// A pod on worker-1 behind a budget that allows one disruption.
	labels := map[string]string{"app": "web"}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-0", Namespace: "default", Labels: labels},
		Spec: corev1.PodSpec{NodeName: w1, Containers: []corev1.Container{{Name: "c", Image: "nginx"}}}}
	if _, err := kc.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := testenv.SetPodRunningReady(ctx, kc, "default", "web-0"); err != nil {
		t.Fatal(err)
	}
	one := intstr.FromInt32(1)
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: &one, Selector: &metav1.LabelSelector{MatchLabels: labels}}}
	if _, err := kc.PolicyV1().PodDisruptionBudgets("default").Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := testenv.SetPDBStatus(ctx, kc, "default", "web", 1); err != nil {
		t.Fatal(err)
	}

	req := e.request(t, target)
	rec, _ := sdktest.Run(ctx, &Plugin{}, req, nil)
	if res := rec.FinalResult(); !res.OK {
		t.Fatalf("roll failed: %v\n%s", res, dump(rec.Steps()))
	}
	for _, n := range []string{"cp-1", "worker-1"} {
		if e.c.NodeVersion(n) != target {
			t.Fatalf("%s runs %s", n, e.c.NodeVersion(n))
		}
		if e.c.Calls(n, "/machine.MachineService/Upgrade") != 0 || e.c.Calls(n, "/machine.LifecycleService/Upgrade") != 1 ||
			e.c.Calls(n, "/machine.ImageService/Pull") != 1 || e.c.Calls(n, "/machine.MachineService/Reboot") != 1 {
			t.Fatalf("%s calls: %v", n, e.c.CallCounts()[n])
		}
	}
	// Evicted (the eviction API deleted it or marked it terminating) and uncordoned.
	if p, err := kc.CoreV1().Pods("default").Get(ctx, "web-0", metav1.GetOptions{}); err == nil && p.DeletionTimestamp == nil {
		t.Fatal("web-0 was not evicted")
	}
	if n, err := kc.CoreV1().Nodes().Get(ctx, w1, metav1.GetOptions{}); err != nil || n.Spec.Unschedulable {
		t.Fatalf("worker-1 still cordoned: %v", err)
	}

	// Again: every node is already there.
	rec, _ = sdktest.Run(ctx, &Plugin{}, req, nil)
	if res := rec.FinalResult(); !res.OK || !strings.Contains(res.Summary, "0 upgraded, 2 already there") {
		t.Fatalf("second run: %v", res)
	}
	for _, s := range upgradeSteps(rec) {
		if s.Status.String() != "STEP_STATUS_SKIPPED" {
			t.Fatalf("second run did not skip %s: %v", s.Node, s)
		}
	}
	if e.c.Calls("worker-1", "Upgrade") != 1 {
		t.Fatal("second run upgraded again")
	}
}
