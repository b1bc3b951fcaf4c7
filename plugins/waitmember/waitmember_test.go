package waitmember

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"

	"github.com/talosbot/talosbot/plugins/sdk"
	"github.com/talosbot/talosbot/plugins/sdk/sdktest"
	"github.com/talosbot/talosbot/sim"
)

func request(c *sim.Cluster, node, timeout string) *sdk.OperationRequest {
	pc := &sdk.Cluster{Name: "production", Environment: "production"}
	for _, n := range c.Nodes() {
		pc.Nodes = append(pc.Nodes, &sdk.Node{Name: n.Name, Address: n.IP, Role: n.Role})
		if n.Role == sim.RoleControlPlane {
			pc.Endpoints = append(pc.Endpoints, n.IP)
		}
	}
	return &sdk.OperationRequest{OperationID: "op-1", Command: Command, Cluster: *pc,
		Args:        map[string]string{"node": node, "timeout": timeout},
		Credentials: sdk.Credentials{Talosconfig: c.Talosconfig()}}
}

func TestWaitMember(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The etcd member names differ from the inventory names.
	c, err := sim.Start(ctx, sim.Options{ControlPlanes: 3, Workers: 1, Naming: sim.DistinctNames})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p := &Plugin{Poll: 100 * time.Millisecond}

	// A voting member with an agreed leader passes.
	rec, _ := sdktest.Run(ctx, p, request(c, "cp-2", "20s"), nil)
	if res := rec.FinalResult(); !res.OK || !strings.Contains(res.Summary, "cp-2 is a voting etcd member") {
		t.Fatalf("cp-2: %v", res)
	}

	// Refusals: a worker, an unknown node, a bad timeout.
	for node, want := range map[string]string{"worker-1": "only control planes join etcd", "cp-9": "cp-9 is not in the inventory"} {
		plan, err := p.Plan(ctx, request(c, node, ""))
		if err != nil || plan.Refusal.Rule != "R7" || !strings.Contains(plan.Refusal.Reason, want) {
			t.Fatalf("%s: %v %v", node, plan, err)
		}
	}
	if plan, _ := p.Plan(ctx, request(c, "cp-2", "soon")); plan.Refusal == nil {
		t.Fatal("a bad --timeout must be refused")
	}

	// A control plane that left etcd (graceful reset) is not a member: the
	// wait ends at its timeout and says why.
	cfg, err := clientconfig.FromBytes(c.Talosconfig())
	if err != nil {
		t.Fatal(err)
	}
	cli, err := client.New(ctx, client.WithConfig(cfg))
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close() //nolint:errcheck
	var cp3, cp3Member string
	for _, n := range c.Nodes() {
		if n.Name == "cp-3" {
			cp3, cp3Member = n.IP, n.EtcdMember
		}
	}
	if err := cli.Reset(client.WithNode(ctx, cp3), true, false); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); !c.Etcd().Member(cp3Member).Removed(); {
		if time.Now().After(deadline) {
			t.Fatal("cp-3 did not leave etcd after a graceful reset")
		}
		time.Sleep(50 * time.Millisecond) // polling the simulator under a deadline
	}
	start := time.Now()
	rec, _ = sdktest.Run(ctx, p, request(c, "cp-3", "2s"), nil)
	res := rec.FinalResult()
	if res.OK || !strings.Contains(res.Error, "cp-3 is not an etcd member") {
		t.Fatalf("cp-3 after reset: %v", res)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Fatalf("the wait ignored its 2s timeout: %v", d)
	}
}

// TestWaitMemberNeedsEveryMemberUnderOneLeader is R7's second half: the node
// itself votes and answers, but the wait passes only once every member
// reports the same leader. A member whose etcd is stopped reports none, and
// a cluster without a leader has none to agree on: both time out, saying so.
func TestWaitMemberNeedsEveryMemberUnderOneLeader(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := sim.Start(ctx, sim.Options{ControlPlanes: 3, Workers: 1, Naming: sim.DistinctNames})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p := &Plugin{Poll: 100 * time.Millisecond}

	// cp-2 is a voting member; cp-1's etcd is stopped.
	if err := c.Inject(ctx, "cp-1", sim.Fault{EtcdStopped: true}); err != nil {
		t.Fatal(err)
	}
	rec, _ := sdktest.Run(ctx, p, request(c, "cp-2", "2s"), nil)
	res := rec.FinalResult()
	if res.OK || !strings.Contains(res.Error, "not every member reports one agreed leader") ||
		strings.Contains(res.Error, "cp-2 is") || !strings.Contains(res.Error, "cp-1") {
		t.Fatalf("cp-2 with cp-1's etcd stopped: %v; want a timeout naming cp-1 and the leader, not cp-2", res)
	}

	// No leader at all.
	if err := c.Clear(ctx, "cp-1"); err != nil {
		t.Fatal(err)
	}
	if err := c.Inject(ctx, "cp-1", sim.Fault{NoEtcdLeader: true}); err != nil {
		t.Fatal(err)
	}
	rec, _ = sdktest.Run(ctx, p, request(c, "cp-2", "2s"), nil)
	res = rec.FinalResult()
	if res.OK || !strings.Contains(res.Error, "not every member reports one agreed leader") ||
		!strings.Contains(res.Error, "no etcd leader") {
		t.Fatalf("cp-2 without an etcd leader: %v; want a timeout naming the missing leader", res)
	}
}

// A request whose inventory is unusable is an error in Run as in Plan, not a
// "refused" result without the rule that refused.
func TestWaitMemberBadInventoryIsAnErrorNotARefusal(t *testing.T) {
	req := &sdk.OperationRequest{OperationID: "op-1", Command: Command, Args: map[string]string{"node": "w-1"},
		Cluster: sdk.Cluster{Name: "production", Nodes: []*sdk.Node{{Name: "w-1", Address: "10.0.0.9", Role: "worker"}}}}
	if _, err := (&Plugin{}).Plan(context.Background(), req); err == nil || !strings.Contains(err.Error(), "no control-plane node") {
		t.Fatalf("Plan: %v", err)
	}
	rec, err := sdktest.Run(context.Background(), &Plugin{}, req, nil)
	if err == nil || !strings.Contains(err.Error(), "no control-plane node") {
		t.Fatalf("Run: err %v, result %+v", err, rec.FinalResult())
	}
	if res := rec.FinalResult(); res != nil && res.Summary == "refused" && res.Refusal == nil {
		t.Fatalf("Run reported a refusal without a rule: %+v", res)
	}
}
