package sim_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/client"

	"github.com/talosbot/talosbot/sim"
)

// TestOnTransitionSeesRebootAndReset: a reboot is reported as down then
// running, and a reset without reboot as down, then reset; a node reported down has
// already stopped its etcd member (the soak's quorum invariant reads it there).
func TestOnTransitionSeesRebootAndReset(t *testing.T) {
	t.Parallel()
	slow(t)
	var (
		mu          sync.Mutex
		seen        []string
		runningDown = -1
		c           *sim.Cluster
	)

	ready := make(chan struct{})
	c, cli := startSim(t, sim.Options{ControlPlanes: 3, Workers: 1, RebootDelay: 100 * time.Millisecond,
		OnTransition: func(tr sim.Transition) {
			<-ready

			mu.Lock()
			defer mu.Unlock()

			seen = append(seen, tr.Node+":"+tr.From+">"+tr.To)

			if tr.Node == "cp-2" && tr.To == sim.NodeDown {
				runningDown = 0
				for _, m := range c.Etcd().Members() {
					if m.Running() {
						runningDown++
					}
				}
			}
		}})
	close(ready)

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	if err := cli.Reboot(client.WithNode(ctx, nodeIP(t, c, "cp-2"))); err != nil {
		t.Fatal(err)
	}

	eventually(t, 30*time.Second, "cp-2 down and back", func() error {
		mu.Lock()
		defer mu.Unlock()

		if !slices.Contains(seen, "cp-2:rebooting>running") {
			return context.DeadlineExceeded
		}

		return nil
	})

	mu.Lock()
	if want := []string{"cp-2:running>rebooting", "cp-2:rebooting>running"}; !slices.Equal(seen, want) {
		t.Fatalf("transitions %v, want %v", seen, want)
	}

	if runningDown != 2 {
		t.Fatalf("when cp-2 was reported down %d etcd members ran, want 2 (its own stopped)", runningDown)
	}
	mu.Unlock()

	if err := cli.Reset(client.WithNode(ctx, nodeIP(t, c, "worker-1")), true, false); err != nil {
		t.Fatal(err)
	}

	eventually(t, 30*time.Second, "worker-1 reset", func() error {
		mu.Lock()
		defer mu.Unlock()

		// The shutdown task takes the node down as a reboot does, then it stays off.
		if !slices.Contains(seen, "worker-1:rebooting>reset") {
			return context.DeadlineExceeded
		}

		return nil
	})
}
