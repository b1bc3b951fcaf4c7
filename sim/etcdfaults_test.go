package sim_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/talosbot/talosbot/sim"
)

// fakeClock is a settable clock for sim.Options.Now.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (f *fakeClock) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()

	return f.t
}

func (f *fakeClock) Advance(d time.Duration) {
	f.mu.Lock()
	f.t = f.t.Add(d)
	f.mu.Unlock()
}

// etcdService waits until the node's etcd service reaches state and returns its message.
func etcdService(ctx context.Context, t *testing.T, c *sim.Cluster, node, state string) string {
	t.Helper()

	var msg string

	eventually(t, 30*time.Second, node+" etcd "+state, func() error {
		for _, mv := range c.EtcdView(ctx).Members {
			if mv.Node == node {
				if mv.Service != state {
					return fmt.Errorf("etcd %s (%s)", mv.Service, mv.Message)
				}

				msg = mv.Message

				return nil
			}
		}

		return fmt.Errorf("no etcd on %s", node)
	})

	return msg
}

// TestEtcdJoinGivesUpAfter30Minutes: a member waiting to join a cluster with no leader keeps
// its service Preparing until 30 minutes passed on the sim's clock, then the service is Failed
// with Talos's pre-stage error and stays so.
func TestEtcdJoinGivesUpAfter30Minutes(t *testing.T) {
	t.Parallel()
	slow(t)
	clock := &fakeClock{t: time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC)}
	c, _ := startSim(t, sim.Options{ControlPlanes: 3, Now: clock.Now})

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	lost, err := c.LoseEtcdQuorum(ctx)
	if err != nil {
		t.Fatal(err)
	}

	node := lost[0]
	etcdService(ctx, t, c, node, "Preparing")

	clock.Advance(29 * time.Minute)
	// Before 30 minutes the service is still trying.
	etcdService(ctx, t, c, node, "Preparing")

	clock.Advance(2 * time.Minute)

	msg := etcdService(ctx, t, c, node, "Failed")
	etcdService(ctx, t, c, lost[1], "Failed")
	for _, want := range []string{"Failed to run pre stage: failed to build initial etcd cluster: failed to build cluster arguments:", "error(s) occurred:", "\ttimeout"} {
		if !strings.Contains(msg, want) {
			t.Fatalf("Failed message %q lacks %q", msg, want)
		}
	}
}
