package k8s_test

import (
	"strings"
	"testing"
	"time"

	"github.com/talosbot/talosbot/plugins/cluster"
	"github.com/talosbot/talosbot/plugins/cluster/internal/simtest"
	"github.com/talosbot/talosbot/plugins/cluster/k8s"
	"github.com/talosbot/talosbot/sim"
)

// TestReadMachineConfigFromResource: the machine config comes from the MachineConfig resource,
// which a v1.12+ node serves although it no longer has the STATE partition's file.
func TestReadMachineConfigFromResource(t *testing.T) {
	c := simtest.Start(t, sim.Options{ControlPlanes: 1, Workers: 1, TalosVersion: "v1.13.9"})
	inv, cl := simtest.Connect(t, c, nil)
	ctx := simtest.Ctx(t, time.Minute)

	for _, n := range inv.Nodes {
		cfg, err := k8s.ReadMachineConfig(ctx, cl, n)
		if err != nil {
			t.Fatalf("%s: %v", n.Name, err)
		}

		if got := cfg.Machine().Type().String(); got != n.Role {
			t.Fatalf("%s: machine type %s, want %s", n.Name, got, n.Role)
		}

		if img := cfg.Machine().Install().Image(); !strings.HasSuffix(img, ":v1.13.9") {
			t.Fatalf("%s: install image %s", n.Name, img)
		}
	}

	// Fail closed: a client without the resource API, or a node that is down, is an error
	// naming the node.
	if _, err := k8s.ReadMachineConfig(ctx, &cluster.Clients{Machine: cl.Machine}, inv.Nodes[0]); err == nil || !strings.Contains(err.Error(), "no resource (COSI) API") {
		t.Fatalf("no COSI client: %v", err)
	}

	w := inv.Nodes[len(inv.Nodes)-1]
	if err := c.Inject(ctx, w.Name, sim.Fault{Unreachable: true}); err != nil {
		t.Fatal(err)
	}

	short := simtest.Ctx(t, 5*time.Second)
	if _, err := k8s.ReadMachineConfig(short, cl, w); err == nil || !strings.Contains(err.Error(), "read machine config of "+w.Name) {
		t.Fatalf("unreachable node: %v", err)
	}
}
