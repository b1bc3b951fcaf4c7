package sim_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"

	"github.com/talosbot/talosbot/sim"
)

// TestNoEtcdLeaderWithALeavingMember: a control plane's graceful reset meets a cluster whose
// etcd has no leader (the soak's seed 34: a removal under noEtcdLeader). Talos v1.13.9's
// LeaveEtcd removes the member under clientv3.WithRequireLeader and retries only
// "unhealthy" and "stopped" (internal/pkg/etcd/etcd.go LeaveCluster), so the leave fails
// and the reset with it; once the fault is cleared, every member the fault stopped runs
// again under a leader, and the membership still has all three.
func TestNoEtcdLeaderWithALeavingMember(t *testing.T) {
	slow(t)
	c, cli := startSim(t, sim.Options{ControlPlanes: 3, HealthCheckInterval: 200 * time.Millisecond})
	ctx := t.Context()
	cp1, cp3 := nodeIP(t, c, "cp-1"), nodeIP(t, c, "cp-3")

	if err := c.Inject(ctx, "cp-1", sim.Fault{NoEtcdLeader: true}); err != nil {
		t.Fatal(err)
	}

	if err := cli.Reset(client.WithNode(ctx, cp3), true, false); err != nil {
		t.Fatal(err)
	}

	// The reset stops at leaveEtcd: cp-3 keeps answering and stays a member.
	eventually(t, 30*time.Second, "cp-3's reset to fail at leaveEtcd", func() error {
		resp, err := cli.MachineClient.ServiceList(client.WithNode(ctx, cp3), nil)
		if err != nil {
			return err
		}

		for _, m := range resp.GetMessages() {
			for _, s := range m.GetServices() {
				if s.GetId() == "etcd" {
					return nil
				}
			}
		}

		return errors.New("no etcd service listed")
	})

	if err := c.Clear(ctx, "cp-1"); err != nil {
		t.Fatalf("clear: %v", err)
	}

	eventually(t, 60*time.Second, "every member running under a leader", func() error {
		for _, m := range c.Etcd().Members() {
			if !m.Running() || !m.KnowsLeader() {
				return fmt.Errorf("member %s: running %v, knows a leader %v", m.Name(), m.Running(), m.KnowsLeader())
			}
		}

		return nil
	})

	ml, err := cli.EtcdMemberList(client.WithNode(ctx, cp1), &machineapi.EtcdMemberListRequest{})
	if err != nil || len(ml.GetMessages()) == 0 || len(ml.GetMessages()[0].GetMembers()) != 3 {
		t.Fatalf("members after the failed reset: %v %v", ml, err)
	}
}

// TestNoEtcdLeaderWhileAMemberLeaves: the order of the soak's seed 34: cp-3's graceful reset is
// under way when noEtcdLeader is set on cp-1, and the fault is cleared soon after. What
// happens to cp-3 depends on where its reset is: a leave that met no leader fails (Talos
// v1.13.9 LeaveEtcd: WithRequireLeader, "no leader" not retried), the sequence stops and cp-3
// stays a running member; a leave done before the fault leaves two members. Either way,
// once the fault is cleared every member still in the membership runs under a leader (the
// fault restarts what it stopped, never a member that left: Talos wiped its data directory).
func TestNoEtcdLeaderWhileAMemberLeaves(t *testing.T) {
	slow(t)
	c, cli := startSim(t, sim.Options{ControlPlanes: 3, HealthCheckInterval: 200 * time.Millisecond})
	ctx := t.Context()
	cp1, cp3 := nodeIP(t, c, "cp-1"), nodeIP(t, c, "cp-3")

	if err := cli.Reset(client.WithNode(ctx, cp3), true, false); err != nil {
		t.Fatal(err)
	}

	if err := c.Inject(ctx, "cp-1", sim.Fault{NoEtcdLeader: true}); err != nil {
		t.Logf("inject while cp-3 leaves: %v", err)
	}

	if err := c.Clear(ctx, "cp-1"); err != nil {
		t.Logf("clear: %v", err)
	}

	eventually(t, 60*time.Second, "every member of the membership running under a leader", func() error {
		ml, err := cli.EtcdMemberList(client.WithNode(ctx, cp1), &machineapi.EtcdMemberListRequest{})
		if err != nil {
			return err
		}

		for _, mm := range ml.GetMessages()[0].GetMembers() {
			m := c.Etcd().Member(mm.GetHostname())
			if m == nil {
				return fmt.Errorf("no sim member %q", mm.GetHostname())
			}

			if !m.Running() || !m.KnowsLeader() {
				return fmt.Errorf("member %s of %d: running %v, knows a leader %v", m.Name(), len(ml.GetMessages()[0].GetMembers()), m.Running(), m.KnowsLeader())
			}
		}

		return nil
	})
}
