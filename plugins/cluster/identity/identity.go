// Package identity resolves, once per operation, the names each inventory
// node goes by on the cluster: its Talos hostname, its k8s.Nodename, its etcd
// member and its Kubernetes Node. On a real cluster none of them has to equal
// the inventory name (Terraform's key), nor each other: a kubelet may register
// with its FQDN, a hostname may come from DHCP, an etcd member keeps the name
// it joined with. Every plugin that compares a name across two systems asks
// the Map built here instead of assuming two names are equal, and a node that
// cannot be resolved is refused by name (Map.Require).
//
// Each name comes from the system that owns it, as talosctl and Talos find
// them (Talos v1.13.9):
//   - the hostname from the node's network.HostnameStatus resource
//     (`talosctl get hostname`);
//   - the name the kubelet registers from the node's k8s.Nodename resource
//     (internal/app/machined/pkg/controllers/k8s/nodename.go);
//   - the etcd member from the node's own etcd.Member "local" resource (its
//     member id), else by a peer URL on one of the node's addresses, the way
//     pkg/cluster/check/etcd.go matches members to control planes;
//   - the Kubernetes Node by that nodename, else by an InternalIP that is
//     one of the node's addresses.
package identity

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/etcd"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/talosbot/talosbot/plugins/cluster"
)

// Rule is the refusal's rule id: no runbook rule, the design's "no identity
// coincidences" (docs/RUNBOOK.md, "Node identity").
const Rule = "identity"

// DefaultNodeTimeout bounds the Talos reads of one node. A node that is down
// answers only with an error or at the deadline; it must not hold the plan of
// a whole cluster for longer than a real node takes to answer a resource read.
const DefaultNodeTimeout = 15 * time.Second

// Aspect is a set of names a caller needs resolved.
type Aspect uint8

const (
	// Talos: the node answered the Talos API with its hostname and nodename.
	Talos Aspect = 1 << iota
	// Kubernetes: the node's Kubernetes Node was found. Required only when
	// the run has a kubeconfig; without one there is nothing to resolve.
	Kubernetes
	// Etcd: a control plane's etcd member was found (workers need none).
	Etcd
	// All is every aspect.
	All = Talos | Kubernetes | Etcd
)

// Node is one inventory node with every name it goes by. A name that could
// not be resolved is empty; Map.Require says why.
type Node struct {
	cluster.Node
	// Hostname is the Talos hostname (network.HostnameStatus).
	Hostname string
	// Nodename is the node's k8s.Nodename: the name its kubelet registers.
	Nodename string
	// Addresses are the node's own addresses (network.NodeAddress "current"),
	// with the inventory address first. They match peer URLs and InternalIPs.
	Addresses []string
	// EtcdMember is the control plane's etcd member name, EtcdID its id.
	EtcdMember string
	EtcdID     uint64
	// EtcdBy says how the member was found: "member id" or "peer URL <url>".
	EtcdBy string
	// KubeNode is the Kubernetes Node object's name.
	KubeNode string
	// KubeBy says how the Node was found: "nodename" or "InternalIP <ip>".
	KubeBy string

	talosErr string // why the Talos reads failed
}

// Map is the identity of every inventory node for one operation.
type Map struct {
	inv   cluster.Inventory
	nodes []Node
	// kube: Kubernetes was consulted (the run has a kubeconfig).
	kube bool
	// members: the etcd member list could be read from some control plane.
	members bool
	// etcdErr, kubeErr: why the member list or the Node list could not be read.
	etcdErr, kubeErr string
	// conflicts are names two inventory nodes resolved to.
	conflicts []conflict
}

// conflict is one name that two inventory nodes resolved to.
type conflict struct{ a, b, text string }

// Options tune Resolve.
type Options struct {
	// NodeTimeout bounds each node's Talos reads (default DefaultNodeTimeout).
	NodeTimeout time.Duration
}

// Resolve reads every inventory node's names. It never fails: what it cannot
// learn is recorded, and Require turns it into a refusal naming the node.
// c.Kube may be nil (no kubeconfig): Kubernetes names are then not resolved.
func Resolve(ctx context.Context, c *cluster.Clients, inv cluster.Inventory, o Options) *Map {
	if o.NodeTimeout <= 0 {
		o.NodeTimeout = DefaultNodeTimeout
	}
	m := &Map{inv: inv, nodes: make([]Node, len(inv.Nodes)), kube: c.Kube != nil}
	var wg sync.WaitGroup
	for i, n := range inv.Nodes {
		m.nodes[i] = Node{Node: n, Addresses: []string{n.Address}}
		wg.Go(func() { readTalos(ctx, c, &m.nodes[i], o.NodeTimeout) })
	}
	var members []*machineapi.EtcdMember
	wg.Go(func() { members, m.etcdErr = readMembers(ctx, c, inv, o.NodeTimeout) })
	var kubeNodes []corev1.Node
	if c.Kube != nil {
		wg.Go(func() {
			list, err := c.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
			if err != nil {
				m.kubeErr = err.Error()
				return
			}
			kubeNodes = list.Items
		})
	}
	wg.Wait()
	m.members = m.etcdErr == ""
	m.matchMembers(members)
	if m.kube && m.kubeErr == "" {
		m.matchKube(kubeNodes)
	}
	m.findConflicts()
	return m
}

// readTalos reads the node's hostname, nodename, addresses and, on a control
// plane, its local etcd member id, from the node itself.
func readTalos(ctx context.Context, c *cluster.Clients, n *Node, timeout time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	nctx := client.WithNode(ctx, n.Address)
	hs, err := safe.StateGetByID[*network.HostnameStatus](nctx, c.COSI, network.HostnameID)
	if err != nil {
		n.talosErr = "hostname: " + oneLine(err)
		return
	}
	n.Hostname = hs.TypedSpec().Hostname
	nn, err := safe.StateGetByID[*k8s.Nodename](nctx, c.COSI, k8s.NodenameID)
	if err != nil {
		n.talosErr = "k8s.Nodename: " + oneLine(err)
		return
	}
	n.Nodename = nn.TypedSpec().Nodename
	// The node's own addresses match peer URLs and InternalIPs that are not
	// the inventory address (a second NIC, a VIP-less internal network).
	// Optional: without them the inventory address still matches.
	if na, err := safe.StateGetByID[*network.NodeAddress](nctx, c.COSI, network.NodeAddressCurrentID); err == nil {
		for _, p := range na.TypedSpec().Addresses {
			if a := p.Addr().String(); !slices.Contains(n.Addresses, a) {
				n.Addresses = append(n.Addresses, a)
			}
		}
	}
	if n.IsControlPlane() {
		// Not found: etcd not (yet) joined; the peer URL match below may still
		// find a member, and Require says when neither does.
		if em, err := safe.StateGetByID[*etcd.Member](nctx, c.COSI, etcd.LocalMemberID); err == nil {
			if id, err := etcd.ParseMemberID(em.TypedSpec().MemberID); err == nil {
				n.EtcdID = id
			}
		}
	}
}

// readMembers asks every control plane for its local view of the member list
// and keeps the union by member id: one down control plane must not hide the
// membership, and no quorum is needed to resolve names.
func readMembers(ctx context.Context, c *cluster.Clients, inv cluster.Inventory, timeout time.Duration) ([]*machineapi.EtcdMember, string) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cps := inv.ControlPlanes()
	lists := make([][]*machineapi.EtcdMember, len(cps))
	errs := make([]string, len(cps))
	var wg sync.WaitGroup
	for i, cp := range cps {
		wg.Go(func() {
			resp, err := c.Machine.EtcdMemberList(client.WithNode(ctx, cp.Address), &machineapi.EtcdMemberListRequest{QueryLocal: true})
			if err != nil {
				errs[i] = cp.Name + ": " + oneLine(err)
				return
			}
			for _, msg := range resp.GetMessages() {
				lists[i] = append(lists[i], msg.GetMembers()...)
			}
		})
	}
	wg.Wait()
	seen := map[uint64]bool{}
	var out []*machineapi.EtcdMember
	answered := false
	for i := range cps {
		if errs[i] != "" {
			continue
		}
		answered = true
		for _, mem := range lists[i] {
			if !seen[mem.GetId()] {
				seen[mem.GetId()] = true
				out = append(out, mem)
			}
		}
	}
	if !answered {
		return nil, "no control plane listed the etcd members (" + strings.Join(errs, "; ") + ")"
	}
	return out, ""
}

func (m *Map) matchMembers(members []*machineapi.EtcdMember) {
	for i := range m.nodes {
		n := &m.nodes[i]
		if !n.IsControlPlane() {
			continue
		}
		var found *machineapi.EtcdMember
		for _, mem := range members {
			if n.EtcdID != 0 && mem.GetId() == n.EtcdID {
				found, n.EtcdBy = mem, "member id"
				break
			}
		}
		if found == nil {
			found, n.EtcdBy = memberByPeer(members, n.Addresses)
		}
		if found == nil {
			n.EtcdID = 0 // a local id no member list knows is no member
			continue
		}
		n.EtcdMember, n.EtcdID = found.GetHostname(), found.GetId()
	}
}

// memberByPeer finds the member with a peer URL on one of addrs.
func memberByPeer(members []*machineapi.EtcdMember, addrs []string) (*machineapi.EtcdMember, string) {
	for _, mem := range members {
		for _, u := range mem.GetPeerUrls() {
			if host := urlHost(u); host != "" && slices.Contains(addrs, host) {
				return mem, "peer URL " + u
			}
		}
	}
	return nil, ""
}

func urlHost(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	if ip := net.ParseIP(u.Hostname()); ip != nil {
		return ip.String()
	}
	return u.Hostname()
}

func (m *Map) matchKube(nodes []corev1.Node) {
	for i := range m.nodes {
		n := &m.nodes[i]
		if n.Nodename != "" {
			for _, kn := range nodes {
				if kn.Name == n.Nodename {
					n.KubeNode, n.KubeBy = kn.Name, "nodename"
				}
			}
		}
		if n.KubeNode == "" {
		byIP:
			for _, kn := range nodes {
				for _, a := range kn.Status.Addresses {
					if a.Type == corev1.NodeInternalIP && slices.Contains(n.Addresses, a.Address) {
						n.KubeNode, n.KubeBy = kn.Name, "InternalIP "+a.Address
						break byIP
					}
				}
			}
		}
	}
}

// findConflicts records a Kubernetes Node or etcd member that two inventory
// nodes resolved to: acting on it would act on the wrong machine.
func (m *Map) findConflicts() {
	kube, member := map[string]string{}, map[uint64]string{}
	for _, n := range m.nodes {
		if n.KubeNode != "" {
			if other, dup := kube[n.KubeNode]; dup {
				m.conflicts = append(m.conflicts, conflict{other, n.Name, fmt.Sprintf("%s and %s both resolve to Kubernetes Node %s", other, n.Name, n.KubeNode)})
			}
			kube[n.KubeNode] = n.Name
		}
		if n.EtcdID != 0 {
			if other, dup := member[n.EtcdID]; dup {
				m.conflicts = append(m.conflicts, conflict{other, n.Name, fmt.Sprintf("%s and %s both resolve to etcd member %s", other, n.Name, n.EtcdMember)})
			}
			member[n.EtcdID] = n.Name
		}
	}
}

func oneLine(err error) string { return strings.Join(strings.Fields(err.Error()), " ") }
