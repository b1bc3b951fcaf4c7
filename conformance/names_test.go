package conformance

import (
	"testing"

	"github.com/talosbot/talosbot/sim"
)

// applyNames gives the sim's nodes Talos hostnames and Kubernetes node names that differ from
// their inventory names, so that nothing passes by assuming two of them are equal.
func applyNames(o *sim.Options) {}

// hostname is the Talos hostname the sim gave the node.
func hostname(n sim.NodeInfo) string { return n.Name }

// nodename is the node's Kubernetes Node name.
func nodename(n sim.NodeInfo) string { return n.Name }

// checkNamesDiffer fails unless inventory name, hostname and Node name all differ.
func checkNamesDiffer(t *testing.T, ns []sim.NodeInfo) {
	t.Helper()
	waitingFor(t, "sim Options.Naming (distinct hostnames and Kubernetes Node names, h-simbehave)")

	for _, n := range ns {
		if n.Name == hostname(n) || n.Name == nodename(n) || hostname(n) == nodename(n) {
			t.Fatalf("node %s: hostname %q, Node name %q: the names must all differ", n.Name, hostname(n), nodename(n))
		}
	}
}
