package gate

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/talosbot/talosbot/plugins/cluster"
)

// addressBound bounds the look-up behind the address explanation: it runs after the probes,
// so it must not stretch the gate much.
const addressBound = 5 * time.Second

// explainAddresses explains the unreachable nodes that the cluster knows at another address:
// a node that came back with a new DHCP lease registers its new address as its Kubernetes
// Node's InternalIP (Talos v1.13.9 picks the kubelet's node IP from the current addresses,
// internal/app/machined/pkg/controllers/k8s/nodeip.go), while its etcd member keeps the peer
// URL it joined with (internal/app/machined/pkg/system/services/etcd.go advertises addresses
// only at join), so a control plane's member cannot rejoin. Waiting does not heal that: the
// inventory or the node's address has to change. The explanation is added to the first
// failed probe that names the node unreachable; nothing without a Kubernetes client or when
// the addresses agree.
func explainAddresses(ctx context.Context, g *gateRun, unreachable []string, results []ProbeResult) {
	if g.c.Kube == nil || len(unreachable) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, addressBound)
	defer cancel()
	list, err := g.c.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return // the kube-nodes probe already reports the API
	}
	byName, _ := nodeIndex(list.Items)
	var peers map[string]string // read once, only when some node moved
	for _, name := range unreachable {
		n, ok := g.inv.Node(name)
		if !ok {
			continue
		}
		kn := kubeNodeFor(g, byName, list.Items, n)
		if kn == nil {
			continue
		}
		ip := internalIP(kn)
		if ip == "" || ip == n.Address {
			continue
		}
		line := fmt.Sprintf("%s does not answer at %s, and Kubernetes knows it (Node %s) at %s: its address changed (a new DHCP lease?)", n.Name, n.Address, kn.Name, ip)
		if peers == nil && n.IsControlPlane() {
			peers = etcdPeerHosts(ctx, g, unreachable)
		}
		if old, ok := peers[n.Name]; ok && old != ip {
			line += fmt.Sprintf("; its etcd member still names %s as its peer address, so it cannot rejoin etcd at %s", old, ip)
		}
		line += fmt.Sprintf("; fix: update the inventory (Terraform) to %s, or pin the node's address (a static IP or a DHCP reservation for %s) and reboot it", ip, n.Address)
		for i := range results {
			if results[i].Status == StatusFail && slices.Contains(results[i].Unreachable, n.Name) {
				results[i].Detail += "; " + line
				break
			}
		}
	}
}

// kubeNodeFor finds the Node of an inventory node that does not answer at its address: the
// resolved identity, the inventory name, or a Node whose name or hostname is the inventory
// name's host part (Talos names a Node after the node's hostname, which may be a FQDN).
func kubeNodeFor(g *gateRun, byName map[string]*corev1.Node, items []corev1.Node, n cluster.Node) *corev1.Node {
	if ids := g.opts.Identity; ids != nil {
		if kn := byName[ids.KubeNode(n.Name)]; kn != nil {
			return kn
		}
	}
	if kn := byName[n.Name]; kn != nil {
		return kn
	}
	for i := range items {
		kn := &items[i]
		if strings.HasPrefix(kn.Name, n.Name+".") {
			return kn
		}
		for _, a := range kn.Status.Addresses {
			if a.Type == corev1.NodeHostName && (a.Address == n.Name || strings.HasPrefix(a.Address, n.Name+".")) {
				return kn
			}
		}
	}
	return nil
}

func internalIP(kn *corev1.Node) string {
	for _, a := range kn.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	return ""
}

// etcdPeerHosts maps the unreachable control planes to the host of their etcd member's peer
// URL, read from the first control plane that answers the member list. Members are matched by
// the peer URL's host being the inventory address (the member was joined there) or by name.
// A control plane that does not answer within a second is passed over.
func etcdPeerHosts(ctx context.Context, g *gateRun, unreachable []string) map[string]string {
	out := map[string]string{}
	for _, cp := range g.inv.ControlPlanes() {
		// Every control plane in turn, briefly: one-to-many probes that waited on the moved
		// node name the healthy ones unreachable too, and the client's endpoint may be the
		// node that moved.
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		resp, err := g.c.Machine.EtcdMemberList(client.WithNode(cctx, cp.Address), &machineapi.EtcdMemberListRequest{})
		cancel()
		if err != nil || len(resp.GetMessages()) == 0 {
			continue
		}
		for _, m := range resp.GetMessages()[0].GetMembers() {
			for _, pu := range m.GetPeerUrls() {
				u, err := url.Parse(pu)
				if err != nil {
					continue
				}
				host := u.Hostname()
				for _, n := range unreachable {
					inv, _ := g.inv.Node(n)
					if inv.IsControlPlane() && (host == inv.Address || strings.HasPrefix(m.GetHostname(), n)) {
						out[n] = host
					}
				}
			}
		}
		break
	}
	return out
}
