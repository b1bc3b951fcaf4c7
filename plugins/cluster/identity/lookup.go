package identity

import (
	"fmt"
	"slices"
	"strings"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"

	"github.com/talosbot/talosbot/plugins/cluster"
	"github.com/talosbot/talosbot/plugins/sdk"
)

// Inventory is the inventory the map was resolved for.
func (m *Map) Inventory() cluster.Inventory { return m.inv }

// Nodes returns every node's names, in inventory order.
func (m *Map) Nodes() []Node { return slices.Clone(m.nodes) }

// Of finds a node by inventory name or address.
func (m *Map) Of(nameOrAddress string) (Node, bool) {
	for _, n := range m.nodes {
		if n.Name == nameOrAddress || n.Address == nameOrAddress {
			return n, true
		}
	}
	return Node{}, false
}

// KubeNode is the Kubernetes Node name of the inventory node (name or
// address); "" when it has none or is unknown.
func (m *Map) KubeNode(nameOrAddress string) string {
	n, _ := m.Of(nameOrAddress)
	return n.KubeNode
}

// ByMemberID finds the control plane whose etcd member has id.
func (m *Map) ByMemberID(id uint64) (Node, bool) {
	for _, n := range m.nodes {
		if id != 0 && n.EtcdID == id {
			return n, true
		}
	}
	return Node{}, false
}

// ByMember finds the control plane an etcd member (from a member list) is:
// by its id when resolved, else by a peer URL on one of the node's addresses.
// A member that joined after Resolve (a control plane re-added under a new
// id) is still found by its peer URL.
func (m *Map) ByMember(mem *machineapi.EtcdMember) (Node, bool) {
	if n, ok := m.ByMemberID(mem.GetId()); ok {
		return n, true
	}
	for _, n := range m.nodes {
		if !n.IsControlPlane() {
			continue
		}
		if found, _ := memberByPeer([]*machineapi.EtcdMember{mem}, n.Addresses); found != nil {
			return n, true
		}
	}
	return Node{}, false
}

// Require returns nil when every named node (inventory name or address; none:
// every node) has the aspects resolved, and otherwise one refusal naming each
// node that cannot be resolved and what is missing. Kubernetes is required
// only when the run has a kubeconfig, Etcd only of control planes.
func (m *Map) Require(aspects Aspect, nodes ...string) error {
	targets := m.nodes
	if len(nodes) > 0 {
		targets = nil
		for _, name := range nodes {
			n, ok := m.Of(name)
			if !ok {
				return sdk.Refuse(Rule, fmt.Sprintf("%s is not in the inventory of %s", sdk.Clip(name), m.inv.Name),
					"use an inventory name: "+strings.Join(cluster.Names(m.inv.Nodes), ", "))
			}
			targets = append(targets, n)
		}
	}
	var problems []string
	if aspects&Kubernetes != 0 && m.kube && m.kubeErr != "" {
		problems = append(problems, "cannot list the Kubernetes Nodes: "+m.kubeErr)
	}
	if aspects&Etcd != 0 && !m.members && slices.ContainsFunc(targets, func(n Node) bool { return n.IsControlPlane() }) {
		problems = append(problems, m.etcdErr)
	}
	for _, n := range targets {
		if p := m.missing(n, aspects); len(p) > 0 {
			problems = append(problems, fmt.Sprintf("%s (%s): %s", n.Name, n.Address, strings.Join(p, "; ")))
		}
	}
	for _, c := range m.conflicts {
		for _, n := range targets {
			if c.a == n.Name || c.b == n.Name {
				problems = append(problems, c.text)
				break
			}
		}
	}
	if len(problems) == 0 {
		return nil
	}
	return sdk.Refuse(Rule, "cannot tell which machine some inventory nodes are: "+strings.Join(problems, "; "),
		"the bot resolves every name (Talos hostname, k8s.Nodename, etcd member, Kubernetes Node) from the cluster and never assumes it equals the inventory name; "+
			"check that each node named answers the Talos API (talosctl -n <address> get hostname), that its kubelet registered (kubectl get nodes -o wide) "+
			"and that a control plane is an etcd member (talosctl -n <address> etcd members), or fix the inventory address")
}

// missing lists what of aspects could not be resolved for n.
func (m *Map) missing(n Node, aspects Aspect) []string {
	var out []string
	if aspects&Talos != 0 && (n.talosErr != "" || n.Hostname == "") {
		why := n.talosErr
		if why == "" {
			why = "empty hostname"
		}
		out = append(out, "no answer from the Talos API ("+why+")")
	}
	if aspects&Kubernetes != 0 && m.kube && m.kubeErr == "" && n.KubeNode == "" {
		if n.Nodename != "" {
			out = append(out, fmt.Sprintf("no Kubernetes Node named %s (its k8s.Nodename) nor with an InternalIP in %s", n.Nodename, strings.Join(n.Addresses, ", ")))
		} else {
			out = append(out, "no Kubernetes Node with an InternalIP in "+strings.Join(n.Addresses, ", "))
		}
	}
	if aspects&Etcd != 0 && n.IsControlPlane() && m.members && n.EtcdMember == "" {
		out = append(out, "no etcd member with its member id or a peer URL on "+strings.Join(n.Addresses, ", "))
	}
	return out
}

// Lines describes each node's names for a plan, one line per node.
func (m *Map) Lines() []string {
	out := make([]string, 0, len(m.nodes))
	for _, n := range m.nodes {
		parts := []string{"hostname " + orDash(n.Hostname)}
		if m.kube {
			k := "Node " + orDash(n.KubeNode)
			if n.KubeBy != "" && n.KubeBy != "nodename" {
				k += " (by " + n.KubeBy + ")"
			}
			parts = append(parts, k)
		} else if n.Nodename != "" {
			parts = append(parts, "nodename "+n.Nodename)
		}
		if n.IsControlPlane() {
			parts = append(parts, "etcd member "+orDash(n.EtcdMember))
		}
		out = append(out, fmt.Sprintf("%s (%s): %s", n.Name, n.Address, strings.Join(parts, ", ")))
	}
	return out
}

func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}

// Without returns the map without the named node: the cluster after a node
// removal, before Terraform drops the inventory entry (R8).
func (m *Map) Without(name string) *Map {
	out := *m
	out.inv = m.inv.Without(name)
	out.nodes = slices.DeleteFunc(slices.Clone(m.nodes), func(n Node) bool { return n.Name == name })
	out.conflicts = slices.DeleteFunc(slices.Clone(m.conflicts), func(c conflict) bool { return c.a == name || c.b == name })
	return &out
}

// Unresolved is a map that knows only the inventory: every name is
// unresolved, and etcd members and Kubernetes Nodes match by the inventory
// address alone (peer URL, InternalIP). For unit tests on fakes that serve no
// resources; operations use Resolve, and Require refuses every node of it.
func Unresolved(inv cluster.Inventory) *Map {
	m := &Map{inv: inv, nodes: make([]Node, len(inv.Nodes))}
	for i, n := range inv.Nodes {
		m.nodes[i] = Node{Node: n, Addresses: []string{n.Address}, talosErr: "not resolved"}
	}
	m.etcdErr = "not resolved"
	return m
}
