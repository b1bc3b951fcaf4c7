package cluster

import (
	"strings"
	"testing"

	"github.com/talosbot/talosbot/plugins/sdk"
)

func TestInventoryValidation(t *testing.T) {
	if _, err := InventoryFrom(nil); err == nil || !strings.Contains(err.Error(), "no cluster target") {
		t.Fatalf("nil cluster: %v, want the no-cluster-target error", err)
	}
	if _, err := InventoryFrom(&sdk.Cluster{Name: "t", Nodes: []*sdk.Node{nil}}); err == nil || !strings.Contains(err.Error(), "a node has no name") {
		t.Fatalf("nil node: %v, want the no-name error", err)
	}
	inv := Inventory{Name: "t", Nodes: []Node{{Name: "cp-1", Address: "10.0.0.1", Role: RoleControlPlane}, {Name: "cp-2", Address: "10.0.0.2", Role: RoleControlPlane}}}
	if inv.NameOf("10.0.0.2") != "cp-2" || inv.NameOf("1.2.3.4") != "1.2.3.4" {
		t.Fatal("NameOf")
	}
}
