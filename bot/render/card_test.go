package render_test

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/talosbot/talosbot/bot/chat"
	"github.com/talosbot/talosbot/bot/engine"
	"github.com/talosbot/talosbot/bot/render"
	"github.com/talosbot/talosbot/internal/rendertest"
	lifecyclev1 "github.com/talosbot/talosbot/plugins/sdk/proto/lifecycle/v1"
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
		"What: v1.12.6 → v1.13.9 on production · 34 step(s) and the installer image: see Details in the thread\n",
		"Order: worker-1 → worker-2 → cp-2 → cp-3 → cp-1\n",
		"\n⚠️ warning: worker-2 runs the only replica of deployment/ingress-nginx; it is unavailable while worker-2 drains\n",
		"✅ ok staging: 5f2c81d0a9e4 succeeded on staging 1 day 1 h ago",
		"✅ ok snapshot: a new one is taken first; newest 3 h ago (77aa01b2c3d4)",
		"❔ not checked gate: no health run on record",
		"\n✅ ok checks: upgrade path, installer platform and schematic",
	} {
		if !strings.Contains(m.Text, want) {
			t.Errorf("card lacks %q:\n%s", want, m.Text)
		}
	}
	if strings.Contains(m.Text, rendertest.Installer) || strings.Contains(m.Text, "Risks:") || strings.Contains(m.Text, "Evidence:") {
		t.Errorf("the installer image or a heading on the card:\n%s", m.Text)
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
	// Every node is pending at the same versions: the table would repeat
	// What and Order in six lines (it comes back when the run starts).
	if m.Table != nil {
		t.Errorf("node table on the approval card: %+v", m.Table)
	}
	if got := field(m, "State"); got != "awaiting approval" {
		t.Errorf("State = %q, want it in words", got)
	}
	d := render.Details(op)
	if !strings.Contains(d, "Details: the 34 steps of plan 3f6d2a9be01c") || !strings.Contains(d, "9. gate before: pods") ||
		!strings.Contains(d, "✅ ok upgrade path (R10): every node at v1.13.9 or one adjacent step below it") ||
		strings.Contains(d, "v1.13.9 v1.12.6") || strings.Count(d, rendertest.Installer) != 1 {
		t.Errorf("details:\n%s", d)
	}
	// No past runs: the estimate says so instead of guessing.
	f.Past = nil
	if got := field(render.Render(op, nil, f, rendertest.Now), "Estimated duration"); got != "no past runs here or on a cluster this size" {
		t.Errorf("estimate without past runs = %q", got)
	}
}

// TestApprovalCardFitsOneScreen: the demo's production card (issue 31: 40
// lines, Approve on the screen's edge) keeps to a few lines of text: the two
// "no kubeconfig" risks are one, a long risk is cut to its first clause, the
// passed checks are named on one line without rule codes or the node
// identity wall, and every risk and check is whole in Details.
func TestApprovalCardFitsOneScreen(t *testing.T) {
	op, f := rendertest.AwaitingDemo()
	m := render.Render(op, nil, f, rendertest.Now)
	if os.Getenv("RENDER_PRINT") != "" {
		t.Logf("%s\n%s", m.Title, m.Text)
	}
	if n := strings.Count(m.Text, "\n") + 1; n > 10 {
		t.Errorf("the card's text is %d lines, want at most 10 (the title, fields and buttons need the rest of 20):\n%s", n, m.Text)
	}
	if n := strings.Count(m.Text, "kubeconfig"); n != 1 {
		t.Errorf("the kubeconfig risk is shown %d times, want once (merged):\n%s", n, m.Text)
	}
	for _, want := range []string{
		"\n⚠️ warning: worker-2 runs the only replica of deployment/ingress-nginx; it is unavailable while worker-2 drains\n",
		"\n⚠️ warning: no kubeconfig: the gates cannot check Kubernetes and v1.13+ nodes are rebooted without a client-side drain\n",
		"\n✅ ok checks: upgrade path, installer platform and schematic, node identity, Kubernetes support",
	} {
		if !strings.Contains(m.Text, want) {
			t.Errorf("card lacks %q:\n%s", want, m.Text)
		}
	}
	for _, not := range []string{"R10", "R14", "R20", "hostname", "machine id"} {
		if strings.Contains(m.Text, not) {
			t.Errorf("card shows %q, which belongs in Details:\n%s", not, m.Text)
		}
	}
	d := render.Details(op)
	for _, want := range append(rendertest.DemoWarnings, "node identity (identity): worker-1: hostname", "Kubernetes support (R20): Talos v1.13.9 supports") {
		if !strings.Contains(d, want) {
			t.Errorf("Details lacks %q:\n%s", want, d)
		}
	}
	// More risks than the card shows are counted, and whole in Details.
	p := engine.DecodePlan(op.Plan)
	for i := range 5 {
		p.Warnings = append(p.Warnings, fmt.Sprintf("risk number %d of many", i))
	}
	op.Plan, _ = protojson.Marshal(p)
	m = render.Render(op, nil, f, rendertest.Now)
	if !strings.Contains(m.Text, "\n⚠️ and 4 more risk(s) in Details\n") || strings.Contains(m.Text, "risk number 1") {
		t.Errorf("card with 7 risks:\n%s", m.Text)
	}
	if !strings.Contains(render.Details(op), "risk number 4 of many") {
		t.Errorf("Details lacks the risks the card left out")
	}
	// A risk longer than a line is cut to its first clause on the card.
	p.Warnings = []string{strings.Repeat("word ", 40) + "; the rest"}
	op.Plan, _ = protojson.Marshal(p)
	if m = render.Render(op, nil, f, rendertest.Now); !strings.Contains(m.Text, "word word …\n") || strings.Contains(m.Text, "the rest") {
		t.Errorf("long risk on the card:\n%s", m.Text)
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

// TestRunWarningsShownOnTheCard (issue 31: "health gate passed, 1
// warning(s)" for four nodes, and the text nowhere): every warning a step
// reports is on the running card with its text, once per text naming its
// nodes, cut when long; past three they are counted.
func TestRunWarningsShownOnTheCard(t *testing.T) {
	op, f := rendertest.Running()
	pods := "⚠️ health gate passed, 1 warning(s): Pods: 3 pods (2 Running, 1 Pending); worst: kube-system/coredns-1 Pending"
	for i := range op.Steps {
		switch op.Steps[i].ID {
		case "worker-1/gate", "worker-2/gate":
			op.Steps[i].Detail = pods
		case "gate-before/pods":
			op.Steps[i].Detail = "⚠️ " + strings.Repeat("very long warning ", 12) + "end"
		}
	}
	m := render.Render(op, nil, f, rendertest.Now)
	for _, want := range []string{
		"\n⚠️ warning: worker-1, worker-2: health gate passed, 1 warning(s): Pods: 3 pods (2 Running, 1 Pending); worst: kube-system/coredns-1 Pending",
		"\n⚠️ warning: gate before: pods: very long warning",
	} {
		if !strings.Contains(m.Text, want) {
			t.Errorf("running card lacks %q:\n%s", want, m.Text)
		}
	}
	if strings.Count(m.Text, "coredns-1") != 1 || strings.Contains(m.Text, "warning end") {
		t.Errorf("a warning repeated or not cut:\n%s", m.Text)
	}
	for i, id := range []string{"cp-2/quorum-before", "gate-before/etcd", "gate-before/nodes"} {
		for j := range op.Steps {
			if op.Steps[j].ID == id {
				op.Steps[j].Detail = fmt.Sprintf("⚠️ warning number %d", i)
			}
		}
	}
	m = render.Render(op, nil, f, rendertest.Now)
	if !strings.Contains(m.Text, "⚠️ and 2 more warning(s): every one is in the thread") {
		t.Errorf("five warnings on the card:\n%s", m.Text)
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
	running := *op
	running.State = state.StateRunning // the node table is on the running message
	r := render.Render(&running, nil, f, rendertest.Now)
	if !strings.Contains(m.Text, "What: v1.13.10 → v1.13.9 on production") || r.Table.Rows[0][2] != "v1.13.10 → v1.13.9" {
		t.Errorf("rollback card:\n%s\n%+v", m.Text, r.Table)
	}
	f.Previous = nil
	m = render.Render(op, nil, f, rendertest.Now)
	r = render.Render(&running, nil, f, rendertest.Now)
	if !strings.Contains(m.Text, "What: v1.13.10 → previous version on production") || r.Table.Rows[0][2] != "v1.13.10 → previous version" || strings.Contains(m.Text, "→ previous version v1.13.10") {
		t.Errorf("rollback without a record:\n%s\n%+v", m.Text, r.Table)
	}
	if d := render.Details(op); strings.Contains(d, "previous version v1.13.10") || strings.Count(d, "→") != 1 {
		t.Errorf("details: %s", d)
	}
}
