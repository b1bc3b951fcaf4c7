package sim_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/etcd"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/talosbot/talosbot/sim"
)

// FragmentEtcd writes and deletes about 4 MiB through ec and compacts, then
// makes small writes until the member at cp reports at least 1 MiB of free
// pages (bbolt frees them at a later commit). It returns the sizes.
func fragmentEtcd(ctx context.Context, t *testing.T, ec *clientv3.Client, cli *client.Client, cp string) (size, inUse int64) {
	t.Helper()
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
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		size, inUse = etcdSizes(ctx, t, cli, cp)
		if size-inUse >= 1<<20 {
			return size, inUse
		}
		if time.Now().After(deadline) {
			t.Fatalf("no fragmentation to reclaim: size %d, in use %d", size, inUse)
		}
		<-tick.C
		if _, err := ec.Put(ctx, "/tick", "x"); err != nil {
			t.Fatal(err)
		}
	}
}

func etcdSizes(ctx context.Context, t *testing.T, cli *client.Client, cp string) (int64, int64) {
	t.Helper()
	st, err := cli.EtcdStatus(client.WithNode(ctx, cp))
	if err != nil {
		t.Fatal(err)
	}
	ms := st.GetMessages()[0].GetMemberStatus()
	return ms.GetDbSize(), ms.GetDbSizeInUse()
}

func etcdAlarms(ctx context.Context, t *testing.T, cli *client.Client, cp string) []string {
	t.Helper()
	al, err := cli.EtcdAlarmList(client.WithNode(ctx, cp))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, a := range al.GetMessages()[0].GetMemberAlarms() {
		out = append(out, a.GetAlarm().String())
	}
	return out
}

// TestEtcdQuotaFaultRaisesNoSpaceUntilDefragmented: a quota between the
// database's size in use and its file size makes etcd itself raise NOSPACE;
// a disarm does not stick while the file is over the quota (the next write
// raises it again), a defragmentation brings the file under it and then the
// disarm sticks and writes work. The quota shows in the EtcdSpec resource's
// extra arguments, as Talos publishes cluster.etcd.extraArgs.
func TestEtcdQuotaFaultRaisesNoSpaceUntilDefragmented(t *testing.T) {
	c, cli := startSim(t, sim.Options{ControlPlanes: 1, Workers: 1})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cp := nodeIP(t, c, "cp-1")
	ec, err := c.Etcd().Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer ec.Close()

	if err := c.Inject(ctx, "worker-1", sim.Fault{EtcdQuotaBytes: 1 << 20}); err == nil {
		t.Fatal("etcdQuotaBytes on a worker was accepted")
	}
	if err := c.Inject(ctx, "cp-1", sim.Fault{EtcdQuotaBytes: -1}); err == nil {
		t.Fatal("a negative etcdQuotaBytes was accepted")
	}

	size, inUse := fragmentEtcd(ctx, t, ec, cli, cp)
	quota := inUse + (size-inUse)/2
	if err := c.Inject(ctx, "cp-1", sim.Fault{EtcdQuotaBytes: quota}); err != nil {
		t.Fatal(err)
	}
	if got := etcdAlarms(ctx, t, cli, cp); len(got) != 1 || got[0] != "NOSPACE" {
		t.Fatalf("alarms over the quota (size %d, quota %d): %v, want NOSPACE", size, quota, got)
	}
	spec, err := safe.StateGetByID[*etcd.Spec](client.WithNode(ctx, cp), cli.COSI, etcd.SpecID)
	if err != nil {
		t.Fatal(err)
	}
	if got := spec.TypedSpec().ExtraArgs["quota-backend-bytes"].Values; len(got) != 1 || got[0] != fmt.Sprint(quota) {
		t.Fatalf("EtcdSpec quota-backend-bytes = %v, want %d", got, quota)
	}

	if _, err := cli.EtcdAlarmDisarm(client.WithNode(ctx, cp)); err != nil {
		t.Fatal(err)
	}
	if got := etcdAlarms(ctx, t, cli, cp); len(got) != 1 {
		t.Fatalf("alarms after a disarm still over the quota: %v, want NOSPACE again", got)
	}

	if _, err := cli.EtcdDefragment(client.WithNode(ctx, cp)); err != nil {
		t.Fatal(err)
	}
	if after, _ := etcdSizes(ctx, t, cli, cp); after >= quota {
		t.Fatalf("defragmented size %d still over the quota %d", after, quota)
	}
	if _, err := cli.EtcdAlarmDisarm(client.WithNode(ctx, cp)); err != nil {
		t.Fatal(err)
	}
	if got := etcdAlarms(ctx, t, cli, cp); len(got) != 0 {
		t.Fatalf("alarms after a disarm under the quota: %v", got)
	}
	if _, err := ec.Put(ctx, "/after-defrag", "x"); err != nil {
		t.Fatalf("write after defragment and disarm: %v", err)
	}
}
