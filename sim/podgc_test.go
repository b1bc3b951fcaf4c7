package sim_test

import (
	"context"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/client"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/talosbot/talosbot/internal/testenv"
	"github.com/talosbot/talosbot/sim"
)

// A removed control plane's mirror pods go once its Node is deleted, as kube-controller-manager's
// PodGC deletes the pods of a node that no longer exists (podgc.go); the other control planes'
// pods stay. (Before, they stayed for ever and Talos's health check counted them.)
func TestPodGCDeletesADeletedNodesPods(t *testing.T) {
	kube := testenv.StartKube(t)
	c, cli := startSim(t, sim.Options{ControlPlanes: 3, Kube: kube.Client, Kubeconfig: kube.Kubeconfig, StaticPods: true,
		PodGCQuarantine: time.Second, HealthCheckInterval: 200 * time.Millisecond})
	ctx := t.Context()

	var cp3Node string
	for _, n := range c.Nodes() {
		if n.Name == "cp-3" {
			cp3Node = n.NodeName
		}
	}

	podsOn := func(node string) int {
		pods, err := kube.Client.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
		if err != nil {
			t.Fatal(err)
		}

		return len(pods.Items)
	}
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return podsOn(cp3Node) > 0, nil
	}); err != nil {
		t.Fatalf("cp-3 has no mirror pods to begin with")
	}

	if err := cli.Reset(client.WithNode(ctx, nodeIP(t, c, "cp-3")), true, false); err != nil {
		t.Fatal(err)
	}

	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return !c.NodeBooted("cp-3"), nil
	}); err != nil {
		t.Fatal("cp-3 did not go down for its reset")
	}

	if err := kube.Client.CoreV1().Nodes().Delete(ctx, cp3Node, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return podsOn(cp3Node) == 0, nil
	}); err != nil {
		t.Fatalf("cp-3's %d pods are still there after its Node was deleted", podsOn(cp3Node))
	}

	for _, n := range c.Nodes() {
		if n.Name != "cp-3" && podsOn(n.NodeName) == 0 {
			t.Errorf("%s lost its pods", n.Name)
		}
	}
}
