package talosupgrade

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/talosbot/talosbot/plugins/cluster"
	"github.com/talosbot/talosbot/plugins/cluster/etcd"
	"github.com/talosbot/talosbot/plugins/cluster/talos"
	"github.com/talosbot/talosbot/plugins/sdk"
)

func bootIDs(t *testing.T, e *env, req *sdk.OperationRequest) map[string]string {
	t.Helper()
	ctx := ctxFor(t, time.Minute)
	inv, err := cluster.InventoryFrom(&req.Cluster)
	if err != nil {
		t.Fatal(err)
	}
	s, err := cluster.Open(ctx, inv, &req.Credentials)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close() //nolint:errcheck
	out := map[string]string{}
	for _, n := range inv.Nodes {
		id, err := talos.BootID(ctx, s, n)
		if err != nil {
			t.Fatal(err)
		}
		out[n.Name] = id
	}
	return out
}

// TestRollHappyPath: 3 control planes + 2 workers from v1.12.6 to v1.13.9.
func TestRollHappyPath(t *testing.T) {
	t.Parallel()
	slow(t)
	e := start(t, 3, 2, true, nil)
	req := e.request(t, target)
	ctx := ctxFor(t, 5*time.Minute)
	leader := e.leader(t)
	before := bootIDs(t, e, req)

	p := &Plugin{}
	plan, err := p.Plan(ctx, req)
	if err != nil || plan.Refusal != nil {
		t.Fatalf("plan: %v %v", err, plan.Refusal)
	}
	// The plan is side-effect free and lists every node with its versions and image.
	for _, n := range e.names() {
		if e.upgradeCalls(n) != 0 {
			t.Fatalf("Plan called Upgrade on %s", n)
		}
	}
	var planned []string
	for _, s := range plan.Steps {
		if s.Kind == "upgrade" {
			planned = append(planned, s.Node)
			wantImg := "factory.talos.dev/nocloud-installer/" + simSchematic + ":" + target
			if s.FromVersion != from || s.ToVersion != target || s.Image != wantImg {
				t.Fatalf("step %v: want %s → %s with %s", s, from, target, wantImg)
			}
		}
	}
	if len(planned) != 5 || planned[0] != "worker-1" || planned[1] != "worker-2" || planned[4] != leader {
		t.Fatalf("planned order %v: want workers first and the etcd leader %s last", planned, leader)
	}

	var running []string // nodes with an upgrade in flight
	var overlap string
	rec := runWatched(ctx, p, req, func(ev *sdk.StepEvent) {
		if !strings.HasSuffix(ev.StepID, "/upgrade") {
			return
		}
		switch ev.Status {
		case sdk.StepRunning:
			if len(running) > 0 {
				overlap = fmt.Sprintf("%s started while %v ran", ev.Node, running)
			}
			running = append(running, ev.Node)
		default:
			running = slices.DeleteFunc(running, func(n string) bool { return n == ev.Node })
		}
	})
	res := rec.FinalResult()
	if !res.OK {
		t.Fatalf("roll failed: %s: %s\n%s", res.Summary, res.Error, dump(rec.Steps()))
	}
	if overlap != "" {
		t.Fatal("two nodes upgraded at once: " + overlap)
	}

	// Snapshot first, then the gate, then per node: upgrade → gate before the next node.
	steps := rec.Steps()
	if steps[0].StepID != etcd.StepSnapshotSource || len(rec.Artifacts()) != 1 {
		t.Fatalf("first step %s, artifacts %v: want the snapshot first", steps[0].StepID, rec.Artifacts())
	}
	var seq []string
	for _, s := range steps {
		if s.Status == sdk.StepOK && (strings.HasPrefix(s.StepID, "node/") || s.StepID == "gate-before/pdb") {
			seq = append(seq, s.StepID)
		}
	}
	var want []string
	want = append(want, "gate-before/pdb")
	for _, n := range planned {
		if strings.HasPrefix(n, "cp-") {
			want = append(want, "node/"+n+"/quorum-before", "node/"+n+"/upgrade", "node/"+n+"/quorum-after", "node/"+n+"/gate")
		} else {
			want = append(want, "node/"+n+"/upgrade", "node/"+n+"/gate")
		}
	}
	if !slices.Equal(seq, want) {
		t.Fatalf("step order\n got %v\nwant %v", seq, want)
	}
	// Progress events carry node and versions.
	for _, s := range upgradeSteps(rec) {
		if s.Node == "" || s.FromVersion != from || s.ToVersion != target {
			t.Fatalf("progress event without node/versions: %v", s)
		}
	}

	after := bootIDs(t, e, req)
	for _, n := range e.names() {
		if after[n] == before[n] {
			t.Errorf("%s: boot id unchanged", n)
		}
		if v := e.c.NodeVersion(n); v != target {
			t.Errorf("%s runs %s, want %s", n, v, target)
		}
		if c := e.c.Calls(n, "/machine.MachineService/Upgrade"); c != 1 {
			t.Errorf("%s: %d legacy Upgrade calls, want 1", n, c)
		}
	}
	if !slices.ContainsFunc(res.Lines, func(l string) bool {
		return strings.Contains(l, `talos_version = "`+target+`"`) && strings.Contains(l, `declares talos_version = "`+from+`"`)
	}) {
		t.Fatalf("no Terraform drift note with the exact change in %v", res.Lines)
	}
}

func dump(steps []*sdk.StepEvent) string {
	var b strings.Builder
	for _, s := range steps {
		fmt.Fprintf(&b, "%s %s %s\n", s.StepID, s.Status, s.Detail)
	}
	return b.String()
}
