// Package cluster is the shared cluster access of the lifecycle plugins: the
// Talos machinery client and client-go built from in-memory credentials, Flux
// status, the health gate (rules R1–R3), etcd node targeting (R4) and the
// verified etcd snapshot (R12). Each runbook rule lives in exactly one
// function here, so every plugin that needs it calls the same code.
package cluster

import (
	"errors"
	"fmt"
	"github.com/talosbot/talosbot/plugins/sdk"
)

// Node roles, as the inventory spells them.
const (
	RoleControlPlane = "controlplane"
	RoleWorker       = "worker"
)

// Node is one node of the inventory.
type Node struct {
	Name           string
	Address        string
	Role           string
	Host           string
	Platform       string
	InstallerClass string
}

// IsControlPlane reports whether the node runs etcd and the control plane.
func (n Node) IsControlPlane() bool { return n.Role == RoleControlPlane }

// Inventory is the cluster as the host declared it (Terraform outputs or
// config). It is the only source of node lists: nothing here discovers nodes.
type Inventory struct {
	Name        string
	Environment string
	Nodes       []Node
}

// InventoryFrom converts and validates the request's cluster target.
func InventoryFrom(c *sdk.Cluster) (Inventory, error) {
	if c == nil {
		return Inventory{}, errors.New("request has no cluster target: the host must send the cluster inventory")
	}
	inv := Inventory{Name: c.Name, Environment: c.Environment}
	seen := map[string]bool{}
	for _, n := range c.Nodes {
		var node Node // a nil entry has no name, as with the wire getters
		if n != nil {
			node = Node{Name: n.Name, Address: n.Address, Role: n.Role, Host: n.Host,
				Platform: n.Platform, InstallerClass: n.InstallerClass}
		}
		switch {
		case node.Name == "":
			return Inventory{}, fmt.Errorf("cluster %s: a node has no name; fix the inventory (config nodes or Terraform outputs)", inv.Name)
		case node.Address == "":
			return Inventory{}, fmt.Errorf("cluster %s: node %s has no address; fix the inventory", inv.Name, node.Name)
		case node.Role != RoleControlPlane && node.Role != RoleWorker:
			return Inventory{}, fmt.Errorf("cluster %s: node %s has role %q; use %q or %q", inv.Name, node.Name, node.Role, RoleControlPlane, RoleWorker)
		case seen[node.Name]:
			return Inventory{}, fmt.Errorf("cluster %s: node %s is listed twice; fix the inventory", inv.Name, node.Name)
		}
		seen[node.Name] = true
		inv.Nodes = append(inv.Nodes, node)
	}
	if len(inv.ControlPlanes()) == 0 {
		return Inventory{}, fmt.Errorf("cluster %s: the inventory has no control-plane node; at least one is needed to reach the Talos API", inv.Name)
	}
	return inv, nil
}

// ControlPlanes returns the control-plane nodes in inventory order.
func (inv Inventory) ControlPlanes() []Node { return inv.filter(true) }

// Workers returns the worker nodes in inventory order.
func (inv Inventory) Workers() []Node { return inv.filter(false) }

func (inv Inventory) filter(cp bool) []Node {
	var out []Node
	for _, n := range inv.Nodes {
		if n.IsControlPlane() == cp {
			out = append(out, n)
		}
	}
	return out
}

// Addresses returns the addresses of nodes, in order.
func Addresses(nodes []Node) []string {
	out := make([]string, len(nodes))
	for i, n := range nodes {
		out[i] = n.Address
	}
	return out
}

// Names returns the names of nodes, in order.
func Names(nodes []Node) []string {
	out := make([]string, len(nodes))
	for i, n := range nodes {
		out[i] = n.Name
	}
	return out
}

// Node finds a node by name or address.
func (inv Inventory) Node(nameOrAddress string) (Node, bool) {
	for _, n := range inv.Nodes {
		if n.Name == nameOrAddress || n.Address == nameOrAddress {
			return n, true
		}
	}
	return Node{}, false
}

// NameOf maps an address (as apid echoes it in Metadata.Hostname) to the node
// name; unknown addresses are returned as they are.
func (inv Inventory) NameOf(address string) string {
	if n, ok := inv.Node(address); ok {
		return n.Name
	}
	return address
}

// EtcdTargets is rule R4, and the only place that decides which nodes an etcd
// call goes to: every control-plane address of the inventory (on a
// one-control-plane cluster, its single address). A partial list would hide a
// sick member behind healthy ones, so every etcd call in the plugins targets
// exactly this list (client.WithNodes) or one node chosen from it.
func EtcdTargets(inv Inventory) []string {
	return Addresses(inv.ControlPlanes())
}
