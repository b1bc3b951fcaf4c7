package sim

import (
	"context"
	"fmt"
	"net"

	corev1 "k8s.io/api/core/v1"
)

// The AddressChanged fault: the node came back with another address (a DHCP lease that
// changed). What follows is read from Talos v1.13.9:
//   - apid listens on the node's current addresses, so nothing answers at the old one: the
//     node's API is parked as for Unreachable (an address nobody holds: SYNs unanswered, the
//     client's dial times out or finds no route).
//   - the kubelet's node IP is picked from the current addresses
//     (internal/app/machined/pkg/controllers/k8s/nodeip.go), so the Node's InternalIP becomes
//     the new address.
//   - etcd advertises its current addresses only when it joins or bootstraps
//     (internal/app/machined/pkg/system/services/etcd.go, argsForInit/argsForControlPlane:
//     initial-advertise-peer-urls); a member with data keeps the peer URL the cluster
//     recorded, the old address, which the other members dial in vain: the member is cut off
//     (modelled as its etcd member stopped) and rejoins only when the address is back.
//   - apid's certificate is reissued for the new addresses (secrets/api.go): a client that
//     reached the new address with the old name would see it; nobody answers at the old one,
//     so it is not modelled.
// Clearing the fault restores the old address: the API answers, the member restarts, the
// Node's InternalIP is the inventory address again.

// checkAddressFault validates the fault's value: an IP address that is not the node's own.
func checkAddressFault(n *node, f Fault) error {
	if f.AddressChanged == "" {
		return nil
	}

	if net.ParseIP(f.AddressChanged) == nil || f.AddressChanged == n.info.IP {
		return fmt.Errorf("sim: addressChanged %q must be an IP address other than %s's %s", f.AddressChanged, n.info.Name, n.info.IP)
	}

	return nil
}

// addressGone reports whether the node's API does not answer at its inventory address.
func (f Fault) addressGone() bool { return f.Unreachable || f.AddressChanged != "" }

// applyAddressFault applies the change of the AddressChanged fault between old and f.
func (n *node) applyAddressFault(ctx context.Context, old, f Fault, running bool) []error {
	if f.AddressChanged == old.AddressChanged {
		return nil
	}

	var errs []error

	switch {
	case f.AddressChanged != "" && old.AddressChanged == "":
		n.stopFront()
		n.gate.refusing(false)

		if m := n.member(); m != nil && m.Running() {
			errs = append(errs, m.Stop())
		}
	case f.AddressChanged == "" && !f.Unreachable && running:
		n.serveFront()

		if m := n.member(); m != nil && !m.Running() && !f.EtcdStopped && !n.leftEtcd() && !m.Removed() {
			errs = append(errs, m.Restart(ctx))
		}
	}

	if n.c.kube != nil && running {
		ip := f.AddressChanged
		if ip == "" {
			ip = n.info.IP
		}

		errs = append(errs, n.c.kube.updateStatus(ctx, n.info.NodeName, func(st *corev1.NodeStatus) {
			for i := range st.Addresses {
				if st.Addresses[i].Type == corev1.NodeInternalIP {
					st.Addresses[i].Address = ip
				}
			}
		}))
	}

	return errs
}
