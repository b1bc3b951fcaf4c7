package schedule

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/talosbot/talosbot/bot/grammar"
	"github.com/talosbot/talosbot/config"
	lifecyclev1 "github.com/talosbot/talosbot/plugins/sdk/proto/lifecycle/v1"
	"github.com/talosbot/talosbot/state"
)

const maintenanceCfg = `
clusters:
  - name: prod
    environment: production
    channels: [stg]
    endpoints: [127.0.0.1]
    nodes: [{name: cp-1, address: 127.0.0.1, role: controlplane, host: pve1}]
    credentials: {source: files, talosconfig: file:/etc/talosconfig}
policy:
  production:
    operators: [alice]
    approvers: [bob]
    no_approval_commands: [etcd defrag]
    maintenance_windows: [{days: [sun], start: "02:00", end: "05:00", timezone: UTC}]
maintenance_schedule: {prod: "0 * * * *"}
`

// withMaintenance is the catalogue plus a maintenance command (as etcdops
// declares its defrag) and a disruptive command that is not one.
func withMaintenance() []grammar.CommandSpec {
	cluster := []*lifecyclev1.Arg{{Name: "cluster"}}
	return append(catalogue("snapshot", "restore-drill"),
		grammar.CommandSpec{Plugin: "etcdops", Command: &lifecyclev1.Command{Name: "etcd defrag", Effect: lifecyclev1.Effect_EFFECT_DISRUPTIVE, Maintenance: true, Args: cluster}},
		grammar.CommandSpec{Plugin: "nr", Command: &lifecyclev1.Command{Name: "node remove", Effect: lifecyclev1.Effect_EFFECT_DISRUPTIVE, Args: cluster}})
}

// maintenance_schedule runs the manifests' maintenance commands (the etcd
// defrag, never another disruptive command) at the cron times inside the
// maintenance window; a time outside it, or a cluster locked by another
// operation, is skipped and said once per due run, and audited. The clock
// is injected: each Tick is one due time.
func TestMaintenanceScheduleRunsInTheWindowOnly(t *testing.T) {
	sat := time.Date(2026, 12, 5, 23, 30, 0, 0, time.UTC) // Saturday 23:30
	cfg, err := config.Parse([]byte(maintenanceCfg))
	if err != nil {
		t.Fatal(err)
	}
	st, err := state.Open(filepath.Join(t.TempDir(), "db"), state.Options{Clock: func() time.Time { return sat }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	rec := &recorder{}
	s, err := New(context.Background(), Options{Config: cfg, Store: st, Commands: withMaintenance(), Submit: rec.Submit, Say: rec.Say, Now: func() time.Time { return sat }})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Jobs()) != 1 || s.Jobs()[0].Text != "/talos etcd defrag prod" {
		t.Fatalf("jobs %+v: want the defrag only", s.Jobs())
	}
	ctx := context.Background()
	at := func(h int) time.Time { return time.Date(2026, 12, 6, h, 0, 0, 0, time.UTC) } // Sunday

	// 00:00 and 01:00: outside the window, skipped and said, once each.
	s.Tick(ctx, at(0))
	s.Tick(ctx, at(0).Add(30*time.Minute)) // not due: nothing more
	s.Tick(ctx, at(1))
	if len(rec.submit) != 0 || len(rec.said) != 2 || !strings.Contains(rec.said[0], "stg: ⏭️ scheduled /talos etcd defrag prod skipped: Sun 00:00 UTC is outside the maintenance window (sun 02:00–05:00 UTC); next run 2026-12-06T01:00:00Z") {
		t.Fatalf("outside the window: submitted %v, said %v", rec.submit, rec.said)
	}
	// 02:00: inside, submitted as the scheduler.
	s.Tick(ctx, at(2))
	if strings.Join(rec.submit, ",") != "/talos etcd defrag prod" {
		t.Fatalf("in the window: submitted %v", rec.submit)
	}
	// 03:00 while another operation holds the lock: skipped, said once.
	if err := st.Update(ctx, func(tx *state.Tx) error {
		return tx.AcquireLock(state.Lock{Cluster: "prod", OpID: "op-7", Holder: "alice", Command: "upgrade talos", Since: at(2)})
	}); err != nil {
		t.Fatal(err)
	}
	s.Tick(ctx, at(3))
	s.Tick(ctx, at(3).Add(time.Minute))
	if len(rec.submit) != 1 || len(rec.said) != 3 || !strings.Contains(rec.said[2], "skipped: op-7 holds the prod lock (upgrade talos by alice)") {
		t.Fatalf("locked: submitted %v, said %v", rec.submit, rec.said)
	}
	recs, err := st.QueryAudit(ctx, state.AuditQuery{Action: "schedule skipped"})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3 || recs[2].Detail["reason"] != "outside the maintenance window" || recs[2].Command != "etcd defrag" || recs[0].Detail["holder_op"] != "op-7" { // newest first
		t.Fatalf("skip records %+v", recs)
	}
}

// A maintenance schedule needs a window to run in and an existing cluster;
// a bad cron is named.
func TestMaintenanceScheduleValidation(t *testing.T) {
	for _, c := range []struct{ cfg, want string }{
		{strings.Replace(maintenanceCfg, `    maintenance_windows: [{days: [sun], start: "02:00", end: "05:00", timezone: UTC}]
`, "", 1), "maintenance_schedule.prod: the production environment of prod has no maintenance_windows"},
		{strings.Replace(maintenanceCfg, `{prod: "0 * * * *"}`, `{nope: "0 * * * *"}`, 1), `maintenance_schedule.nope: no cluster is named "nope"`},
		{strings.Replace(maintenanceCfg, `{prod: "0 * * * *"}`, `{prod: "every hour"}`, 1), `maintenance_schedule.prod: "every hour" is not a cron expression`},
	} {
		if _, err := config.Parse([]byte(c.cfg)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("config error %v, want %q", err, c.want)
		}
	}
}
