package cluster

import (
	"testing"
)

func TestInventoryValidation(t *testing.T) {
	if _, err := InventoryFrom(nil); err == nil {
		t.Fatal("nil cluster accepted")
	}
	inv := Inventory{Name: "t", Nodes: []Node{{Name: "cp-1", Address: "10.0.0.1", Role: RoleControlPlane}, {Name: "cp-2", Address: "10.0.0.2", Role: RoleControlPlane}}}
	if inv.NameOf("10.0.0.2") != "cp-2" || inv.NameOf("1.2.3.4") != "1.2.3.4" {
		t.Fatal("NameOf")
	}
}
