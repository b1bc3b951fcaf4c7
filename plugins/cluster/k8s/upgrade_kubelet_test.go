package k8s

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/talosbot/talosbot/plugins/cluster"
)

func kubeNode(name, address, kubelet string, ready bool) *corev1.Node {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{
		Addresses:  []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: address}},
		NodeInfo:   corev1.NodeSystemInfo{KubeletVersion: kubelet},
		Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: st}},
	}}
}

// TestWaitKubeletReadsTheResolvedNode: WaitKubelet reads the Node the
// operation's identity map resolved, by name, whatever other Node carries
// the inventory address (here a stale one left at the old version).
func TestWaitKubeletReadsTheResolvedNode(t *testing.T) {
	ctx := context.Background()
	n := cluster.Node{Name: "worker-1", Address: "10.0.0.4", Role: cluster.RoleWorker}
	c := &cluster.Clients{Kube: fake.NewClientset(
		kubeNode("stale", "10.0.0.4", "v1.35.2", false),
		kubeNode("talos-w1", "10.0.0.44", "v1.36.3", true),
	)}
	if err := WaitKubelet(ctx, c, n, "talos-w1", "v1.36.3", time.Second); err != nil {
		t.Fatalf("the resolved Node is at the target and Ready: %v", err)
	}

	err := WaitKubelet(ctx, c, n, "stale", "v1.36.3", 300*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "Node stale reports kubelet v1.35.2, not v1.36.3") {
		t.Fatalf("a Node behind the target: %v", err)
	}
	if err := WaitKubelet(ctx, c, n, "", "v1.36.3", time.Second); err == nil || !strings.Contains(err.Error(), "no Kubernetes Node resolved") {
		t.Fatalf("no resolved Node: %v", err)
	}
}
