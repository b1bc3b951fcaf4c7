package sim_test

import (
	"context"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/client"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/talosbot/talosbot/sim"
)

// TestSmallerDifferences: Kubeconfig on a worker is Unimplemented (CheckControlplane),
// Rollback with no previous boot entry is GRUB's plain error, and EtcdMemberList without a
// leader fails with etcd's "no leader" (WithRequireLeader) instead of waiting.
func TestSmallerDifferences(t *testing.T) {
	t.Parallel()
	slow(t)
	c, cli := startSim(t, sim.Options{ControlPlanes: 3, Workers: 1})

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	worker := nodeIP(t, c, "worker-1")

	_, err := cli.Kubeconfig(client.WithNode(ctx, worker))
	if status.Code(err) != codes.Unimplemented || status.Convert(err).Message() != "kubeconfig is only available on control plane nodes" {
		t.Fatalf("Kubeconfig on a worker: want Unimplemented \"kubeconfig is only available on control plane nodes\", got %v", err)
	}

	err = cli.Rollback(client.WithNode(ctx, worker))
	if status.Code(err) != codes.Unknown || status.Convert(err).Message() != `cannot rollback to "", label does not exist` {
		t.Fatalf("Rollback with no previous entry: want Unknown `cannot rollback to \"\", label does not exist`, got %v", err)
	}

	if err := c.Inject(ctx, "cp-1", sim.Fault{NoEtcdLeader: true}); err != nil {
		t.Fatal(err)
	}

	_, err = cli.EtcdMemberList(client.WithNode(ctx, nodeIP(t, c, "cp-1")), nil)
	if status.Code(err) != codes.Unknown || status.Convert(err).Message() != "etcdserver: no leader" {
		t.Fatalf("EtcdMemberList without a leader: want Unknown \"etcdserver: no leader\", got %v", err)
	}

	if err := c.Clear(ctx, "cp-1"); err != nil {
		t.Fatal(err)
	}
}
