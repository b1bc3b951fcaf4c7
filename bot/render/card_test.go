package render_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/talosbot/talosbot/bot/chat"
	"github.com/talosbot/talosbot/bot/engine"
	"github.com/talosbot/talosbot/bot/render"
	"github.com/talosbot/talosbot/internal/rendertest"
	lifecyclev1 "github.com/talosbot/talosbot/plugins/proto/lifecycle/v1"
	"github.com/talosbot/talosbot/state"
)

func field(m chat.Message, label string) string {
	for _, f := range m.Fields {
		if f.Label == label {
			return f.Value
		}
	}
	return ""
}

func TestApprovalCard(t *testing.T) {
	op, f := rendertest.Awaiting()
	m := render.Render(op, nil, f, rendertest.Now)
	if os.Getenv("RENDER_PRINT") != "" {
		t.Logf("%s\n%s\n%s\n%+v", m.Title, m.Text, m.Table.Markdown(), m.Fields)
	}
	for _, want := range []string{
		"What: v1.12.6 → v1.13.9 on production\n",
		"Order: worker-1 → worker-2 → cp-2 → cp-3 → cp-1",
		"Risks:\n• ⚠️ warning: worker-2 runs the only replica",
		"✅ ok staging: 5f2c81d0a9e4 succeeded on staging 1 day 1 h ago",
		"✅ ok snapshot: a new one is taken first; newest 3 h ago (77aa01b2c3d4)",
		"❔ not checked gate: no health run on record",
		"✅ ok upgrade path (R10)",
		"see Details in the thread",
	} {
		if !strings.Contains(m.Text, want) {
			t.Errorf("card lacks %q:\n%s", want, m.Text)
		}
	}
	if n := strings.Count(m.Text, rendertest.Installer); n != 1 {
		t.Errorf("installer image shown %d times, want once", n)
	}
	if strings.Contains(m.Text, "v1.12.6 → v1.13.9 v1.12.6") || strings.Contains(m.Text, "1. snapshot") {
		t.Errorf("doubled transition or the step list on the card:\n%s", m.Text)
	}
	if m.Title != "🕒 awaiting approval · /talos upgrade talos · production" {
		t.Errorf("title %q", m.Title)
	}
	for label, want := range map[string]string{
		"Approvals":          "0/2 — may approve: bob, dave",
		"Expires":            "in 30 min, 2026-12-01 08:31 UTC",
		"Estimated duration": "about 25 min (5 node(s) × 5 min per node, median of 2 past run(s))",
	} {
		if got := field(m, label); got != want {
			t.Errorf("%s = %q, want %q", label, got, want)
		}
	}
	if m.Table == nil || len(m.Table.Rows) != 5 || strings.Join(m.Table.Rows[2], "|") != "cp-2|controlplane|v1.12.6 → v1.13.9|⬜ pending|—" {
		t.Fatalf("node table %+v", m.Table)
	}
	d := render.Details(op)
	if !strings.Contains(d, "Details: the 34 steps of plan 3f6d2a9be01c") || !strings.Contains(d, "9. gate before: pods") ||
		strings.Contains(d, "v1.13.9 v1.12.6") || strings.Contains(d, rendertest.Installer) {
		t.Errorf("details:\n%s", d)
	}
	// No past runs: the estimate says so instead of guessing.
	f.Past = nil
	if got := field(render.Render(op, nil, f, rendertest.Now), "Estimated duration"); got != "no past runs of this command on this cluster or on one with as many nodes" {
		t.Errorf("estimate without past runs = %q", got)
	}
}

func TestRunningUpgrade(t *testing.T) {
	op, f := rendertest.Running()
	m := render.Render(op, nil, f, rendertest.Now)
	if os.Getenv("RENDER_PRINT") != "" {
		t.Logf("%s\n%s\n%s\n%+v", m.Title, m.Text, m.Table.Markdown(), m.Fields)
	}
	for _, want := range []string{"v1.12.6 → v1.13.9 on production\n▰▰▱▱▱ 2/5 nodes\nsnapshot: ✅ 5 steps done\ngate before: ✅ 5 probes done, ❔ 1 probe not checked\n"} {
		if !strings.Contains(m.Text, want) {
			t.Errorf("running message lacks %q:\n%s", want, m.Text)
		}
	}
	rows := map[string]string{}
	for _, r := range m.Table.Rows {
		rows[r[0]] = strings.Join(r[1:], "|")
	}
	if rows["worker-1"] != "worker|v1.12.6 → v1.13.9|✅ done|4 min" || rows["cp-2"] != "controlplane|v1.12.6 → v1.13.9|⏳ running|3 min" || rows["cp-1"] != "controlplane|v1.12.6 → v1.13.9|⬜ pending|—" {
		t.Errorf("rows %v", rows)
	}
	if got := field(m, "ETA"); got != "about 12 min (5 min per node, from 10 past node run(s))" {
		t.Errorf("ETA = %q", got)
	}
	if got := field(m, "Approved by"); !strings.Contains(got, "bob (13 min ago, 2026-12-01 07:48 UTC)") || !strings.Contains(got, "dave") {
		t.Errorf("Approved by = %q", got)
	}
	if got := field(m, "Elapsed"); got != "11 min" {
		t.Errorf("Elapsed = %q", got)
	}
}

func TestDurationInWords(t *testing.T) {
	for d, want := range map[time.Duration]string{
		336 * time.Hour: "14 days", 27 * time.Hour: "1 day 3 h", 90 * time.Minute: "1 h 30 min", 12 * time.Minute: "12 min",
		40*time.Second + 300*time.Millisecond: "40 s", 2 * time.Hour: "2 h",
	} {
		if got := render.Duration(d); got != want {
			t.Errorf("Duration(%s) = %q, want %q", d, got, want)
		}
	}
}

// A rollback names the version it goes back to, once, and says "previous
// version" only when no record names it; the arrow is never empty.
func TestRollbackNamesItsTarget(t *testing.T) {
	raw, _ := protojson.Marshal(&lifecyclev1.OperationPlan{Summary: "Roll worker-1 of production back from v1.13.10 to its previous Talos version",
		Steps: []*lifecyclev1.Step{{Id: "rollback", Title: "worker-1: v1.13.10 → previous version", Node: "worker-1", FromVersion: "v1.13.10", Kind: "rollback"}}})
	op := &state.Operation{ID: "r1", Cluster: "production", Environment: "production", Command: "rollback", Disruptive: true,
		State: state.StateAwaitingApproval, Plan: raw, Digest: "abcdef012345", Steps: []state.Step{{ID: "rollback", Title: "worker-1: v1.13.10 → previous version", Node: "worker-1", Status: "pending"}}}
	f := &engine.Facts{Now: rendertest.Now, Required: 1, Approvers: []string{"bob"}, Previous: map[string]string{"worker-1": "v1.13.9"}}
	m := render.Render(op, nil, f, rendertest.Now)
	if !strings.Contains(m.Text, "What: v1.13.10 → v1.13.9 on production") || m.Table.Rows[0][2] != "v1.13.10 → v1.13.9" {
		t.Errorf("rollback card:\n%s\n%+v", m.Text, m.Table)
	}
	f.Previous = nil
	m = render.Render(op, nil, f, rendertest.Now)
	if m.Table.Rows[0][2] != "v1.13.10 → previous version" || strings.Contains(m.Text, "→ previous version v1.13.10") {
		t.Errorf("rollback without a record:\n%s\n%+v", m.Text, m.Table)
	}
	if d := render.Details(op); strings.Contains(d, "previous version v1.13.10") || strings.Count(d, "→") != 1 {
		t.Errorf("details: %s", d)
	}
}
