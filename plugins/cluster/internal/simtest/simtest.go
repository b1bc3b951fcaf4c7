package simtest

import (
	"context"
	"testing"
	"time"

	"github.com/talosbot/talosbot/plugins/cluster"
	"github.com/talosbot/talosbot/plugins/sdk"
	"github.com/talosbot/talosbot/sim"
)

// Start starts a sim cluster closed at the end of the test.
func Start(t testing.TB, opts sim.Options) *sim.Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := sim.Start(ctx, opts)
	if err != nil {
		t.Fatalf("start sim: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Target is the request's cluster target for a sim cluster, as the host builds it.
func Target(c *sim.Cluster, name string) *sdk.Cluster {
	pc := &sdk.Cluster{Name: name, Environment: "staging"}
	for _, n := range c.Nodes() {
		pc.Nodes = append(pc.Nodes, &sdk.Node{Name: n.Name, Address: n.IP, Role: n.Role, Host: n.Host,
			Platform: n.Platform, InstallerClass: n.InstallerClass})
		if n.Role == sim.RoleControlPlane {
			pc.Endpoints = append(pc.Endpoints, n.IP)
		}
	}
	return pc
}

// Connect returns the inventory and clients for a sim (and optional kubeconfig).
func Connect(t testing.TB, c *sim.Cluster, kubeconfig []byte) (cluster.Inventory, *cluster.Clients) {
	t.Helper()
	inv, err := cluster.InventoryFrom(Target(c, "sim"))
	if err != nil {
		t.Fatal(err)
	}
	cl, err := cluster.Connect(context.Background(), inv, &sdk.Credentials{Talosconfig: c.Talosconfig(), Kubeconfig: kubeconfig})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	return inv, cl
}

func Ctx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
