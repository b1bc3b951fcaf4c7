package sim_test

import (
	"context"
	"strings"
	"testing"
	"time"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/talosbot/talosbot/sim"
)

// TestAddressChangedFault: a control plane that came back with another address does not
// answer at its inventory address, its etcd member still names the old peer URL, the
// Kubernetes Node's InternalIP is the new address; clearing the fault restores all three.
func TestAddressChangedFault(t *testing.T) {
	t.Parallel()
	slow(t)
	kc := fake.NewClientset()
	c, cli := startSim(t, sim.Options{ControlPlanes: 3, Workers: 1, Kube: kc})

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	cp2 := nodeIP(t, c, "cp-2")

	if err := c.Inject(ctx, "cp-2", sim.Fault{AddressChanged: cp2}); err == nil {
		t.Fatal("addressChanged to the node's own address was accepted")
	}

	if err := c.Inject(ctx, "cp-2", sim.Fault{AddressChanged: "not-an-ip"}); err == nil {
		t.Fatal("addressChanged to a non-address was accepted")
	}

	if err := c.Inject(ctx, "cp-2", sim.Fault{AddressChanged: "10.99.0.9"}); err != nil {
		t.Fatal(err)
	}

	vctx, vcancel := context.WithTimeout(ctx, 5*time.Second)
	_, err := cli.Version(client.WithNode(vctx, cp2))
	vcancel()

	if err == nil {
		t.Fatal("cp-2 answered at its old address")
	}

	internalIP := func() string {
		var kn *corev1.Node

		list, err := kc.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}

		for i := range list.Items {
			if strings.HasPrefix(list.Items[i].Name, "cp-2") {
				kn = &list.Items[i]
			}
		}

		if kn == nil {
			t.Fatal("no Node for cp-2")
		}

		for _, a := range kn.Status.Addresses {
			if a.Type == corev1.NodeInternalIP {
				return a.Address
			}
		}

		return ""
	}

	if got := internalIP(); got != "10.99.0.9" {
		t.Fatalf("cp-2's Node InternalIP = %q, want the new address 10.99.0.9", got)
	}

	cp1 := nodeIP(t, c, "cp-1")

	ml, err := cli.EtcdMemberList(client.WithNode(ctx, cp1), &machineapi.EtcdMemberListRequest{})
	if err != nil {
		t.Fatal(err)
	}

	found := false

	for _, m := range ml.GetMessages()[0].GetMembers() {
		if strings.HasPrefix(m.GetHostname(), "cp-2") {
			found = true

			if len(m.GetPeerUrls()) == 0 || !strings.Contains(m.GetPeerUrls()[0], cp2) {
				t.Fatalf("cp-2's member peer URLs %v, want the old address %s", m.GetPeerUrls(), cp2)
			}
		}
	}

	if !found {
		t.Fatal("cp-2 is not in the member list")
	}

	if err := c.Clear(ctx, "cp-2"); err != nil {
		t.Fatal(err)
	}

	if _, err := cli.Version(client.WithNode(ctx, cp2)); err != nil {
		t.Fatalf("cp-2 after clearing: %v", err)
	}

	if got := internalIP(); got != cp2 {
		t.Fatalf("cp-2's Node InternalIP after clearing = %q, want %s", got, cp2)
	}

}
