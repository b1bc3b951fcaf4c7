package sim

import "time"

// Node lifecycle states as Options.OnTransition reports them.
const (
	// NodeRunning: the node booted and serves its API.
	NodeRunning = stateRunning
	// NodeDown: the node went down for a reboot (an upgrade, a rollback, a reboot, a fatal
	// sequence error); it stays down for the reboot delay, longer with slowReboot or
	// neverReturn. Its etcd member is stopped by then.
	NodeDown = stateRebooting
	// NodeReset: the node was reset without a reboot and stays off (it left the cluster).
	NodeReset = stateReset
)

// Transition is one change of a node's lifecycle state.
type Transition struct {
	// Node is the inventory name, Role its role.
	Node, Role string
	// From and To are NodeRunning, NodeDown or NodeReset.
	From, To string
	// Version is the Talos version the node runs after the change (on NodeRunning, the one
	// it booted).
	Version string
	// At is the cluster's clock (Options.Now) at the change.
	At time.Time
}

// transition reports a state change to Options.OnTransition. It is called with no lock of
// the node held, after the change took effect (a node reported down has stopped its etcd
// member and closed its API), so an observer may read the cluster (Nodes, Etcd) from it.
func (n *node) transition(from, to string) {
	f := n.c.opts.OnTransition
	if f == nil || from == to {
		return
	}

	f(Transition{Node: n.info.Name, Role: n.info.Role, From: from, To: to, Version: n.talosVersion(), At: n.c.now()})
}
