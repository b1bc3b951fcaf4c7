package sim_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/client"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/talosbot/talosbot/sim"
)

// TestEtcdDefragmentShrinksTheDatabase: after writes and deletes the
// member's database holds free pages (DbSize > DbSizeInUse); Talos's
// EtcdDefragment gives them back on that member only, and a worker refuses
// the call as Talos does.
func TestEtcdDefragmentShrinksTheDatabase(t *testing.T) {
	t.Parallel()
	c, cli := startSim(t, sim.Options{ControlPlanes: 1, Workers: 1})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cp := nodeIP(t, c, "cp-1")

	ec, err := c.Etcd().Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer ec.Close()
	before, _ := fragmentEtcd(ctx, t, ec, cli, cp)
	if _, err := cli.EtcdDefragment(client.WithNode(ctx, cp)); err != nil {
		t.Fatal(err)
	}
	after, _ := etcdSizes(ctx, t, cli, cp)
	if after >= before-(1<<20) {
		t.Fatalf("defragment did not shrink the database: %d → %d", before, after)
	}
	if _, err := cli.EtcdDefragment(client.WithNode(ctx, nodeIP(t, c, "worker-1"))); err == nil || !strings.Contains(err.Error(), "only available on control plane nodes") {
		t.Fatalf("defragment on a worker: %v", err)
	}
}

// TestEtcdAlarmDisarmComesBackWithoutSpace: EtcdAlarmDisarm clears every
// alarm (and writes work again), but while the space is not back (the etcdNoSpace fault holds)
// NOSPACE is raised again, as etcd's quota check does at the next write.
func TestEtcdAlarmDisarmComesBackWithoutSpace(t *testing.T) {
	t.Parallel()
	c, cli := startSim(t, sim.Options{ControlPlanes: 1, Workers: 1})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cp := nodeIP(t, c, "cp-1")

	// Space back (no fault): the disarm sticks and writes work again. Without
	// this half, a disarm that did nothing would pass the half below.
	if err := c.Etcd().Member("cp-1").RaiseAlarm(ctx, pb.AlarmType_NOSPACE); err != nil {
		t.Fatal(err)
	}
	if d, err := cli.EtcdAlarmDisarm(client.WithNode(ctx, cp)); err != nil || len(d.GetMessages()[0].GetMemberAlarms()) != 1 {
		t.Fatalf("disarm with space back: %v %v", d, err)
	}
	if al, err := cli.EtcdAlarmList(client.WithNode(ctx, cp)); err != nil || len(al.GetMessages()[0].GetMemberAlarms()) != 0 {
		t.Fatalf("alarms after a disarm with space back: %v %v", al, err)
	}
	ec, err := c.Etcd().Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer ec.Close()
	if _, err := ec.Put(ctx, "/after-disarm", "x"); err != nil {
		t.Fatalf("write after the disarm: %v", err)
	}

	if err := c.Inject(ctx, "cp-1", sim.Fault{EtcdNoSpace: true}); err != nil {
		t.Fatal(err)
	}
	d, err := cli.EtcdAlarmDisarm(client.WithNode(ctx, cp))
	if err != nil {
		t.Fatal(err)
	}
	if got := d.GetMessages()[0].GetMemberAlarms(); len(got) != 1 || got[0].GetAlarm().String() != "NOSPACE" {
		t.Fatalf("disarmed %v", got)
	}
	al, err := cli.EtcdAlarmList(client.WithNode(ctx, cp))
	if err != nil {
		t.Fatal(err)
	}
	if got := al.GetMessages()[0].GetMemberAlarms(); len(got) != 1 {
		t.Fatalf("alarms after a disarm without space: %v, want NOSPACE again", got)
	}
}
