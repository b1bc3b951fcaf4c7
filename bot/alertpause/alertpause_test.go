package alertpause

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/talosbot/talosbot/bot/engine"
	"github.com/talosbot/talosbot/bot/silence"
	"github.com/talosbot/talosbot/config"
	"github.com/talosbot/talosbot/state"
)

// fakeAM answers the check with alerts or an error (this package's unit
// tests only; the real Alertmanager is in cmd/talosbot's e2e test).
type fakeAM struct {
	alerts []silence.Alert
	err    error
	asked  [][]silence.Matcher
}

func (f *fakeAM) Alerts(_ context.Context, ms []silence.Matcher) ([]silence.Alert, error) {
	f.asked = append(f.asked, ms)
	return f.alerts, f.err
}
func (f *fakeAM) URL() string { return "http://am.test" }

type fakeHost struct {
	mu     sync.Mutex
	paused []string
	thread []string
	refuse error
}

func (h *fakeHost) PauseFor(_ context.Context, id, by string, why []string) error {
	if h.refuse != nil {
		return h.refuse
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.paused = append(h.paused, by+": "+strings.Join(why, "\n"))
	return nil
}

type threadSink struct{ h *fakeHost }

func (threadSink) Reply(context.Context, engine.Origin, string)                         {}
func (threadSink) ReplyButtons(context.Context, engine.Origin, string, []engine.Button) {}
func (threadSink) Operation(context.Context, engine.Update)                             {}
func (s threadSink) Thread(_ context.Context, _ *state.Operation, text string) {
	s.h.mu.Lock()
	s.h.thread = append(s.h.thread, text)
	s.h.mu.Unlock()
}

func alert(name, state string, silencedBy ...string) silence.Alert {
	a := silence.Alert{Labels: map[string]string{"alertname": name, "cluster": "prod", "severity": "critical"},
		Annotations: map[string]string{"summary": name + " summary"}, StartsAt: time.Date(2026, 12, 3, 10, 2, 0, 0, time.UTC)}
	a.Status.State, a.Status.SilencedBy = state, silencedBy
	return a
}

func newChecker(t *testing.T, am *fakeAM, cfg config.AlertPause) (*Checker, *fakeHost, *state.Store, *state.Operation) {
	t.Helper()
	st, err := state.Open(filepath.Join(t.TempDir(), "db"), state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	c := &config.Config{AlertPause: cfg}
	c.AlertPause.Every = config.Duration(time.Hour) // the poller never fires in these tests
	if cfg.OnUnreachable == "" {
		c.AlertPause.OnUnreachable = config.AlertPauseOnUnreachablePause
	}
	if len(cfg.Matchers) == 0 {
		c.AlertPause.Matchers = config.DefaultAlertPauseMatchers
	}
	h := &fakeHost{}
	ck, err := New(Options{Config: &c.AlertPause, ClusterLabel: "cluster", Store: st, Client: am, Sink: threadSink{h},
		OwnSilence: func(context.Context, string) string { return "own-silence" }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ck.Close)
	ck.SetHost(h)
	return ck, h, st, &state.Operation{ID: "op1", Cluster: "prod", Command: "upgrade talos", Disruptive: true, State: state.StateRunning}
}

// A critical alert pauses the run; the query is scoped to the cluster and
// the configured matchers; alerts inside the operation's own silence are
// listed apart and do not count; --ignore-alert leaves a name out.
func TestCriticalAlertPausesOwnListedApartIgnoredLeftOut(t *testing.T) {
	am := &fakeAM{alerts: []silence.Alert{alert("KubeNodeNotReady", "suppressed", "own-silence"), alert("EtcdNoSpace", "active"),
		alert("MutedByHuman", "suppressed", "someone-elses")}}
	ck, h, st, op := newChecker(t, am, config.AlertPause{})
	if _, err := ck.RunStarting(context.Background(), op); err != nil {
		t.Fatal(err)
	}
	if got := matcherText(am.asked[0]); got != `cluster="prod" severity="critical"` {
		t.Fatalf("asked with %s", got)
	}
	if len(h.paused) != 1 {
		t.Fatalf("pauses %v", h.paused)
	}
	for _, want := range []string{"alertmanager: 🚨 alert EtcdNoSpace (severity=critical) firing since 2026-12-03 10:02 UTC: EtcdNoSpace summary",
		"inside this operation's own silence (not counted): KubeNodeNotReady", "--ignore-alert EtcdNoSpace"} {
		if !strings.Contains(h.paused[0], want) {
			t.Fatalf("pause text lacks %q:\n%s", want, h.paused[0])
		}
	}
	if strings.Contains(h.paused[0], "MutedByHuman") {
		t.Fatalf("an alert someone silenced counted:\n%s", h.paused[0])
	}

	// Resumed past EtcdNoSpace: nothing else counts, so no pause.
	if _, err := Ignore(context.Background(), st, op, "EtcdNoSpace", "alice", time.Now()); err != nil {
		t.Fatal(err)
	}
	ck.stopPoller(op.ID)
	if _, err := ck.RunStarting(context.Background(), op); err != nil || len(h.paused) != 1 {
		t.Fatalf("after --ignore-alert: err %v, pauses %d", err, len(h.paused))
	}
	recs, err := st.QueryAudit(context.Background(), state.AuditQuery{OpID: op.ID, Action: "alert ignored"})
	if err != nil || len(recs) != 1 || recs[0].Actor != "alice" || recs[0].Detail["alertname"] != "EtcdNoSpace" {
		t.Fatalf("audit of the ignore: %v %+v", err, recs)
	}
}

// count_silenced makes the operation's own alerts pause the run too.
func TestCountSilencedCountsOwnAlerts(t *testing.T) {
	am := &fakeAM{alerts: []silence.Alert{alert("KubeNodeNotReady", "suppressed", "own-silence")}}
	ck, h, _, op := newChecker(t, am, config.AlertPause{CountSilenced: true})
	_, _ = ck.RunStarting(context.Background(), op)
	if len(h.paused) != 1 || !strings.Contains(h.paused[0], "counted, as alert_pause.count_silenced is set") {
		t.Fatalf("pauses %v", h.paused)
	}
}

// Alertmanager unreachable: the default pauses and says so; "continue" goes
// on, audited, with one thread line however often it fails.
func TestUnreachablePausesByDefaultContinueIsAudited(t *testing.T) {
	am := &fakeAM{err: errors.New("connection refused")}
	ck, h, _, op := newChecker(t, am, config.AlertPause{})
	_, _ = ck.RunStarting(context.Background(), op)
	if len(h.paused) != 1 || !strings.Contains(h.paused[0], "could not ask Alertmanager at http://am.test") || !strings.Contains(h.paused[0], "on_unreachable: continue") {
		t.Fatalf("pauses %v", h.paused)
	}

	ck, h, st, op := newChecker(t, am, config.AlertPause{OnUnreachable: config.AlertPauseOnUnreachableContinue})
	for range 3 {
		ck.check(context.Background(), op)
	}
	if len(h.paused) != 0 || len(h.thread) != 1 || !strings.Contains(h.thread[0], "going on") {
		t.Fatalf("pauses %v, thread %v", h.paused, h.thread)
	}
	recs, err := st.QueryAudit(context.Background(), state.AuditQuery{OpID: op.ID, Action: "alert check skipped"})
	if err != nil || len(recs) != 3 {
		t.Fatalf("audit: %v, %d records", err, len(recs))
	}
}

// A run whose plugin cannot pause is warned about once, not paused.
func TestNotPausableWarnsOnce(t *testing.T) {
	am := &fakeAM{alerts: []silence.Alert{alert("EtcdNoSpace", "active")}}
	ck, h, _, op := newChecker(t, am, config.AlertPause{})
	h.refuse = engine.ErrNotPausable
	for range 2 {
		ck.check(context.Background(), op)
	}
	if len(h.thread) != 1 || !strings.Contains(h.thread[0], "cannot pause between nodes") {
		t.Fatalf("thread %v", h.thread)
	}
}

func matcherText(ms []silence.Matcher) string {
	var parts []string
	for _, m := range ms {
		parts = append(parts, m.String())
	}
	return strings.Join(parts, " ")
}

func TestParseLabelMatcher(t *testing.T) {
	for in, want := range map[string]string{`severity="critical"`: `severity="critical"`, `team!~"db|infra"`: `team!~"db|infra"`, `a=b`: `a="b"`} {
		m, err := config.ParseLabelMatcher(in)
		if err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		if got := (silence.Matcher{Name: m.Name, Value: m.Value, IsRegex: m.IsRegex, IsEqual: m.IsEqual}).String(); got != want {
			t.Fatalf("%s: %s", in, got)
		}
	}
	for _, bad := range []string{`severity`, `1x="a"`, `a=~"("`} {
		if _, err := config.ParseLabelMatcher(bad); err == nil {
			t.Fatalf("%s parsed", bad)
		}
	}
}

// Only "suppressed" (someone's silence, an inhibition) is muted: an alert
// Alertmanager has not processed yet, or one whose state is missing or
// unknown, still pauses the roll instead of letting it go on.
func TestUnprocessedOrUnknownStatePauses(t *testing.T) {
	for _, st := range []string{"unprocessed", "", "firing"} {
		v := Judge([]silence.Alert{alert("EtcdNoSpace", st)}, "own-silence", nil, false)
		if len(v.Pausing) != 1 {
			t.Errorf("state %q: pausing %d, want 1", st, len(v.Pausing))
		}
	}
	if v := Judge([]silence.Alert{alert("Muted", "suppressed", "someone-elses")}, "own-silence", nil, false); len(v.Pausing) != 0 {
		t.Errorf("a suppressed alert paused: %+v", v.Pausing)
	}
}

// The check records what a pause named, for --ignore-alert: the alerts of
// the last pause, none after a pause on an unreachable Alertmanager, and
// nothing once the run ends.
func TestPauseRecordsWhatIgnoreMayName(t *testing.T) {
	ctx := context.Background()
	am := &fakeAM{alerts: []silence.Alert{alert("EtcdNoSpace", "active"), alert("DiskFull", "active")}}
	ck, _, st, op := newChecker(t, am, config.AlertPause{})
	ck.check(ctx, op)
	if _, err := Ignore(ctx, st, op, "Diskfull", "alice", time.Now()); !errors.Is(err, ErrNotPausedOn) || !strings.Contains(err.Error(), "EtcdNoSpace, DiskFull") {
		t.Fatalf("ignore of a name in another case: %v", err)
	}
	if added, err := Ignore(ctx, st, op, "DiskFull", "alice", time.Now()); err != nil || !added {
		t.Fatalf("ignore of an alert the run paused on: %v %v", added, err)
	}
	am.alerts, am.err = nil, errors.New("connection refused")
	ck.check(ctx, op)
	if _, err := Ignore(ctx, st, op, "EtcdNoSpace", "alice", time.Now()); !errors.Is(err, ErrNotPausedOn) || !strings.Contains(err.Error(), "not paused by an alert") {
		t.Fatalf("ignore after a pause on an unreachable Alertmanager: %v", err)
	}
	ck.RunEnded(ctx, op, engine.RunOutput{})
	if raw, err := st.LoadKV(ctx, PausedBucket, op.ID); err != nil || raw != nil {
		t.Fatalf("the pause's alerts outlived the run: %q %v", raw, err)
	}
}

// A poller that was stopped (its run ended) and exits after the next run of
// the same operation started its own leaves that one running: its exit
// used to stop whatever poller the operation had by then, so the resumed
// roll was no longer checked while it ran.
func TestStoppedPollerLeavesTheNextOneRunning(t *testing.T) {
	ck, _, _, op := newChecker(t, &fakeAM{}, config.AlertPause{})
	ck.startPoller(op.ID)
	ck.stopPoller(op.ID) // the first poller exits in the background
	ck.startPoller(op.ID)
	done := make(chan struct{})
	go func() { ck.wg.Wait(); close(done) }()
	select {
	case <-done:
		t.Fatal("the second poller stopped with the first")
	case <-time.After(200 * time.Millisecond):
	}
	ck.mu.Lock()
	_, running := ck.pollers[op.ID]
	ck.mu.Unlock()
	if !running {
		t.Fatal("the operation has no poller after the second start")
	}
}
