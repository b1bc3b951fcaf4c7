package talosupgrade

import (
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/talosbot/talosbot/plugins/sdk/sdktest"
	"github.com/talosbot/talosbot/sim"
)

// TestV113NodeDrainedWithTheTalosKubeconfig: no kubeconfig is configured, but the v1.13 path
// never reboots a node undrained: the bot fetches the kubeconfig Talos serves, as talosctl does,
// cordons and drains the worker (its pod is evicted) before the reboot, and uncordons it after.
func TestV113NodeDrainedWithTheTalosKubeconfig(t *testing.T) {
	t.Parallel()
	slow(t)
	e := start(t, 1, 1, true, func(o *sim.Options) { o.TalosVersion = "v1.13.2" })
	ctx := ctxFor(t, 3*time.Minute)
	w1 := e.info(t, "worker-1")
	runningPods(t, e, w1.NodeName, "web", "web-0")
	cordoned := cordonWatch(t, e)
	req := e.request(t, target)
	req.Credentials.Kubeconfig = nil

	plan, err := (&Plugin{}).Plan(ctx, req)
	if err != nil || plan.Refusal != nil {
		t.Fatalf("plan: %v %v", err, plan.Refusal)
	}
	if w := strings.Join(plan.Warnings, "\n"); !strings.Contains(w, "drained with the kubeconfig the Talos API serves") {
		t.Fatalf("the plan does not say how v1.13+ nodes are drained:\n%s", w)
	}

	rec, _ := sdktest.Run(ctx, &Plugin{}, req, nil)
	if res := rec.FinalResult(); !res.OK {
		t.Fatalf("roll failed: %v\n%s", res, dump(rec.Steps()))
	}
	// Evicted: deleted, or terminating (no kubelet confirms the deletion here).
	if p, err := e.kube.Client.CoreV1().Pods("default").Get(ctx, "web-0", metav1.GetOptions{}); !apierrors.IsNotFound(err) && (err != nil || p.DeletionTimestamp == nil) {
		t.Fatalf("pod web-0 on worker-1 was not evicted before the reboot (err %v)\n%s", err, dump(rec.Steps()))
	}
	if !slices.Contains(cordoned(), w1.NodeName) {
		t.Fatalf("worker-1 (%s) was never cordoned; cordoned: %v", w1.NodeName, cordoned())
	}
	kn, err := e.kube.Client.CoreV1().Nodes().Get(ctx, w1.NodeName, metav1.GetOptions{})
	if err != nil || kn.Spec.Unschedulable {
		t.Fatalf("worker-1 left cordoned (%v)", err)
	}
	if n := e.c.Calls("cp-1", "/machine.MachineService/Kubeconfig") + e.c.Calls("worker-1", "/machine.MachineService/Kubeconfig"); n == 0 {
		t.Fatal("the kubeconfig was not fetched through the Talos API")
	}
}

// TestV113WithoutKubernetesAccessRefusedAtPlan: no kubeconfig is configured and the one Talos
// serves does not reach a Kubernetes API: the v1.13 upgrade is refused before anything runs
// (R3), rather than rebooting nodes undrained.
func TestV113WithoutKubernetesAccessRefusedAtPlan(t *testing.T) {
	t.Parallel()
	e := start(t, 1, 1, false, func(o *sim.Options) { o.TalosVersion = "v1.13.2" })
	req := e.request(t, target)
	refusedEverywhere(t, e, req, "R3", "no Kubernetes access to drain with")
}
