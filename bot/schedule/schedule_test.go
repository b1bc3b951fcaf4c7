package schedule

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/talosbot/talosbot/bot/engine"
	"github.com/talosbot/talosbot/bot/grammar"
	"github.com/talosbot/talosbot/config"
	lifecyclev1 "github.com/talosbot/talosbot/plugins/sdk/proto/lifecycle/v1"
	"github.com/talosbot/talosbot/state"
)

const cfgText = `
clusters:
  - name: staging
    environment: staging
    channels: [stg]
    endpoints: [127.0.0.1]
    nodes: [{name: cp-1, address: 127.0.0.1, role: controlplane, host: pve1}]
    credentials: {source: files, talosconfig: file:/etc/talosconfig}
policy:
  staging: {operators: ["*"]}
snapshots:
  schedule: {staging: "0 * * * *"}
  drill_schedule: {staging: "off"}
`

// catalogue is a command catalogue like the built-in one: the scheduler
// finds its commands in it by what the manifests declare.
func catalogue(snapshot, drill string) []grammar.CommandSpec {
	cluster := []*lifecyclev1.Arg{{Name: "cluster"}}
	return []grammar.CommandSpec{
		{Command: &lifecyclev1.Command{Name: "status", Args: cluster}},
		{Plugin: "up", Command: &lifecyclev1.Command{Name: "upgrade talos", Effect: lifecyclev1.Effect_EFFECT_DISRUPTIVE, NeedsSnapshot: true,
			Drill: lifecyclev1.Drill_DRILL_TALOS_UPGRADE, Args: []*lifecyclev1.Arg{{Name: "version", Required: true}, {Name: "cluster"}}}},
		{Plugin: "snap", Command: &lifecyclev1.Command{Name: snapshot, Effect: lifecyclev1.Effect_EFFECT_WRITE, NeedsSnapshot: true, Args: cluster}},
		{Plugin: "snap", Command: &lifecyclev1.Command{Name: drill, Effect: lifecyclev1.Effect_EFFECT_WRITE, ReadsSnapshot: true,
			Drill: lifecyclev1.Drill_DRILL_ETCD_RESTORE, Args: append(cluster, &lifecyclev1.Arg{Name: "snapshot"})}},
		{Plugin: "snap", Command: &lifecyclev1.Command{Name: "snapshots", ReadsSnapshot: true, Args: cluster}},
	}
}

// recorder stands in for the engine: this package's unit tests only check
// what the scheduler asks for (the engine's side is tested in bot).
type recorder struct {
	mu     sync.Mutex
	submit []string
	said   []string
}

func (r *recorder) Submit(_ context.Context, from engine.Origin, text string) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !from.System || from.User != User || from.Channel != "stg" {
		return "", nil
	}
	r.submit = append(r.submit, text)
	return "op-x", nil
}

func (r *recorder) Say(_ context.Context, to engine.Origin, text string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.said = append(r.said, to.Channel+": "+text)
}

func setup(t *testing.T, now time.Time, prepare func(tx *state.Tx) error) (*Scheduler, *recorder, *state.Store) {
	t.Helper()
	cfg, err := config.Parse([]byte(cfgText))
	if err != nil {
		t.Fatal(err)
	}
	st, err := state.Open(filepath.Join(t.TempDir(), "db"), state.Options{Clock: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if prepare != nil {
		if err := st.Update(context.Background(), prepare); err != nil {
			t.Fatal(err)
		}
	}
	rec := &recorder{}
	s, err := New(context.Background(), Options{Config: cfg, Store: st, Commands: catalogue("snapshot", "restore-drill"), Submit: rec.Submit, Say: rec.Say, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	return s, rec, st
}

func TestMissedScheduleRunsOnceAfterRestart(t *testing.T) {
	now := time.Date(2026, 3, 1, 13, 30, 0, 0, time.UTC)
	// The last scheduled snapshot ran at 10:00; the bot was down for the
	// 11:00, 12:00 and 13:00 runs.
	s, rec, _ := setup(t, now, func(tx *state.Tx) error {
		return tx.PutOperation(&state.Operation{ID: "op-1", Cluster: "staging", Environment: "staging", Command: "snapshot",
			Requester: User, State: state.StatePlanned, CreatedAt: now.Add(-3*time.Hour - 30*time.Minute)})
	})
	if len(s.Jobs()) != 1 || !s.Jobs()[0].Next().Equal(now) {
		t.Fatalf("jobs %v: want the snapshot job due now", s.Jobs())
	}
	s.Tick(context.Background(), now)
	s.Tick(context.Background(), now.Add(time.Minute))
	s.Tick(context.Background(), now.Add(29*time.Minute))
	if strings.Join(rec.submit, ",") != "/talos snapshot staging" {
		t.Fatalf("submitted %v, want one catch-up run", rec.submit)
	}
	s.Tick(context.Background(), now.Add(30*time.Minute)) // 14:00
	if len(rec.submit) != 2 {
		t.Fatalf("submitted %v, want the 14:00 run too", rec.submit)
	}
}

func TestNeverRunStartsAtTheNextSlot(t *testing.T) {
	now := time.Date(2026, 3, 1, 13, 30, 0, 0, time.UTC)
	s, rec, _ := setup(t, now, nil)
	if got := s.Jobs()[0].Next(); !got.Equal(time.Date(2026, 3, 1, 14, 0, 0, 0, time.UTC)) {
		t.Fatalf("next = %v", got)
	}
	s.Tick(context.Background(), now)
	if len(rec.submit) != 0 {
		t.Fatalf("ran before its time: %v", rec.submit)
	}
}

func TestLockedClusterIsSkippedWithAMessage(t *testing.T) {
	now := time.Date(2026, 3, 1, 13, 0, 0, 0, time.UTC)
	s, rec, st := setup(t, now.Add(-30*time.Minute), func(tx *state.Tx) error {
		return tx.AcquireLock(state.Lock{Cluster: "staging", OpID: "op-9", Holder: "alice", Command: "upgrade talos", Since: now.Add(-time.Hour)})
	})
	out := s.Tick(context.Background(), now)
	if len(out) != 1 || out[0].Skipped == "" || len(rec.submit) != 0 {
		t.Fatalf("outcome %+v, submitted %v: want a skip", out, rec.submit)
	}
	if len(rec.said) != 1 || !strings.Contains(rec.said[0], "stg: ⏭️ scheduled /talos snapshot staging skipped: op-9 holds the staging lock (upgrade talos by alice)") {
		t.Fatalf("said %v", rec.said)
	}
	// The skip is audited too, at the scheduler's (injected) time, naming
	// the holder.
	recs, err := st.QueryAudit(context.Background(), state.AuditQuery{Action: "schedule skipped"})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 {
		t.Fatalf("audit records of the skip: %+v; want one", recs)
	}
	r := recs[0]
	if r.Actor != User || r.Cluster != "staging" || r.Command != "snapshot" || r.Result != "skipped" || !r.Time.Equal(now) ||
		r.Detail["holder_op"] != "op-9" || r.Detail["holder_command"] != "upgrade talos" || r.Detail["holder"] != "alice" ||
		r.Detail["text"] != "/talos snapshot staging" || r.Detail["next"] != "2026-03-01T14:00:00Z" || r.Detail["reason"] == "" {
		t.Fatalf("skip record %+v", r)
	}
	if out[0].Err != nil {
		t.Fatalf("outcome error %v", out[0].Err)
	}
}

// A skip whose audit record cannot be written (a read-only store) is an
// error of the tick, never only posted.
func TestSkipAuditFailureIsReported(t *testing.T) {
	now := time.Date(2026, 3, 1, 13, 0, 0, 0, time.UTC)
	cfg, err := config.Parse([]byte(cfgText))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "db")
	st, err := state.Open(path, state.Options{Clock: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	err = st.Update(context.Background(), func(tx *state.Tx) error {
		return tx.AcquireLock(state.Lock{Cluster: "staging", OpID: "op-9", Holder: "alice", Command: "upgrade talos", Since: now.Add(-time.Hour)})
	})
	if cerr := st.Close(); err != nil || cerr != nil {
		t.Fatal(err, cerr)
	}
	ro, err := state.Open(path, state.Options{ReadOnly: true, Clock: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	rec := &recorder{}
	s, err := New(context.Background(), Options{Config: cfg, Store: ro, Commands: catalogue("snapshot", "restore-drill"), Submit: rec.Submit, Say: rec.Say,
		Now: func() time.Time { return now.Add(-30 * time.Minute) }})
	if err != nil {
		t.Fatal(err)
	}
	out := s.Tick(context.Background(), now)
	if len(out) != 1 || out[0].Skipped == "" || out[0].Err == nil || !strings.Contains(out[0].Err.Error(), "audit the skipped /talos snapshot staging") {
		t.Fatalf("outcome %+v: want the skip with the audit error", out)
	}
	if len(rec.said) != 1 || len(rec.submit) != 0 {
		t.Fatalf("said %v, submitted %v: the skip is still posted, nothing run", rec.said, rec.submit)
	}
}

// The scheduler runs whatever commands the manifests declare for the roles,
// whatever their names, and refuses a schedule no command can serve.
func TestScheduledCommandsComeFromManifests(t *testing.T) {
	cfg, err := config.Parse([]byte(strings.Replace(cfgText, `  drill_schedule: {staging: "off"}`+"\n", "", 1)))
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := Jobs(cfg, catalogue("backup etcd", "prove-restore"))
	if err != nil {
		t.Fatal(err)
	}
	var texts []string
	for _, j := range jobs {
		texts = append(texts, j.Command+" = "+j.Text)
	}
	if strings.Join(texts, "; ") != "backup etcd = /talos backup etcd staging; prove-restore = /talos prove-restore staging" {
		t.Fatalf("jobs: %v", texts)
	}

	noSnap := catalogue("backup etcd", "prove-restore")[:2] // only the disruptive upgrade needs a snapshot
	if _, err := Jobs(cfg, noSnap); err == nil || !strings.Contains(err.Error(), "snapshots.schedule: no plugin command takes snapshots") {
		t.Fatalf("Jobs without a snapshot command = %v", err)
	}
	two := append(catalogue("backup etcd", "prove-restore"), grammar.CommandSpec{Plugin: "other",
		Command: &lifecyclev1.Command{Name: "dump", Effect: lifecyclev1.Effect_EFFECT_WRITE, NeedsSnapshot: true, Args: []*lifecyclev1.Arg{{Name: "cluster"}}}})
	// Two plugins declaring a role: both run, as both count as evidence.
	jobs, err = Jobs(cfg, two)
	texts = nil
	for _, j := range jobs {
		texts = append(texts, j.Text)
	}
	if err != nil || strings.Join(texts, "; ") != "/talos backup etcd staging; /talos dump staging; /talos prove-restore staging" {
		t.Fatalf("Jobs with two snapshot commands = %v, %v", texts, err)
	}
	// A command that cannot take the cluster is not scheduled beside one that can.
	mixed := append(catalogue("backup etcd", "prove-restore"), grammar.CommandSpec{Plugin: "other",
		Command: &lifecyclev1.Command{Name: "node drill", Effect: lifecyclev1.Effect_EFFECT_WRITE, Drill: lifecyclev1.Drill_DRILL_ETCD_RESTORE, Args: []*lifecyclev1.Arg{{Name: "node"}}}})
	if jobs, err := Jobs(cfg, mixed); err != nil || len(jobs) != 2 || jobs[1].Text != "/talos prove-restore staging" {
		t.Fatalf("Jobs with an unschedulable drill command beside a schedulable one = %v, %v", jobs, err)
	}
	noCluster := catalogue("backup etcd", "prove-restore")
	noCluster[2].Command.Args = []*lifecyclev1.Arg{{Name: "node"}}
	if _, err := Jobs(cfg, noCluster); err == nil || !strings.Contains(err.Error(), "does not take the cluster as its first argument") {
		t.Fatalf("Jobs with a command without a cluster argument = %v", err)
	}
	// Every schedule off: no command is needed.
	off, err := config.Parse([]byte(strings.Replace(cfgText, `schedule: {staging: "0 * * * *"}`, `schedule: {staging: "off"}`, 1)))
	if err != nil {
		t.Fatal(err)
	}
	if jobs, err := Jobs(off, nil); err != nil || len(jobs) != 0 {
		t.Fatalf("Jobs with every schedule off = %v, %v", jobs, err)
	}
}

func TestStagingGetsAWeeklyDrillByDefault(t *testing.T) {
	cfg, err := config.Parse([]byte(strings.Replace(cfgText, `  drill_schedule: {staging: "off"}`+"\n", "", 1)))
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := Jobs(cfg, catalogue("snapshot", "restore-drill"))
	if err != nil {
		t.Fatal(err)
	}
	var texts []string
	for _, j := range jobs {
		texts = append(texts, j.Text+" @ "+j.Spec)
	}
	if strings.Join(texts, "; ") != "/talos snapshot staging @ 0 * * * *; /talos restore-drill staging @ "+config.DefaultDrillSchedule {
		t.Fatalf("jobs: %v", texts)
	}
}
