package schedule

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/talosbot/talosbot/bot"
	"github.com/talosbot/talosbot/config"
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

// recorder stands in for the engine: this package's unit tests only check
// what the scheduler asks for (the engine's side is tested in bot).
type recorder struct {
	mu     sync.Mutex
	submit []string
	said   []string
}

func (r *recorder) Submit(_ context.Context, from bot.Origin, text string) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !from.System || from.User != User || from.Channel != "stg" {
		return "", nil
	}
	r.submit = append(r.submit, text)
	return "op-x", nil
}

func (r *recorder) Say(_ context.Context, to bot.Origin, text string) {
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
	s, err := New(context.Background(), Options{Config: cfg, Store: st, Submit: rec.Submit, Say: rec.Say, Now: func() time.Time { return now }})
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
	s, rec, _ := setup(t, now.Add(-30*time.Minute), func(tx *state.Tx) error {
		return tx.AcquireLock(state.Lock{Cluster: "staging", OpID: "op-9", Holder: "alice", Command: "upgrade talos", Since: now.Add(-time.Hour)})
	})
	out := s.Tick(context.Background(), now)
	if len(out) != 1 || out[0].Skipped == "" || len(rec.submit) != 0 {
		t.Fatalf("outcome %+v, submitted %v: want a skip", out, rec.submit)
	}
	if len(rec.said) != 1 || !strings.Contains(rec.said[0], "stg: ⏭️ scheduled /talos snapshot staging skipped: op-9 holds the staging lock (upgrade talos by alice)") {
		t.Fatalf("said %v", rec.said)
	}
}

func TestStagingGetsAWeeklyDrillByDefault(t *testing.T) {
	cfg, err := config.Parse([]byte(strings.Replace(cfgText, `  drill_schedule: {staging: "off"}`+"\n", "", 1)))
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := Jobs(cfg)
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
