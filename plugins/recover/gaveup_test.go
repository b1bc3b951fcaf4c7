package recover

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/talosbot/talosbot/plugins/sdk/sdktest"
	"github.com/talosbot/talosbot/sim"
)

// simClock is the sim's settable clock (sim.Options.Now).
type simClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *simClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *simClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// TestRecoverMembersThatGaveUpJoining: quorum lost, and the members that lost their data
// waited longer than Talos's 30 minutes to join, so their etcd services are Failed ("failed to
// build initial etcd cluster"). Their data dirs are empty: the recovery restores on one of them
// (not refused as a failed restore would be), resets the other and the stale survivor so they
// join, and ends with three voters.
func TestRecoverMembersThatGaveUpJoining(t *testing.T) {
	t.Parallel()
	slow(t)
	clock := &simClock{t: time.Now()}
	f := setupSim(t, nil, sim.Options{ControlPlanes: 3, Workers: 1, RebootDelay: 200 * time.Millisecond, Now: clock.now})
	p := f.plugin(time.Hour)

	lost, err := f.c.LoseEtcdQuorum(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	clock.advance(31 * time.Minute)
	err = wait.PollUntilContextTimeout(ctx(t), 50*time.Millisecond, 90*time.Second, true, func(c context.Context) (bool, error) {
		failed := 0
		for _, mv := range f.c.EtcdView(c).Members {
			if mv.Service == "Failed" {
				failed++
			}
		}
		return failed == len(lost), nil
	})
	if err != nil {
		t.Fatalf("the wiped members did not give up joining: %v: %+v", err, f.c.EtcdView(ctx(t)).Members)
	}

	loss := map[string]string{"accept-loss": "true"}
	plan, err := sdktest.Plan(ctx(t), p, f.req(1, loss))
	if err != nil || plan.Refusal != nil {
		t.Fatalf("plan: %v %v", err, plan.Refusal)
	}
	for _, l := range lost {
		if want := fmt.Sprintf("%s: etcd %s", l, GaveUp); !strings.Contains(plan.Summary, want) {
			t.Fatalf("plan summary lacks %q:\n%s", want, plan.Summary)
		}
	}

	rec, err := sdktest.Run(ctx(t), p, f.req(1, loss), nil)
	if err != nil {
		t.Fatal(err)
	}
	if res := rec.FinalResult(); !res.OK {
		t.Fatalf("recovery failed: %s: %s\nsteps: %v", res.Summary, res.Error, rec.Steps())
	}
	if _, err := f.c.WaitEtcdHealthy(ctx(t), 3); err != nil {
		t.Fatal(err)
	}
	if got := f.calls(mBootstrap); len(got) != 1 {
		t.Fatalf("Bootstrap calls %v, want one node", got)
	}
}

// TestRecoverV114WithADedicatedEtcdVolume: on Talos v1.14 with a dedicated ETCD volume, wiping
// EPHEMERAL leaves etcd's data in place, so the stale survivor would never rejoin the restored
// cluster; the recovery wipes EPHEMERAL and ETCD there and ends with three voters.
func TestRecoverV114WithADedicatedEtcdVolume(t *testing.T) {
	t.Parallel()
	slow(t)
	f := setupSim(t, nil, sim.Options{ControlPlanes: 3, Workers: 1, RebootDelay: 200 * time.Millisecond,
		TalosVersion: "v1.14.1", EtcdVolume: true})
	p := f.plugin(time.Hour)
	if _, err := f.c.LoseEtcdQuorum(ctx(t)); err != nil {
		t.Fatal(err)
	}
	loss := map[string]string{"accept-loss": "true"}
	rec, err := sdktest.Run(ctx(t), p, f.req(1, loss), nil)
	if err != nil {
		t.Fatal(err)
	}
	if res := rec.FinalResult(); !res.OK {
		t.Fatalf("recovery failed: %s: %s\nsteps: %v", res.Summary, res.Error, rec.Steps())
	}
	if _, err := f.c.WaitEtcdHealthy(ctx(t), 3); err != nil {
		t.Fatal(err)
	}
	var rejoin string
	for _, s := range rec.Steps() {
		if s.StepID == StepRejoin && s.Detail != "" {
			rejoin = s.Detail
		}
	}
	if !strings.Contains(rejoin, "cp-1 (EPHEMERAL,ETCD)") {
		t.Fatalf("the rejoin step did not wipe cp-1's ETCD volume: %q", rejoin)
	}
}
