package sim_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/resources/etcd"

	"github.com/talosbot/talosbot/sim"
)

// TestTalosctlEtcdAlarmsUnderQuota: the real talosctl v1.13.9 drives the
// etcdQuotaBytes fault as it would a Talos control plane whose etcd runs
// over --quota-backend-bytes: `etcd alarm list` shows the member and
// NOSPACE, `etcd alarm disarm` prints what it disarmed yet the alarm is back
// while the file is over the quota, `etcd defrag` brings it under, and then
// the disarm holds (the list prints its header only). `get etcdspecs` shows
// the quota among the extra arguments.
func TestTalosctlEtcdAlarmsUnderQuota(t *testing.T) {
	slow(t)
	bin := needTalosctl(t)
	c, cli := startSim(t, sim.Options{ControlPlanes: 1, Workers: 1, TalosVersion: "v1.13.9"})
	tc := newTalosctl(bin, c)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cp := nodeIP(t, c, "cp-1")
	ec, err := c.Etcd().Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer ec.Close()

	size, inUse := fragmentEtcd(ctx, t, ec, cli, cp)
	quota := inUse + (size-inUse)/2
	if err := c.Inject(ctx, "cp-1", sim.Fault{EtcdQuotaBytes: quota}); err != nil {
		t.Fatal(err)
	}
	member := etcd.FormatMemberID(c.Etcd().Member("cp-1").ID())

	mustContain(t, "etcd alarm list", tc.mustRun(t, "-n", cp, "etcd", "alarm", "list"), "MEMBER", "ALARM", member, "NOSPACE")
	mustContain(t, "get etcdspecs", tc.mustRun(t, "-n", cp, "get", "etcdspecs", "-o", "yaml"), "quota-backend-bytes", fmt.Sprint(quota))
	mustContain(t, "etcd alarm disarm over the quota", tc.mustRun(t, "-n", cp, "etcd", "alarm", "disarm"), member, "NOSPACE")
	mustContain(t, "etcd alarm list after a disarm over the quota", tc.mustRun(t, "-n", cp, "etcd", "alarm", "list"), "NOSPACE")

	tc.mustRun(t, "-n", cp, "etcd", "defrag")
	mustContain(t, "etcd alarm disarm after defrag", tc.mustRun(t, "-n", cp, "etcd", "alarm", "disarm"), "NOSPACE")
	if out := tc.mustRun(t, "-n", cp, "etcd", "alarm", "list"); strings.Contains(out, "NOSPACE") {
		t.Fatalf("etcd alarm list after defrag and disarm:\n%s", out)
	}
}
