package etcdops

import (
	"context"
	"strings"
	"testing"
	"time"

	etcdserverpb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/talosbot/talosbot/plugins/cluster"
	"github.com/talosbot/talosbot/plugins/sdk/sdktest"
	"github.com/talosbot/talosbot/sim"
)

// NOSPACE, end to end on three simulated control planes with real etcd: a
// quota under cp-1's database file makes etcd raise NOSPACE; `etcd alarms`
// lists it; `etcd disarm` refuses while the file is over the quota, naming
// both sizes and the defrag; the defrag runs member by member although
// every member's status carries the alarm (a NOSPACE alarm is what it
// remedies, etcd.RemediedByDefrag); then the disarm succeeds and no alarm
// comes back. Without the defrag's NOSPACE exception the defrag stops
// before the first member (every member reports the alarm as a status
// error); without the disarm check the first disarm would be sent and
// NOSPACE would come back at the next write.
func TestNoSpaceDefragThenDisarm(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c, err := sim.Start(ctx, sim.Options{ControlPlanes: 3, Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	rec, _ := sdktest.Run(ctx, &Plugin{}, request(c, CmdAlarms, nil), nil)
	if res := rec.FinalResult(); !res.OK || strings.Join(res.Lines, "|") != "no alarms" {
		t.Fatalf("alarms of a quiet cluster: %v", res)
	}
	// No runbook rule covers alarms: the refusal cites none (not R16).
	if plan, err := (&Plugin{}).Plan(ctx, request(c, CmdDisarm, nil)); err != nil || plan.Refusal == nil || !strings.Contains(plan.Refusal.Reason, "no alarm") || plan.Refusal.Rule != "" {
		t.Fatalf("disarm without an alarm: %v %v", plan, err)
	}

	// A reader may list alarms but not disarm them: refused at the plan (R23).
	ro, err := c.TalosconfigWithRole("os:reader")
	if err != nil {
		t.Fatal(err)
	}
	roReq := request(c, CmdDisarm, nil)
	roReq.Credentials.Talosconfig = ro
	if plan, err := (&Plugin{}).Plan(ctx, roReq); err != nil || plan.Refusal == nil || plan.Refusal.Rule != "R23" {
		t.Fatalf("disarm with an os:reader talosconfig: %v %v", plan, err)
	}

	fragment(t, ctx, c)
	req := request(c, CmdStatus, nil)
	inv, err := cluster.InventoryFrom(&req.Cluster)
	if err != nil {
		t.Fatal(err)
	}
	cc, err := cluster.Connect(ctx, inv, &req.Credentials)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	var size, inUse int64
	for _, m := range read(ctx, cc, inv) {
		if m.Node == "cp-1" {
			size, inUse = m.DBSize, m.InUse
		}
	}
	quota := inUse + (size-inUse)/2
	if err := c.Inject(ctx, "cp-1", sim.Fault{EtcdQuotaBytes: quota}); err != nil {
		t.Fatal(err)
	}

	rec, _ = sdktest.Run(ctx, &Plugin{}, request(c, CmdAlarms, nil), nil)
	if res := rec.FinalResult(); !res.OK || len(res.Lines) != 1 || !strings.HasPrefix(res.Lines[0], "cp-1 (member ") || !strings.HasSuffix(res.Lines[0], "): NOSPACE") {
		t.Fatalf("alarms with NOSPACE: %v", res)
	}

	plan, err := (&Plugin{}).Plan(ctx, request(c, CmdDisarm, nil))
	if err != nil || plan.Refusal == nil {
		t.Fatalf("disarm over the quota was planned: %v %v", plan, err)
	}
	for _, want := range []string{"cp-1: database " + mib(size), "over its quota " + mib(quota), "/talos etcd defrag staging"} {
		if !strings.Contains(plan.Refusal.Reason, want) {
			t.Fatalf("refusal %q does not name %q", plan.Refusal.Reason, want)
		}
	}
	// Run checks again (the cluster may change between plan and run).
	rec, _ = sdktest.Run(ctx, &Plugin{}, request(c, CmdDisarm, nil), nil)
	if res := rec.FinalResult(); res.OK || res.Refusal == nil || c.Calls("cp-1", "EtcdAlarmDisarm")+c.Calls("cp-2", "EtcdAlarmDisarm")+c.Calls("cp-3", "EtcdAlarmDisarm") != 0 {
		t.Fatalf("disarm over the quota ran: %v", res)
	}

	p := &Plugin{QuorumWithin: time.Minute}
	rec, _ = sdktest.Run(ctx, p, request(c, CmdDefrag, nil), nil)
	if res := rec.FinalResult(); !res.OK || !strings.Contains(res.Summary, "defragmented 3 member(s)") {
		t.Fatalf("defrag under NOSPACE: %v %v", res, rec.Steps())
	}
	for _, n := range []string{"cp-1", "cp-2", "cp-3"} {
		if c.Calls(n, "EtcdDefragment") != 1 {
			t.Fatalf("%s got %d EtcdDefragment calls", n, c.Calls(n, "EtcdDefragment"))
		}
	}

	rec, _ = sdktest.Run(ctx, &Plugin{}, request(c, CmdDisarm, nil), nil)
	if res := rec.FinalResult(); !res.OK || !strings.Contains(res.Summary, "disarmed 1 etcd alarm(s)") {
		t.Fatalf("disarm after the defrag: %v %v", res, rec.Steps())
	}
	rec, _ = sdktest.Run(ctx, &Plugin{}, request(c, CmdAlarms, nil), nil)
	if res := rec.FinalResult(); strings.Join(res.Lines, "|") != "no alarms" {
		t.Fatalf("alarms after the disarm: %v", res)
	}
}

func TestDisarmBlockersNameSizesAndFix(t *testing.T) {
	const m = 1 << 20
	ms := []Member{{Node: "cp-1", DBSize: 10 * m, InUse: 2 * m}, {Node: "cp-2", DBSize: 10 * m, InUse: 9 * m}, {Node: "cp-3", DBSize: 4 * m, InUse: 3 * m}, {Node: "cp-4", Err: "no reply"}}
	got := DisarmBlockers(ms, map[string]int64{"cp-1": 8 * m, "cp-2": 8 * m, "cp-3": 8 * m}, "prod")
	want := []string{"cp-1: database 10.0 MiB is over its quota 8.0 MiB (in use 2.0 MiB); fix: defragment first, /talos etcd defrag prod",
		"cp-2: database 10.0 MiB, 9.0 MiB of it in use, is over its quota 8.0 MiB",
		"cp-4: size not read (no reply)"}
	if len(got) != len(want) {
		t.Fatalf("blockers %q", got)
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Fatalf("blocker %d = %q, want prefix %q", i, got[i], want[i])
		}
	}
}

// Only the defrag is a maintenance command (maintenance_schedule runs it);
// the disarm is disruptive but never scheduled: it needs the cause gone,
// which a person checks.
func TestOnlyDefragIsMaintenance(t *testing.T) {
	m, err := (&Plugin{}).Describe(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range m.Commands {
		if c.Maintenance != (c.Name == CmdDefrag) {
			t.Errorf("%s: maintenance %v", c.Name, c.Maintenance)
		}
	}
}

// A CORRUPT alarm is never disarmed by the bot: Talos's disarm clears every
// alarm at once, and a corrupt member must not serve again because the
// space is fine. Refused at the plan and again at the run, naming the alarm;
// EtcdAlarmDisarm is never called.
func TestDisarmRefusesCorrupt(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := sim.Start(ctx, sim.Options{ControlPlanes: 3, Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Etcd().Members()[1].RaiseAlarm(ctx, etcdserverpb.AlarmType_CORRUPT); err != nil {
		t.Fatal(err)
	}
	plan, err := (&Plugin{}).Plan(ctx, request(c, CmdDisarm, nil))
	if err != nil || plan.Refusal == nil || !strings.Contains(plan.Refusal.Reason, "): CORRUPT") || plan.Refusal.Rule != "" {
		t.Fatalf("disarm of CORRUPT was planned: %v %v", plan, err)
	}
	rec, _ := sdktest.Run(ctx, &Plugin{}, request(c, CmdDisarm, nil), nil)
	if res := rec.FinalResult(); res.OK || res.Refusal == nil || c.Calls("cp-1", "EtcdAlarmDisarm")+c.Calls("cp-2", "EtcdAlarmDisarm")+c.Calls("cp-3", "EtcdAlarmDisarm") != 0 {
		t.Fatalf("disarm of CORRUPT ran: %v", res)
	}
}
