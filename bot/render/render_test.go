package render

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/talosbot/talosbot/bot/chat"
	"github.com/talosbot/talosbot/bot/engine"
	"github.com/talosbot/talosbot/internal/rendertest"
	lifecyclev1 "github.com/talosbot/talosbot/plugins/sdk/proto/lifecycle/v1"
	"github.com/talosbot/talosbot/state"
)

// manualClock fires AfterFunc callbacks only when advanced.
type manualClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []manualTimer
}

type manualTimer struct {
	at time.Time
	f  func()
}

func (c *manualClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *manualClock) AfterFunc(d time.Duration, f func()) func() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.timers = append(c.timers, manualTimer{at: c.now.Add(d), f: f})
	return func() bool { return false }
}

func (c *manualClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	var due []func()
	kept := c.timers[:0]
	for _, t := range c.timers {
		if !t.at.After(c.now) {
			due = append(due, t.f)
		} else {
			kept = append(kept, t)
		}
	}
	c.timers = kept
	c.mu.Unlock()
	for _, f := range due {
		f()
	}
}

type countingAdapter struct {
	mu    sync.Mutex
	posts int
	edits []chat.Message
}

func (a *countingAdapter) Post(context.Context, string, string, chat.Message) (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.posts++
	return fmt.Sprintf("ref%d", a.posts), nil
}

func (a *countingAdapter) Edit(_ context.Context, _, _ string, m chat.Message) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.edits = append(a.edits, m)
	return nil
}

func TestRendererCoalescesEditsAndDeliversLatest(t *testing.T) {
	clock := &manualClock{now: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}
	ad := &countingAdapter{}
	r := NewRenderer(ad, clock, nil)
	ctx := context.Background()
	op := &state.Operation{ID: "op1", Command: "upgrade talos", Cluster: "production", Channel: "ops", State: state.StateRunning,
		Steps: []state.Step{{ID: "a", Title: "cp-1", Status: "pending"}, {ID: "b", Title: "cp-2", Status: "pending"}}}
	r.Operation(ctx, engine.Update{Op: op}) // first render posts
	for i := range 50 {                     // a burst of progress within one second
		o := *op
		o.Steps = []state.Step{{ID: "a", Title: "cp-1", Status: "ok", Detail: fmt.Sprint(i)}, {ID: "b", Title: "cp-2", Status: "running"}}
		r.Operation(ctx, engine.Update{Op: &o})
	}
	if ad.posts != 1 || len(ad.edits) != 0 {
		t.Fatalf("posts=%d edits=%d before the interval passed", ad.posts, len(ad.edits))
	}
	clock.Advance(MinEditInterval)
	if len(ad.edits) != 1 {
		t.Fatalf("edits = %d, want exactly 1 coalesced edit", len(ad.edits))
	}
	if got := ad.edits[0].Text; got != "▰▱ 1/2 steps\n✅ done cp-1 — 49\n⏳ running cp-2" {
		t.Fatalf("latest state not delivered: %q", got)
	}
	// Well after the interval, an update is sent at once.
	clock.Advance(5 * time.Second)
	final := *op
	final.State = state.StateSucceeded
	r.Operation(ctx, engine.Update{Op: &final})
	if len(ad.edits) != 2 || ad.edits[1].Title != "✅ succeeded · /talos upgrade talos · production" {
		t.Fatalf("final edit: %+v", ad.edits)
	}
}

func TestProgressBar(t *testing.T) {
	for _, c := range []struct {
		done, total int
		want        string
	}{{3, 5, "▰▰▰▱▱ 3/5"}, {0, 2, "▱▱ 0/2"}, {10, 20, "▰▰▰▰▰▱▱▱▱▱ 10/20"}} {
		if got := ProgressBar(c.done, c.total); got != c.want {
			t.Errorf("ProgressBar(%d,%d) = %q, want %q", c.done, c.total, got, c.want)
		}
	}
}

func TestResultLinesRepeatingStepDetailsAreDropped(t *testing.T) {
	op := &state.Operation{Command: "health", Cluster: "staging", State: state.StateSucceeded,
		Steps:  []state.Step{{ID: "v", Title: "Talos version", Status: "ok", Detail: "v1.12.6 on all 2 nodes"}},
		Result: "staging: health gate passed\n✅ Talos version: v1.12.6 on all 2 nodes\nmanifest sync is not done"}
	got := RenderOperation(op, nil, time.Now()).Text
	want := "▰ 1/1 steps\n✅ done Talos version — v1.12.6 on all 2 nodes\nstaging: health gate passed\nmanifest sync is not done"
	if got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
}

func TestRendererForgetsFinishedOperations(t *testing.T) {
	clock := &manualClock{now: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}
	r := NewRenderer(&countingAdapter{}, clock, nil)
	op := &state.Operation{ID: "op1", Command: "health", Cluster: "staging", Channel: "ops", State: state.StateSucceeded}
	r.Operation(context.Background(), engine.Update{Op: op})
	clock.Advance(forgetAfter - time.Second)
	r.mu.Lock()
	kept := len(r.ops)
	r.mu.Unlock()
	clock.Advance(2 * time.Second)
	r.mu.Lock()
	left := len(r.ops)
	r.mu.Unlock()
	if kept != 1 || left != 0 {
		t.Fatalf("views kept=%d then left=%d, want 1 then 0", kept, left)
	}
}

// flakyAdapter fails the first failEdits edits (all of them when negative).
type flakyAdapter struct {
	countingAdapter
	failEdits int
	attempts  int
}

func (a *flakyAdapter) Edit(ctx context.Context, ch, ref string, m chat.Message) error {
	a.mu.Lock()
	a.attempts++
	fail := a.failEdits < 0 || a.attempts <= a.failEdits
	a.mu.Unlock()
	if fail {
		return fmt.Errorf("chat API: 503")
	}
	return a.countingAdapter.Edit(ctx, ch, ref, m)
}

func TestRendererRetriesAFailedFinalEdit(t *testing.T) {
	clock := &manualClock{now: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}
	ad := &flakyAdapter{failEdits: 2}
	r := NewRenderer(ad, clock, nil)
	ctx := context.Background()
	op := &state.Operation{ID: "op1", Command: "upgrade talos", Cluster: "production", Channel: "ops", State: state.StateRunning}
	r.Operation(ctx, engine.Update{Op: op}) // posts
	clock.Advance(5 * time.Second)
	final := *op
	final.State = state.StateSucceeded
	r.Operation(ctx, engine.Update{Op: &final}) // edit fails (1)
	if ad.attempts != 1 || len(ad.edits) != 0 {
		t.Fatalf("attempts=%d edits=%d after the first try", ad.attempts, len(ad.edits))
	}
	clock.Advance(MinEditInterval) // retry fails (2)
	clock.Advance(2 * MinEditInterval)
	if ad.attempts != 3 || len(ad.edits) != 1 || ad.edits[0].Title != "✅ succeeded · /talos upgrade talos · production" {
		t.Fatalf("attempts=%d edits=%+v, want the final state delivered by the third attempt", ad.attempts, ad.edits)
	}
	clock.Advance(ageEvery)
	if ad.attempts != 3 {
		t.Fatalf("attempts=%d after success, want no more", ad.attempts)
	}
}

func TestRendererGivesUpAfterBoundedEditRetries(t *testing.T) {
	clock := &manualClock{now: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}
	ad := &flakyAdapter{failEdits: -1}
	r := NewRenderer(ad, clock, nil)
	ctx := context.Background()
	op := &state.Operation{ID: "op1", Command: "health", Cluster: "staging", Channel: "ops", State: state.StateRunning}
	r.Operation(ctx, engine.Update{Op: op})
	clock.Advance(5 * time.Second)
	final := *op
	final.State = state.StateFailed
	r.Operation(ctx, engine.Update{Op: &final})
	for range 10 {
		clock.Advance(ageEvery)
	}
	if ad.attempts != maxEditRetries+1 {
		t.Fatalf("attempts=%d, want %d (one try and %d retries)", ad.attempts, maxEditRetries+1, maxEditRetries)
	}
}

// The facts read the store; a burst of progress must not read it once per
// event, only once per edit, and the edit must show the newest update.
func TestRendererReadsFactsOncePerEdit(t *testing.T) {
	clock := &manualClock{now: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}
	ad := &countingAdapter{}
	r := NewRenderer(ad, clock, nil)
	ctx := context.Background()
	var mu sync.Mutex
	reads := 0
	facts := func(context.Context) *engine.Facts {
		mu.Lock()
		defer mu.Unlock()
		reads++
		return &engine.Facts{Now: clock.Now()}
	}
	op := &state.Operation{ID: "op1", Command: "upgrade talos", Cluster: "production", Channel: "ops", State: state.StateRunning,
		Steps: []state.Step{{ID: "a", Title: "cp-1", Status: "running"}}}
	for i := range 10 {
		o := *op
		o.Steps = []state.Step{{ID: "a", Title: "cp-1", Status: "running", Detail: fmt.Sprint("event ", i)}}
		r.Operation(ctx, engine.Update{Op: &o, Facts: facts})
	}
	clock.Advance(MinEditInterval)
	mu.Lock()
	got := reads
	mu.Unlock()
	if got > 2 {
		t.Fatalf("facts read %d times for 10 updates in one interval, want at most 2", got)
	}
	if ad.posts != 1 || len(ad.edits) != 1 {
		t.Fatalf("posts=%d edits=%d, want the post and one coalesced edit", ad.posts, len(ad.edits))
	}
	if want := "▱ 0/1 steps\n⏳ running cp-1 — event 9"; ad.edits[0].Text != want {
		t.Fatalf("edit shows %q, want the last update %q", ad.edits[0].Text, want)
	}
}

// A refusal shows as refused, emoji and label alike: a record in the
// refused state, and one written before that state existed (failed with
// the flag "refused"), which stays in the store as it was.
func TestRefusedOperationsRenderAsRefused(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for name, op := range map[string]*state.Operation{
		"refused state":          {ID: "op1", Command: "roll", Cluster: "production", State: state.StateRefused, Error: "R6"},
		"old failed and flagged": {ID: "op1", Command: "roll", Cluster: "production", State: state.StateFailed, Flags: []string{"refused"}, Error: "R6"},
	} {
		if got, want := Render(op, nil, nil, now).Title, "⛔ refused · /talos roll · production"; got != want {
			t.Errorf("%s: title %q, want %q", name, got, want)
		}
		if got := StateLabel(op); got != "refused" {
			t.Errorf("%s: label %q, want refused", name, got)
		}
	}
	failed := &state.Operation{ID: "op1", Command: "roll", Cluster: "production", State: state.StateFailed, Flags: []string{"skip-staging"}}
	if got, want := Render(failed, nil, nil, now).Title, "❌ failed · /talos roll · production"; got != want {
		t.Errorf("failed: title %q, want %q", got, want)
	}
}

// TestMarksSayWhatHappened: a step that did not run is never ✅, and
// skipped, not checked and unknown each have their own marker and word,
// the detail without the word repeated (issue 31). The record
// (bot/auditview) and the thread use the same chat.ShownStatus.
func TestMarksSayWhatHappened(t *testing.T) {
	op := &state.Operation{Command: "health", Cluster: "staging", State: state.StateSucceeded,
		Steps: []state.Step{
			{ID: "v", Title: "Talos version", Status: "ok", Detail: "v1.13.9 on all 4 nodes"},
			{ID: "pods", Title: "Pods", Status: "skipped", Detail: "not checked: no Kubernetes API (no kubeconfig for this cluster)"},
			{ID: "offsite", Title: "off-site copy", Status: "skipped", Detail: "⚠️ no off-site storage configured (snapshots.offsite): the only copy is on the bot's disk"},
			{ID: "k", Title: "Kubernetes version", Status: "skipped", Detail: "unknown: no kubeconfig"},
			{ID: "p", Title: "later", Status: "pending"},
		}}
	got := RenderOperation(op, nil, time.Now()).Text
	want := "▰▰▰▰▱ 4/5 steps\n" +
		"✅ done Talos version — v1.13.9 on all 4 nodes\n" +
		"❔ not checked Pods — no Kubernetes API (no kubeconfig for this cluster)\n" +
		"⏭️ skipped off-site copy — ⚠️ no off-site storage configured (snapshots.offsite): the only copy is on the bot's disk\n" +
		"❓ unknown Kubernetes version — no kubeconfig\n" +
		chat.StatusMark("pending") + " pending later"
	if got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
}

// TestEveryCountHasANoun: "snapshot: done 5" and "gate after: pending 8"
// said nothing; each count names what it counts, in the phases of a roll
// and in the bar of an operation without nodes (issue 31).
func TestEveryCountHasANoun(t *testing.T) {
	op, f := rendertest.Running()
	text := Render(op, nil, f, rendertest.Now).Text
	for _, want := range []string{"\nsnapshot: ✅ 5 steps done\n", "\ngate before: ✅ 5 probes done, ❔ 1 probe not checked\n", "\ngate after: ⬜ 6 probes pending"} {
		if !strings.Contains(text, want) {
			t.Errorf("running message lacks %q:\n%s", want, text)
		}
	}
	raw, _ := protojson.Marshal(&lifecyclev1.OperationPlan{Steps: []*lifecyclev1.Step{{Id: "pods", Kind: "gate"}, {Id: "flux", Kind: "gate"}}})
	health := &state.Operation{Command: "health", Cluster: "staging", State: state.StateRunning, Plan: raw,
		Steps: []state.Step{{ID: "pods", Title: "Pods", Status: "ok"}, {ID: "flux", Title: "Flux", Status: "running"}}}
	if got := RenderOperation(health, nil, rendertest.Now).Text; !strings.HasPrefix(got, "▰▱ 1/2 probes\n") {
		t.Errorf("health bar without its noun:\n%s", got)
	}
}

// TestOneNodeRunsAtATime: in a one-at-a-time roll only the node being
// worked on is "running": a node with its image pulled (every node pulls
// before the first cordon) and its upgrade ahead is pending (issue 31).
func TestOneNodeRunsAtATime(t *testing.T) {
	t0 := rendertest.Now.Add(-10 * time.Minute)
	raw, _ := protojson.Marshal(&lifecyclev1.OperationPlan{Steps: []*lifecyclev1.Step{
		{Id: "w-1/pull", Node: "w-1", FromVersion: "v1.12.6", ToVersion: "v1.13.9"}, {Id: "w-2/pull", Node: "w-2", FromVersion: "v1.12.6", ToVersion: "v1.13.9"},
		{Id: "w-1/upgrade", Node: "w-1"}, {Id: "w-1/gate", Node: "w-1"}, {Id: "w-2/upgrade", Node: "w-2"}, {Id: "w-2/gate", Node: "w-2"}}})
	op := &state.Operation{Command: "upgrade talos", Cluster: "staging", State: state.StateRunning, Plan: raw, StartedAt: t0,
		Steps: []state.Step{
			{ID: "w-1/pull", Node: "w-1", Status: "ok", StartedAt: t0, EndedAt: t0.Add(time.Minute)},
			{ID: "w-2/pull", Node: "w-2", Status: "ok", StartedAt: t0, EndedAt: t0.Add(time.Minute)},
			{ID: "w-1/upgrade", Node: "w-1", Status: "ok", StartedAt: t0.Add(time.Minute), EndedAt: t0.Add(4 * time.Minute)},
			{ID: "w-1/gate", Node: "w-1", Status: "pending"},
			{ID: "w-2/upgrade", Node: "w-2", Status: "pending"}, {ID: "w-2/gate", Node: "w-2", Status: "pending"},
		}}
	states := func() map[string]string {
		out := map[string]string{}
		for _, r := range Render(op, nil, nil, rendertest.Now).Table.Rows {
			out[r[0]] = r[3]
		}
		return out
	}
	// Between w-1's upgrade and its gate: w-1 runs, w-2 waits.
	if got := states(); got["w-1"] != mark("running") || got["w-2"] != mark("pending") {
		t.Errorf("between w-1's steps: %v", got)
	}
	// w-1 done, w-2 upgrading: only w-2 runs.
	op.Steps[3] = state.Step{ID: "w-1/gate", Node: "w-1", Status: "ok", StartedAt: t0.Add(4 * time.Minute), EndedAt: t0.Add(5 * time.Minute)}
	op.Steps[4] = state.Step{ID: "w-2/upgrade", Node: "w-2", Status: "running", StartedAt: t0.Add(5 * time.Minute)}
	if got := states(); got["w-1"] != mark("ok") || got["w-2"] != mark("running") {
		t.Errorf("w-2 upgrading: %v", got)
	}
}

// TestRelativeTimesAge: "Approved by bob (just now…)" and "Elapsed" moved
// only when the engine sent an update, and a long step sends none: the
// message of an operation that has not ended is rendered again every
// ageEvery, and no more once it ended (issue 31).
func TestRelativeTimesAge(t *testing.T) {
	clock := &manualClock{now: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}
	ad := &countingAdapter{}
	r := NewRenderer(ad, clock, nil)
	start := clock.Now()
	op := &state.Operation{ID: "op1", Command: "health", Cluster: "staging", Channel: "ops", State: state.StateRunning, StartedAt: start}
	facts := func(context.Context) *engine.Facts {
		return &engine.Facts{Now: clock.Now(), Approvals: []state.Approval{{User: "bob", At: start}}}
	}
	r.Operation(context.Background(), engine.Update{Op: op, Facts: facts})
	clock.Advance(3 * time.Minute) // a quiet step: no update from the engine
	field := func() (approved, elapsed string) {
		ad.mu.Lock()
		defer ad.mu.Unlock()
		if len(ad.edits) == 0 {
			return "", ""
		}
		for _, f := range ad.edits[len(ad.edits)-1].Fields {
			switch f.Label {
			case "Approved by":
				approved = f.Value
			case "Elapsed":
				elapsed = f.Value
			}
		}
		return approved, elapsed
	}
	for range 3 {
		clock.Advance(ageEvery)
	}
	approved, elapsed := field()
	if !strings.HasPrefix(approved, "bob (6 min ago") || elapsed != "6 min" {
		t.Fatalf("after 6 min without an update: Approved by %q, Elapsed %q", approved, elapsed)
	}
	done := *op
	done.State, done.EndedAt = state.StateSucceeded, clock.Now()
	r.Operation(context.Background(), engine.Update{Op: &done})
	clock.Advance(MinEditInterval)
	ad.mu.Lock()
	n := len(ad.edits)
	ad.mu.Unlock()
	for range 5 {
		clock.Advance(ageEvery)
	}
	ad.mu.Lock()
	defer ad.mu.Unlock()
	if len(ad.edits) != n {
		t.Fatalf("an ended operation was rendered again: %d edits, then %d", n, len(ad.edits))
	}
}

// TestElapsedUnderASecond: a health gate that answered within a second
// said "Elapsed 0 s", as if nothing ran (issue 31).
func TestElapsedUnderASecond(t *testing.T) {
	t0 := rendertest.Now
	op := &state.Operation{Command: "health", Cluster: "staging", State: state.StateSucceeded, StartedAt: t0, EndedAt: t0.Add(400 * time.Millisecond)}
	for _, f := range RenderOperation(op, nil, t0).Fields {
		if f.Label == "Elapsed" && f.Value != "under 1 s" {
			t.Fatalf("Elapsed = %q", f.Value)
		}
	}
}

// TestETASaysWhereItsRunsCameFrom: runs of another cluster with as many
// nodes stand in for this cluster's, and the ETA names that cluster.
func TestETASaysWhereItsRunsCameFrom(t *testing.T) {
	op, f := rendertest.Running()
	f.PastFrom = []string{"staging"}
	for _, fl := range Render(op, nil, f, rendertest.Now).Fields {
		if fl.Label == "ETA" && !strings.HasSuffix(fl.Value, "past node run(s) on staging, which has as many nodes)") {
			t.Fatalf("ETA = %q", fl.Value)
		}
	}
}

// TestEachNodeListedOnce: the finished roll's table shows each node; the
// plugin's per-node result lines ("✅ w-1 v1.12.6 → v1.13.9") listed them a
// second time below it. Other result lines stay (issue 31).
func TestEachNodeListedOnce(t *testing.T) {
	raw, _ := protojson.Marshal(&lifecyclev1.OperationPlan{Steps: []*lifecyclev1.Step{
		{Id: "w-1/upgrade", Node: "w-1", FromVersion: "v1.12.6", ToVersion: "v1.13.9"}, {Id: "w-2/upgrade", Node: "w-2", FromVersion: "v1.13.9", ToVersion: "v1.13.9"}}})
	op := &state.Operation{Command: "upgrade talos", Cluster: "staging", State: state.StateSucceeded, Plan: raw,
		Steps:  []state.Step{{ID: "w-1/upgrade", Node: "w-1", Status: "ok"}, {ID: "w-2/upgrade", Node: "w-2", Status: "skipped"}},
		Result: "staging: every node at v1.13.9\n💾 snapshot staging/x (verified)\n⏭️ w-2 already at v1.13.9\n✅ w-1 v1.12.6 → v1.13.9\n🩺 w-1: health gate passed"}
	m := Render(op, nil, nil, rendertest.Now)
	if strings.Contains(m.Text, "✅ w-1 v1.12.6") || strings.Contains(m.Text, "⏭️ w-2 already") ||
		!strings.Contains(m.Text, "💾 snapshot staging/x") || !strings.Contains(m.Text, "🩺 w-1: health gate passed") || len(m.Table.Rows) != 2 {
		t.Fatalf("text:\n%s", m.Text)
	}
}

// TestEveryWarningIsShownWhereCounted: a phase named only its first
// warning; each warning's text is on the phase's line (issue 31).
func TestEveryWarningIsShownWhereCounted(t *testing.T) {
	op, f := rendertest.Running()
	for i, s := range op.Steps {
		switch s.ID {
		case "gate-before/pods":
			op.Steps[i].Detail = "⚠️ 2 pods Pending in default"
		case "gate-before/etcd":
			op.Steps[i].Detail = "⚠️ budget web allows 0 disruptions"
		}
	}
	text := Render(op, nil, f, rendertest.Now).Text
	// Shown once each, by the card's warning lines (stepWarnings), with the phase that reported it.
	if !strings.Contains(text, "⚠️ warning: gate before: pods: 2 pods Pending in default") || !strings.Contains(text, "⚠️ warning: gate before: etcd: budget web allows 0 disruptions") {
		t.Fatalf("a warning's text is missing:\n%s", text)
	}
}
