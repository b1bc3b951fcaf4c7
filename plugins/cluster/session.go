package cluster

import (
	"context"
	"fmt"

	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/talosbot/talosbot/plugins/sdk"
	"k8s.io/client-go/kubernetes"
)

// Session is the cluster access of a disruptive run: the gate's Clients plus
// the full Talos client, which the upgrade, rollback and reset calls need
// (ImageService, LifecycleService, events, file reads). One per run; Close it.
type Session struct {
	*Clients
	Talos *client.Client
	Inv   Inventory

	// talosKube is DrainKube's client from the Talos-served kubeconfig (kubeviatalos.go).
	talosKube kubernetes.Interface
	// talosconfig is kept (in memory, R23) for NodeClient (direct.go).
	talosconfig []byte
}

// Open connects like Connect and keeps the Talos client. Credentials stay in
// memory (R23); the Talos endpoints are every control-plane address so the
// client fails over while a control plane reboots.
func Open(ctx context.Context, inv Inventory, creds *sdk.Credentials) (*Session, error) {
	if len(creds.Talosconfig) == 0 {
		return nil, fmt.Errorf("cluster %s: no talosconfig was provided; configure the cluster's credentials (Terraform output or file)", inv.Name)
	}
	tc, err := NewTalosClient(ctx, creds.Talosconfig, Addresses(inv.ControlPlanes()))
	if err != nil {
		return nil, fmt.Errorf("cluster %s: %w", inv.Name, err)
	}
	s := &Session{Clients: &Clients{Machine: tc.MachineClient, Health: tc.ClusterClient, COSI: tc.COSI, closers: []func() error{tc.Close}}, Talos: tc, Inv: inv,
		talosconfig: creds.Talosconfig}
	if len(creds.Kubeconfig) > 0 {
		kube, dyn, err := NewKubeClients(creds.Kubeconfig)
		if err != nil {
			_ = s.Close()
			return nil, fmt.Errorf("cluster %s: %w", inv.Name, err)
		}
		s.Kube, s.Dynamic = kube, dyn
	}
	return s, nil
}

// Without returns the inventory without the named node: what the cluster is
// after a node removal, before Terraform drops the entry (R8).
func (inv Inventory) Without(name string) Inventory {
	out := Inventory{Name: inv.Name, Environment: inv.Environment}
	for _, n := range inv.Nodes {
		if n.Name != name {
			out.Nodes = append(out.Nodes, n)
		}
	}
	return out
}

// OpenRequest reads the inventory of req and opens a session with its
// credentials: what every plugin's Plan and Run start with.
func OpenRequest(ctx context.Context, req *sdk.OperationRequest) (*Session, error) {
	inv, err := InventoryFrom(&req.Cluster)
	if err != nil {
		return nil, err
	}
	return Open(ctx, inv, &req.Credentials)
}
