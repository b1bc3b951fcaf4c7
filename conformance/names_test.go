package conformance

import (
	"testing"

	"github.com/talosbot/talosbot/sim"
)

// applyNames gives the sim's nodes Talos hostnames and Kubernetes node names that differ from
// their inventory names, so that nothing passes by assuming two of them are equal.
func applyNames(o *sim.Options) { o.Naming = sim.DistinctNames }

// hostname is the Talos hostname the sim gave the node.
func hostname(n sim.NodeInfo) string { return n.Hostname }

// nodename is the node's Kubernetes Node name.
func nodename(n sim.NodeInfo) string { return n.NodeName }

// etcdMember is the control plane's etcd member name.
func etcdMember(n sim.NodeInfo) string { return n.EtcdMember }

// checkNamesDiffer fails unless inventory name, hostname, Node name and etcd member name all
// differ, and each is unique in the cluster.
func checkNamesDiffer(t *testing.T, ns []sim.NodeInfo) {
	t.Helper()

	seen := map[string]string{}

	for _, n := range ns {
		names := []string{n.Name, hostname(n), nodename(n)}
		if n.Role == sim.RoleControlPlane {
			names = append(names, etcdMember(n))
		}

		for _, name := range names {
			if other, dup := seen[name]; dup || name == "" {
				t.Fatalf("node %s: name %q empty or already used by %s: inventory, hostname, Node and etcd member names must all differ", n.Name, name, other)
			}

			seen[name] = n.Name
		}
	}
}
