package soak

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/talosbot/talosbot/sim"
)

// TestObserverCatchesTwoDownAndQuorum drives a real sim as a careless bot
// would and checks that the observer names each break, and none where the
// quorum was lost to a fault set after the bot's last etcd read:
//   - cp-2's etcd stopped, no etcd read since, cp-1 rebooted: excused;
//   - an etcd read, then cp-3 rebooted with cp-2's etcd still stopped: quorum lost;
//   - worker-1 held down (neverReturn), then cp-1 rebooted: two nodes down.
func TestObserverCatchesTwoDownAndQuorum(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	obs := NewObserver()
	c, err := sim.Start(ctx, sim.Options{Dir: t.TempDir(), ControlPlanes: 3, Workers: 1, RebootDelay: 300 * time.Millisecond,
		OnCall: obs.OnCall, OnTransition: obs.OnTransition})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	obs.Attach(c)
	cfg, err := clientconfig.FromBytes(c.Talosconfig())
	if err != nil {
		t.Fatal(err)
	}
	cli, err := client.New(ctx, client.WithConfig(cfg))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	ip := map[string]string{}
	for _, n := range c.Nodes() {
		ip[n.Name] = n.IP
	}
	reboot := func(node string) {
		t.Helper()
		if err := cli.Reboot(client.WithNode(ctx, ip[node])); err != nil {
			t.Fatalf("reboot %s: %v", node, err)
		}
		// Down, then (unless held) back: a fresh boot answers Version.
		if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, false, func(context.Context) (bool, error) {
			return !c.NodeBooted(node), nil
		}); err != nil {
			t.Fatalf("%s never went down: %v", node, err)
		}
	}
	back := func(node string) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, false, func(context.Context) (bool, error) {
			return c.NodeBooted(node), nil
		}); err != nil {
			t.Fatalf("%s never came back: %v", node, err)
		}
	}
	invariants := func() []string {
		var out []string
		for _, b := range obs.Breaks() {
			out = append(out, b.Invariant)
		}
		return out
	}

	if err := c.Inject(ctx, "cp-2", sim.Fault{EtcdStopped: true}); err != nil {
		t.Fatal(err)
	}
	obs.FaultSet("cp-2", sim.Fault{EtcdStopped: true})
	reboot("cp-1")
	back("cp-1")
	if got := invariants(); len(got) != 0 {
		t.Fatalf("a quorum lost to a fault set after the last etcd read counted: %v", obs.Breaks())
	}

	if _, err := cli.EtcdMemberList(client.WithNode(ctx, ip["cp-3"]), nil); err != nil {
		t.Fatal(err)
	}
	reboot("cp-3")
	back("cp-3")
	if got := invariants(); !slices.Equal(got, []string{InvQuorum}) {
		t.Fatalf("cp-3 rebooted after an etcd read with cp-2's etcd stopped: breaks %v, want one %q", obs.Breaks(), InvQuorum)
	}

	if err := c.Clear(ctx, "cp-2"); err != nil {
		t.Fatal(err)
	}
	obs.FaultCleared("cp-2")
	if err := c.Inject(ctx, "worker-1", sim.Fault{NeverReturn: true}); err != nil {
		t.Fatal(err)
	}
	reboot("worker-1")
	reboot("cp-1")
	back("cp-1")
	if got := invariants(); !slices.Equal(got, []string{InvQuorum, InvTwoDown}) {
		t.Fatalf("cp-1 rebooted while worker-1 was held down: breaks %v, want %q added", obs.Breaks(), InvTwoDown)
	}
	if err := c.Clear(ctx, "worker-1"); err != nil {
		t.Fatal(err)
	}
	back("worker-1")
}

// TestObserverExcusesAnAddressChange: a control plane whose address changed has its etcd
// member cut off (sim/addressfault.go); a quorum lost to that, set after the bot's last etcd
// read, is no break of the bot's (soak seeds 1031, 1068, 1097, 1123, 1126 counted it).
func TestObserverExcusesAnAddressChange(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	obs := NewObserver()
	c, err := sim.Start(ctx, sim.Options{Dir: t.TempDir(), ControlPlanes: 3, RebootDelay: 300 * time.Millisecond,
		OnCall: obs.OnCall, OnTransition: obs.OnTransition})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	obs.Attach(c)
	cfg, err := clientconfig.FromBytes(c.Talosconfig())
	if err != nil {
		t.Fatal(err)
	}
	cli, err := client.New(ctx, client.WithConfig(cfg))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	var cp1 string
	for _, n := range c.Nodes() {
		if n.Name == "cp-1" {
			cp1 = n.IP
		}
	}
	f := sim.Fault{AddressChanged: "10.99.0.7"}
	if err := c.Inject(ctx, "cp-2", f); err != nil {
		t.Fatal(err)
	}
	obs.FaultSet("cp-2", f)
	if err := cli.Reboot(client.WithNode(ctx, cp1)); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, false, func(context.Context) (bool, error) {
		return c.NodeBooted("cp-1"), nil
	}); err != nil {
		t.Fatal("cp-1 never came back")
	}
	if b := obs.Breaks(); len(b) != 0 {
		t.Fatalf("a quorum lost to an address change set after the last etcd read counted: %v", b)
	}
}
