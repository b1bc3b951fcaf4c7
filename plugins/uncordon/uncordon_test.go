package uncordon

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/talosbot/talosbot/internal/testenv"
	"github.com/talosbot/talosbot/plugins/cluster/k8s"
	"github.com/talosbot/talosbot/plugins/sdk"
	"github.com/talosbot/talosbot/plugins/sdk/sdktest"
	"github.com/talosbot/talosbot/sim"
)

func request(c *sim.Cluster, kube *testenv.Kube, node string) *sdk.OperationRequest {
	pc := &sdk.Cluster{Name: "staging", Environment: "staging"}
	for _, n := range c.Nodes() {
		pc.Nodes = append(pc.Nodes, &sdk.Node{Name: n.Name, Address: n.IP, Role: n.Role})
	}
	creds := &sdk.Credentials{Talosconfig: c.Talosconfig()}
	if kube != nil {
		creds.Kubeconfig = kube.Kubeconfig
	}
	return &sdk.OperationRequest{OperationID: "op-u", Command: Command, Args: map[string]string{"node": node}, Cluster: *pc, Credentials: *creds}
}

func setReady(t *testing.T, kube *testenv.Kube, node string, ready bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := kube.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st := corev1.ConditionTrue
	if !ready {
		st = corev1.ConditionFalse
	}
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == corev1.NodeReady {
			n.Status.Conditions[i].Status = st
		}
	}
	if _, err := kube.Client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestUncordon: the Node of worker-1 (its name differs from the inventory
// name) is cordoned; the command makes it schedulable again, only while it
// is Ready, and refuses what it cannot do.
func TestUncordon(t *testing.T) {
	kube := testenv.StartKube(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := sim.Start(ctx, sim.Options{ControlPlanes: 1, Workers: 1, Kube: kube.Client, Kubeconfig: kube.Kubeconfig, Naming: sim.DistinctNames})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close() //nolint:errcheck
	var kn string
	for _, n := range c.Nodes() {
		if n.Name == "worker-1" {
			kn = n.NodeName
		}
	}
	if err := k8s.Cordon(ctx, kube.Client, kn); err != nil {
		t.Fatal(err)
	}

	// Not Ready: refused, still cordoned.
	setReady(t, kube, kn, false)
	plan, err := New().Plan(ctx, request(c, kube, "worker-1"))
	if err != nil || plan.Refusal.Rule != Rule || !strings.Contains(plan.Refusal.Reason, "is not Ready") {
		t.Fatalf("want a not-Ready refusal, got %v %v", plan, err)
	}
	rec, _ := sdktest.Run(ctx, New(), request(c, kube, "worker-1"), nil)
	if res := rec.FinalResult(); res.OK || res.Refusal == nil {
		t.Fatalf("Run uncordoned a NotReady node: %v", res)
	}
	if cordoned, _ := k8s.Cordoned(ctx, kube.Client, kn); !cordoned {
		t.Fatal("a refused uncordon changed the Node")
	}

	// Ready: uncordoned.
	setReady(t, kube, kn, true)
	plan, err = New().Plan(ctx, request(c, kube, "worker-1"))
	if err != nil || plan.Refusal != nil || !strings.Contains(plan.Summary, "Uncordon worker-1 (Kubernetes node "+kn+")") {
		t.Fatalf("plan: %v %v", plan, err)
	}
	rec, _ = sdktest.Run(ctx, New(), request(c, kube, "worker-1"), nil)
	if res := rec.FinalResult(); !res.OK {
		t.Fatalf("uncordon: %v", res)
	}
	if cordoned, err := k8s.Cordoned(ctx, kube.Client, kn); err != nil || cordoned {
		t.Fatalf("still cordoned: %v", err)
	}
	// Again: nothing to do.
	rec, _ = sdktest.Run(ctx, New(), request(c, kube, "worker-1"), nil)
	if res := rec.FinalResult(); !res.OK || !strings.Contains(res.Summary, "already schedulable") {
		t.Fatalf("second run: %v", res)
	}

	// Refusals: no kubeconfig, a name outside the inventory.
	for req, want := range map[*sdk.OperationRequest]string{
		request(c, nil, "worker-1"):  "no kubeconfig",
		request(c, kube, "worker-9"): "worker-9 is not in the inventory",
	} {
		plan, err := New().Plan(ctx, req)
		if err != nil || plan.Refusal == nil || !strings.Contains(plan.Refusal.Reason, want) || plan.Refusal.Fix == "" {
			t.Fatalf("want a refusal with %q, got %v %v", want, plan, err)
		}
	}
}
