package etcdops

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/talosbot/talosbot/plugins/sdk"
	"github.com/talosbot/talosbot/plugins/sdk/sdktest"
	"github.com/talosbot/talosbot/sim"
)

func request(c *sim.Cluster, cmd string, args map[string]string) *sdk.OperationRequest {
	pc := &sdk.Cluster{Name: "staging", Environment: "staging"}
	for _, n := range c.Nodes() {
		pc.Nodes = append(pc.Nodes, &sdk.Node{Name: n.Name, Address: n.IP, Role: n.Role})
		if n.Role == sim.RoleControlPlane {
			pc.Endpoints = append(pc.Endpoints, n.IP)
		}
	}
	return &sdk.OperationRequest{OperationID: "op-1", Command: cmd, Cluster: *pc, Args: args,
		Credentials: sdk.Credentials{Talosconfig: c.Talosconfig()}}
}

// fragment writes and deletes 4 MiB and compacts it away, so every member's
// database is mostly free pages once the backend has counted them.
func fragment(t *testing.T, ctx context.Context, c *sim.Cluster) {
	t.Helper()
	ec, err := c.Etcd().Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer ec.Close()
	val := strings.Repeat("x", 64<<10)
	for i := range 64 {
		if _, err := ec.Put(ctx, fmt.Sprintf("/frag/%d", i), val); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ec.Delete(ctx, "/frag/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	resp, err := ec.Get(ctx, "/")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ec.Compact(ctx, resp.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	// bbolt frees the pages at a later commit: small writes make them,
	// until every member counts twice the default threshold free.
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		rec, _ := sdktest.Run(ctx, &Plugin{}, request(c, CmdStatus, nil), nil)
		lines := rec.FinalResult().Lines
		done := len(lines) == 3
		for _, l := range lines {
			var pct int
			if _, after, ok := strings.Cut(l, "fragmentation "); !ok {
				done = false
			} else if _, err := fmt.Sscanf(after, "%d%%", &pct); err != nil || pct < 2*DefaultMinFragmentation {
				done = false
			}
		}
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("members not fragmented: %v", lines)
		}
		<-tick.C
		if _, err := ec.Put(ctx, "/tick", "x"); err != nil {
			t.Fatal(err)
		}
	}
}

// A defrag goes one member at a time with the leader last, the quorum
// checked around each; a second run skips every member, now under the
// threshold. Status names the leader and the sizes.
func TestDefragOneMemberAtATimeLeaderLast(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := sim.Start(ctx, sim.Options{ControlPlanes: 3, Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fragment(t, ctx, c)

	rec, _ := sdktest.Run(ctx, &Plugin{}, request(c, CmdStatus, nil), nil)
	leader := ""
	for _, l := range rec.FinalResult().Lines {
		if strings.Contains(l, ", leader") {
			leader = strings.SplitN(l, ":", 2)[0]
		}
	}
	if leader == "" {
		t.Fatalf("status names no leader: %v", rec.FinalResult().Lines)
	}

	p := &Plugin{QuorumWithin: time.Minute}
	plan, err := p.Plan(ctx, request(c, CmdDefrag, nil))
	if err != nil || plan.Refusal != nil {
		t.Fatalf("plan: %v %v", plan, err)
	}
	if !strings.HasSuffix(strings.SplitN(plan.Summary, " (", 2)[0], "→ "+leader) {
		t.Fatalf("the plan does not put the leader %s last: %s", leader, plan.Summary)
	}
	rec, _ = sdktest.Run(ctx, p, request(c, CmdDefrag, nil), nil)
	if res := rec.FinalResult(); !res.OK {
		t.Fatalf("defrag: %v", res)
	}
	// One at a time: each member's step ends before the next one starts.
	var order []string
	running := ""
	for _, s := range rec.Steps() {
		if !strings.HasPrefix(s.StepID, "defrag/") {
			continue
		}
		node := strings.TrimPrefix(s.StepID, "defrag/")
		switch s.Status {
		case sdk.StepRunning:
			if running != "" {
				t.Fatalf("%s started while %s was defragmenting", node, running)
			}
			running = node
		case sdk.StepOK:
			running = ""
			order = append(order, node)
		}
	}
	if len(order) != 3 || order[2] != leader {
		t.Fatalf("defragmented %v; want all three with the leader %s last", order, leader)
	}
	for _, n := range order {
		if c.Calls(n, "EtcdDefragment") != 1 {
			t.Fatalf("%s got %d EtcdDefragment calls", n, c.Calls(n, "EtcdDefragment"))
		}
	}

	// Nothing left over the threshold: refused at the plan, so a schedule
	// never asks anyone to approve a defragmentation of nothing.
	plan, err = p.Plan(ctx, request(c, CmdDefrag, nil))
	if err != nil || plan.Refusal == nil || !strings.Contains(plan.Refusal.Reason, "no etcd member of staging needs a defragmentation") || plan.Refusal.Rule != "" {
		t.Fatalf("second defrag plan: %v %v", plan, err)
	}
}

func TestOrderLeaderLastAndThreshold(t *testing.T) {
	const m = 1 << 20
	ms := []Member{{Node: "cp-3", DBSize: 100 * m, InUse: 50 * m, Leader: true}, {Node: "cp-2", DBSize: 100 * m, InUse: 40 * m}, {Node: "cp-1", DBSize: 100 * m, InUse: 90 * m},
		{Node: "cp-4", Err: "no reply"}, {Node: "cp-5", DBSize: m / 10, InUse: m / 100}}
	todo, skipped := Order(ms, 20)
	if len(todo) != 2 || todo[0].Node != "cp-2" || todo[1].Node != "cp-3" || len(skipped) != 3 {
		t.Fatalf("todo %v skipped %v", todo, skipped)
	}
}

// A defrag while a member is down stops before the first member: the quorum
// check (R16's CheckDisruption) refuses, and no member is sent
// EtcdDefragment. Without the check before each member, the first one
// would be defragmented with the quorum already one member short.
func TestDefragStopsWhileAMemberIsDown(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := sim.Start(ctx, sim.Options{ControlPlanes: 3, Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fragment(t, ctx, c)

	rec, _ := sdktest.Run(ctx, &Plugin{}, request(c, CmdStatus, nil), nil)
	down := ""
	for _, l := range rec.FinalResult().Lines {
		if !strings.Contains(l, ", leader") {
			down = strings.SplitN(l, ":", 2)[0]
		}
	}
	if down == "" {
		t.Fatalf("no follower in %v", rec.FinalResult().Lines)
	}
	if err := c.Inject(ctx, down, sim.Fault{EtcdStopped: true}); err != nil {
		t.Fatal(err)
	}
	p := &Plugin{QuorumWithin: 3 * time.Second}
	rec, _ = sdktest.Run(ctx, p, request(c, CmdDefrag, nil), nil)
	res := rec.FinalResult()
	// The stopped member is skipped for what it is, not as under the threshold.
	skipped := ""
	for _, s := range rec.Steps() {
		if s.StepID == "skip/"+down && s.Status == sdk.StepSkipped {
			skipped = s.Detail
		}
	}
	if !strings.HasPrefix(skipped, "status error: ") {
		t.Fatalf("%s skipped as %q, want its status error", down, skipped)
	}
	if res.OK || !strings.Contains(res.Summary, "stopped before") {
		t.Fatalf("defrag with %s down: %v", down, res)
	}
	for _, n := range c.Nodes() {
		if got := c.Calls(n.Name, "EtcdDefragment"); got != 0 {
			t.Fatalf("%s got %d EtcdDefragment call(s) while %s was down", n.Name, got, down)
		}
	}
}
