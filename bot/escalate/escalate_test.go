package escalate

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/talosbot/talosbot/bot/engine"
	"github.com/talosbot/talosbot/config"
	"github.com/talosbot/talosbot/state"
)

type threadSink struct {
	mu    sync.Mutex
	lines []string
}

func (*threadSink) Reply(context.Context, engine.Origin, string)                         {}
func (*threadSink) ReplyButtons(context.Context, engine.Origin, string, []engine.Button) {}
func (*threadSink) Operation(context.Context, engine.Update)                             {}
func (s *threadSink) Thread(_ context.Context, op *state.Operation, text string) {
	s.mu.Lock()
	s.lines = append(s.lines, op.ID+": "+text)
	s.mu.Unlock()
}

var t0 = time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)

func setup(t *testing.T, extra string) (*Checker, *threadSink, *state.Store, *time.Time) {
	t.Helper()
	cfg, err := config.Parse([]byte(`
data_dir: /tmp/unused
clusters:
  - name: prod
    environment: production
    channels: [ops]
    endpoints: [10.0.0.1]
    nodes: [{name: cp-1, address: 10.0.0.1, role: controlplane, host: pve1}, {name: cp-2, address: 10.0.0.2, role: controlplane, host: pve1}]
    credentials: {source: files, talosconfig: "file:/dev/null"}
timeouts: {node: 20m}
policy:
  production: {operators: [alice], approvers: [bob, carol]}
` + extra))
	if err != nil {
		t.Fatal(err)
	}
	st, err := state.Open(filepath.Join(t.TempDir(), "db"), state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	now := t0
	sink := &threadSink{}
	c, err := New(Options{Config: cfg, Store: st, Sink: sink, Clock: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	return c, sink, st, &now
}

func put(t *testing.T, st *state.Store, op *state.Operation) {
	t.Helper()
	// A new operation starts planned; it reaches its state by transitions.
	to, steps, hist := op.State, op.Steps, op.History
	op.State, op.Steps, op.History = state.StatePlanned, nil, nil
	err := st.Update(context.Background(), func(tx *state.Tx) error {
		if err := tx.PutOperation(op); err != nil {
			return err
		}
		path := []state.OpState{state.StateRunning}
		if to != state.StateRunning {
			path = append(path, to)
		}
		for _, s := range path {
			if _, err := tx.Transition(op.ID, s, func(o *state.Operation) { o.Steps, o.History = steps, hist }); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A late step is announced once, then escalated once, with what it waits for
// and what it sees now; the expected time is the p95 of the past runs of the
// same step on the cluster (another node's included).
func TestLateStepAnnouncedOnceThenEscalated(t *testing.T) {
	c, sink, st, now := setup(t, "")
	var past []state.Step
	for i := range 20 {
		d := 4 * time.Minute
		if i == 19 {
			d = 30 * time.Minute // one outlier above the 95th percentile
		}
		start := t0.Add(-48*time.Hour + time.Duration(i)*time.Hour)
		past = append(past, state.Step{ID: "node/cp-1/upgrade", Node: "cp-1", Status: "ok", StartedAt: start, EndedAt: start.Add(d)})
	}
	put(t, st, &state.Operation{ID: "old", Cluster: "prod", State: state.StateSucceeded, CreatedAt: t0.Add(-49 * time.Hour), Steps: past[:10],
		History: []state.Attempt{{N: 1, Steps: past[10:]}}})
	put(t, st, &state.Operation{ID: "op1", Cluster: "prod", Environment: "production", State: state.StateRunning, Disruptive: true, Attempts: 1, CreatedAt: t0,
		Steps: []state.Step{{ID: "node/cp-2/upgrade", Title: "cp-2: upgrade", Node: "cp-2", Status: "running", Detail: "booted, not ready: kubelet", StartedAt: t0}}})

	check := func(at time.Duration) int {
		*now = t0.Add(at)
		n, err := c.Check(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := check(3 * time.Minute); n != 0 {
		t.Fatalf("notices before the expected 4m: %v", sink.lines)
	}
	if n := check(5 * time.Minute); n != 1 {
		t.Fatalf("notices at 5m: %d %v", n, sink.lines)
	}
	want := "op1: ⏳ cp-2: upgrade is late: running 5 min, expected 4 min (p95 of 20 past run(s) on this cluster); waiting for it to finish; now: booted, not ready: kubelet"
	if sink.lines[0] != want {
		t.Fatalf("notice\n%s\nwant\n%s", sink.lines[0], want)
	}
	for _, at := range []time.Duration{6 * time.Minute, 7 * time.Minute} {
		if n := check(at); n != 0 {
			t.Fatalf("repeated at %s: %v", at, sink.lines)
		}
	}
	if n := check(9 * time.Minute); n != 1 || !strings.Contains(sink.lines[1], "🔔 past twice the expected time, please look: @bob @carol") {
		t.Fatalf("escalation at 9m: %d %v", n, sink.lines)
	}
	if n := check(30 * time.Minute); n != 0 {
		t.Fatalf("escalation repeated: %v", sink.lines)
	}
	// /talos status's list still has it.
	late, err := LateSteps(context.Background(), c.o.Config, st, *now)
	if err != nil || len(late) != 1 || late[0].Op.ID != "op1" {
		t.Fatalf("late steps %v %+v", err, late)
	}
}

// No history: half the step's timeout; escalation.mention replaces the
// approvers; a step first seen past twice its time gets one notice only.
func TestNoHistoryHalfTimeoutAndMention(t *testing.T) {
	c, sink, st, now := setup(t, "escalation: {mention: ['@oncall']}\n")
	put(t, st, &state.Operation{ID: "op2", Cluster: "prod", State: state.StateRunning, Disruptive: true, Attempts: 1, CreatedAt: t0,
		Steps: []state.Step{{ID: "node/cp-1/upgrade", Node: "cp-1", Title: "cp-1: upgrade", Status: "running", StartedAt: t0}}})
	*now = t0.Add(9 * time.Minute)
	if n, _ := c.Check(context.Background()); n != 0 {
		t.Fatalf("before half the 20m node timeout: %v", sink.lines)
	}
	*now = t0.Add(21 * time.Minute)
	if n, _ := c.Check(context.Background()); n != 1 || !strings.Contains(sink.lines[0], "half the 20 min timeout") || !strings.Contains(sink.lines[0], "@oncall") {
		t.Fatalf("at 21m: %v", sink.lines)
	}
	if n, _ := c.Check(context.Background()); n != 0 {
		t.Fatalf("repeated: %v", sink.lines)
	}
}

func TestP95(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 100; i++ {
		ds = append(ds, time.Duration(i)*time.Second)
	}
	if got := P95(ds); got != 95*time.Second {
		t.Fatal(got)
	}
	if got := P95([]time.Duration{time.Minute}); got != time.Minute {
		t.Fatal(got)
	}
}

// A gate step is bounded by the gate timeout; a node's step by the node
// timeout, even when the node's name contains "gate" (it used to match the
// step id by substring, so gateway-1's upgrade got the gate's bound).
func TestTimeoutGateByIDPartNotNodeName(t *testing.T) {
	cfg := &config.Config{}
	cfg.Timeouts.Node = config.Duration(20 * time.Minute)
	cfg.Timeouts.GateAfter = config.Duration(3 * time.Minute)
	for _, c := range []struct {
		s    state.Step
		want time.Duration
	}{
		{state.Step{ID: "node/gateway-1/upgrade", Node: "gateway-1"}, 20 * time.Minute},
		{state.Step{ID: "node/gateway-1/gate", Node: "gateway-1"}, 3 * time.Minute},
		{state.Step{ID: "gate-after/k8s", Title: "gate after"}, 3 * time.Minute},
	} {
		if got := timeout(cfg, c.s); got != c.want {
			t.Errorf("%s: timeout %s, want %s", c.s.ID, got, c.want)
		}
	}
}

// The expected duration learns from the cluster's newest historyOps
// operations, not its whole past: 20 old slow runs beyond them no longer
// move the p95 of 200 recent quick ones.
func TestHistoryIsTheNewestOperationsOnly(t *testing.T) {
	_, _, st, _ := setup(t, "")
	for i := range historyOps + 20 {
		d := time.Minute
		if i < 20 {
			d = time.Hour // the oldest
		}
		start := t0.Add(-time.Duration(historyOps+21-i) * time.Hour)
		put(t, st, &state.Operation{ID: fmt.Sprintf("past%03d", i), Cluster: "prod", State: state.StateSucceeded, CreatedAt: start,
			Steps: []state.Step{{ID: "node/cp-1/upgrade", Node: "cp-1", Status: "ok", StartedAt: start, EndedAt: start.Add(d)}}})
	}
	var got []time.Duration
	err := st.View(context.Background(), func(tx *state.Tx) error {
		h, err := history(tx, "prod")
		got = h["node/*/upgrade"]
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != historyOps || P95(got) != time.Minute {
		t.Fatalf("history: %d runs, p95 %s; want %d runs, p95 1m", len(got), P95(got), historyOps)
	}
}

type mentionSink struct {
	threadSink
	mentions [][]string
}

func (s *mentionSink) ThreadMention(ctx context.Context, op *state.Operation, text string, users []string) {
	s.Thread(ctx, op, text)
	s.mu.Lock()
	s.mentions = append(s.mentions, users)
	s.mu.Unlock()
}

// With a sink that can mention (the renderer), the escalation pings the
// approvers as mentions, not as "@name" text (which every adapter escapes,
// so it pinged nobody); escalation.mention replaces them, its "@" dropped.
func TestEscalationMentionsApprovers(t *testing.T) {
	for _, c := range []struct {
		extra string
		want  string
	}{{"", "bob carol"}, {"escalation: {mention: ['@U0ONCALL']}\n", "U0ONCALL"}} {
		ch, _, st, now := setup(t, c.extra)
		sink := &mentionSink{}
		ch.o.Sink = sink
		put(t, st, &state.Operation{ID: "op3", Cluster: "prod", State: state.StateRunning, Disruptive: true, Attempts: 1, CreatedAt: t0,
			Steps: []state.Step{{ID: "node/cp-1/upgrade", Node: "cp-1", Title: "cp-1: upgrade", Status: "running", StartedAt: t0}}})
		*now = t0.Add(21 * time.Minute)
		if n, err := ch.Check(context.Background()); n != 1 || err != nil {
			t.Fatalf("check: %d %v", n, err)
		}
		if len(sink.mentions) != 1 || strings.Join(sink.mentions[0], " ") != c.want {
			t.Fatalf("mentions %v, want %s", sink.mentions, c.want)
		}
		if strings.Contains(sink.lines[0], "@") {
			t.Fatalf("names left in the text: %q", sink.lines[0])
		}
	}
}
