package identity_test

import (
	"testing"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"

	"github.com/talosbot/talosbot/plugins/cluster"
	"github.com/talosbot/talosbot/plugins/cluster/identity"
)

func threeNodes() cluster.Inventory {
	return cluster.Inventory{Name: "c", Nodes: []cluster.Node{
		{Name: "a", Address: "10.0.0.1", Role: cluster.RoleControlPlane},
		{Name: "b", Address: "10.0.0.2", Role: cluster.RoleControlPlane},
		{Name: "w", Address: "10.0.0.3", Role: cluster.RoleWorker},
	}}
}

func TestUnresolvedMatchesByInventoryAddressOnly(t *testing.T) {
	m := identity.Unresolved(threeNodes())
	if n, ok := m.ByMember(&machineapi.EtcdMember{Id: 7, Hostname: "whatever", PeerUrls: []string{"https://10.0.0.2:2380"}}); !ok || n.Name != "b" {
		t.Fatalf("peer URL on b's address: %+v %v", n, ok)
	}
	// A member named like an inventory node but elsewhere is not that node.
	if n, ok := m.ByMember(&machineapi.EtcdMember{Id: 8, Hostname: "a", PeerUrls: []string{"https://10.9.9.9:2380"}}); ok {
		t.Fatalf("matched by name: %+v", n)
	}
	// A worker is never an etcd member.
	if _, ok := m.ByMember(&machineapi.EtcdMember{Id: 9, PeerUrls: []string{"https://10.0.0.3:2380"}}); ok {
		t.Fatal("a worker matched an etcd member")
	}
	if err := m.Require(identity.Talos, "a"); err == nil {
		t.Fatal("an unresolved map must not pass Require")
	}
}

func TestWithout(t *testing.T) {
	m := identity.Unresolved(threeNodes()).Without("b")
	if _, ok := m.Of("b"); ok || len(m.Nodes()) != 2 || len(m.Inventory().Nodes) != 2 {
		t.Fatalf("b still there: %+v", m.Nodes())
	}
	if _, ok := m.ByMember(&machineapi.EtcdMember{PeerUrls: []string{"https://10.0.0.2:2380"}}); ok {
		t.Fatal("the removed node still matches its member")
	}
}
