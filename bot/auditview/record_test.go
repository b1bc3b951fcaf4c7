package auditview_test

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/talosbot/talosbot/bot/auditview"
	"github.com/talosbot/talosbot/bot/grammar"
	lifecyclev1 "github.com/talosbot/talosbot/plugins/sdk/proto/lifecycle/v1"
	"github.com/talosbot/talosbot/state"
)

func TestMaintenanceRecordR22(t *testing.T) {
	t0 := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	plan, _ := protojson.Marshal(&lifecyclev1.OperationPlan{Summary: "upgrade Talos v1.12.6 → v1.13.9 on 5 nodes", Target: "v1.13.9",
		Steps: []*lifecyclev1.Step{
			{Id: "gate-before", Kind: "gate"}, {Id: "snap", Kind: "snapshot"}, {Id: "w-1", Kind: "upgrade"},
			{Id: "gate-after", Kind: "gate"}, {Id: "verify", Kind: "verify"},
		},
		Preconditions: []*lifecyclev1.Precondition{{Name: "adjacent minor", Ok: true, Rule: "R10", Detail: "v1.12 → v1.13"}},
		Warnings:      []string{"node w-2 is cordoned"}})
	op := &state.Operation{
		ID: "abc123", Cluster: "production", Environment: "production", Command: "upgrade talos", Text: "/talos upgrade talos v1.13.9",
		Disruptive: true, Requester: "alice", State: state.StateFailed, Digest: "d2", Plan: plan, Target: "v1.13.9",
		Result: "roll failed", Error: "cluster not healthy after the roll",
		Args: map[string]string{"version": "v1.13.9"},
		Steps: []state.Step{
			{ID: "gate-before", Title: "health gate (before)", Status: "ok"},
			{ID: "snap", Title: "etcd snapshot", Status: "ok"},
			{ID: "w-1", Title: "upgrade w-1", Node: "w-1", Status: "ok", Detail: "v1.12.6 → v1.13.9", StartedAt: t0.Add(2 * time.Minute), EndedAt: t0.Add(7 * time.Minute)},
			{ID: "gate-after", Title: "health gate (after)", Status: "failed", Detail: "etcd: no leader\nmore"},
			{ID: "verify", Title: "all nodes at target", Status: "ok"},
		},
		Artifacts: []state.Artifact{
			{ID: "production/snap-20260501", Name: "etcd snapshot", SHA256: "feedbeef", Size: 1234, Location: "/var/lib/talosbot/snapshots/x.db", Revision: 42},
			{ID: "tfplan-1", Name: "terraform plan", SHA256: "0a0b", Location: "/plans/1.json"},
		},
		CreatedAt: t0, StartedAt: t0.Add(time.Minute), EndedAt: t0.Add(10 * time.Minute), Attempts: 2,
	}
	recs := []state.AuditRecord{
		{Seq: 12, AuditEvent: state.AuditEvent{Actor: "dave", Action: "approval", Result: "ok", Time: t0.Add(30 * time.Second), Detail: map[string]string{"digest": "d2"}}},
		{Seq: 10, AuditEvent: state.AuditEvent{Actor: "bob", Action: "approval", Result: "ok", Time: t0, Detail: map[string]string{"digest": "d1"}}}, // voided plan
		{Seq: 11, AuditEvent: state.AuditEvent{Actor: "system", Action: "approvals voided", Time: t0}},
		{Seq: 13, AuditEvent: state.AuditEvent{Actor: "system", Action: "started", Time: t0.Add(time.Minute), Detail: map[string]string{"git_commit": "9f8e7d6"}}},
	}
	apps := []state.Approval{{OpID: "abc123", User: "erin", Digest: "d2", At: t0.Add(20 * time.Second)}}
	out := auditview.MaintenanceRecord(op, recs, apps)
	for _, want := range []string{
		"Maintenance record abc123", "upgrade talos · production (production)", "State: failed — roll failed", "Error: cluster not healthy",
		"Requested by: alice at 2026-05-01 10:00:00 UTC (`/talos upgrade talos v1.13.9`)",
		"Approved by: erin (2026-05-01 10:00:20 UTC), dave (2026-05-01 10:00:30 UTC)",
		"Plan: upgrade Talos v1.12.6 → v1.13.9 on 5 nodes", "Plan digest: d2", "✅ precondition adjacent minor [R10]", "⚠️ node w-2 is cordoned",
		"Snapshot: production/snap-20260501 sha256 feedbeef (1234 bytes, /var/lib/talosbot/snapshots/x.db, etcd revision 42)",
		"Terraform plan: tfplan-1 (sha256 0a0b, /plans/1.json)", "Git commit: 9f8e7d6",
		"Started: 2026-05-01 10:01:00 UTC", "Ended: 2026-05-01 10:10:00 UTC (took 9 min)", "Attempts: 2",
		"✅ upgrade w-1 — done: v1.12.6 → v1.13.9 (5 min)", "❌ health gate (after) — failed: etcd: no leader",
		"Validation: failed (1 of 2 checks): health gate (after)", "Audit: 4 records, seq 10–13",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("record lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "bob") {
		t.Errorf("an approval of a voided plan is listed:\n%s", out)
	}

	// A read-only operation that never planned.
	ro := &state.Operation{ID: "r1", Cluster: "staging", Command: "health", Requester: "carol", State: state.StateFailed, CreatedAt: t0}
	out = auditview.MaintenanceRecord(ro, nil, nil)
	for _, want := range []string{"Approved by: not needed (read-only)", "Plan: none recorded", "Snapshot: none taken", "Validation: not run", "Started: —"} {
		if !strings.Contains(out, want) {
			t.Errorf("read-only record lacks %q:\n%s", want, out)
		}
	}
}

func TestFilterArgsRoundTrip(t *testing.T) {
	now := time.Date(2026, 5, 8, 0, 0, 0, 0, time.UTC)
	in := map[string]string{"cluster": "production", "user": `o'brien "x"`, "op": "upgrade talos", "result": "failed", "since": "7d", "limit": "5", "before": "99"}
	q, err := auditview.ParseFilter(func(k string) string { return in[k] }, now, 10, 100)
	if err != nil {
		t.Fatal(err)
	}
	if !q.Since.Equal(now.Add(-7*24*time.Hour)) || q.Limit != 5 || q.BeforeSeq != 99 || q.Command != "upgrade talos" {
		t.Fatalf("query %+v", q)
	}
	args := auditview.FilterArgs(q)
	if !strings.Contains(args, `--op "upgrade talos"`) || !strings.Contains(args, "--since 2026-05-01T00:00:00Z") {
		t.Fatalf("args %s", args)
	}
	// The chat tokenizer reads the values back unchanged.
	toks, err := grammar.Tokenize(args)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for i := 0; i+1 < len(toks); i += 2 {
		got[strings.TrimPrefix(toks[i], "--")] = toks[i+1]
	}
	if got["user"] != in["user"] || got["op"] != "upgrade talos" || got["before"] != "99" {
		t.Fatalf("tokenized back: %q", got)
	}
}

// A snapshot is known by its id ("<cluster>/<file>", docs/BACKUPS.md), the
// rule retention protection uses too: not by the name a plugin gave it.
func TestMaintenanceRecordKnowsSnapshotsByID(t *testing.T) {
	op := &state.Operation{ID: "s1", Cluster: "staging", Command: "any", Requester: "carol", State: state.StateSucceeded,
		Artifacts: []state.Artifact{
			{ID: "staging/20260501T100000Z-cp-1", Name: "etcd backup", SHA256: "aa", Size: 64},
			{ID: "report-1", Name: "snapshot report", SHA256: "bb", Size: 8},
			{ID: "production/20260501T100000Z-cp-1", Name: "etcd snapshot", SHA256: "cc", Size: 64},
		}}
	out := auditview.MaintenanceRecord(op, nil, nil)
	for _, want := range []string{
		"Snapshot: staging/20260501T100000Z-cp-1 sha256 aa (64 bytes)",
		"Artifact: snapshot report report-1 sha256 bb (8 bytes)",
		"Artifact: etcd snapshot production/20260501T100000Z-cp-1 sha256 cc (64 bytes)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("record lacks %q:\n%s", want, out)
		}
	}
}

// The audit heading shows --since to the second; the "more" page keeps the
// exact window.
func TestDescribeFilterHasNoNanoseconds(t *testing.T) {
	q := state.AuditQuery{Since: time.Date(2026, 11, 30, 8, 31, 2, 123456789, time.UTC)}
	if got := auditview.DescribeFilter(q); got != "--since 2026-11-30T08:31:02Z" {
		t.Errorf("DescribeFilter = %q", got)
	}
	if got := auditview.FilterArgs(q); got != "--since 2026-11-30T08:31:02.123456789Z" {
		t.Errorf("FilterArgs = %q", got)
	}
}

// TestRecordMarksAsTheMessageDoes: a probe that could not run is
// "❔ not checked" in the record as in the message and the thread, not
// "⏭️ skipped"; a plain skip stays a skip (issue 31).
func TestRecordMarksAsTheMessageDoes(t *testing.T) {
	t0 := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	op := &state.Operation{ID: "h1", Cluster: "staging", Command: "health", Requester: "carol", State: state.StateSucceeded, CreatedAt: t0,
		Steps: []state.Step{
			{ID: "pods", Title: "Pods", Status: "skipped", Detail: "not checked: no Kubernetes API (no kubeconfig for this cluster)"},
			{ID: "w-1", Title: "upgrade w-1", Status: "skipped", Detail: "already at v1.13.9"},
		}}
	out := auditview.MaintenanceRecord(op, nil, nil)
	for _, want := range []string{"❔ Pods — not checked: no Kubernetes API (no kubeconfig for this cluster)", "⏭️ upgrade w-1 — skipped: already at v1.13.9"} {
		if !strings.Contains(out, want) {
			t.Errorf("record lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "⏭️ Pods") {
		t.Errorf("a probe that did not run is shown as skipped:\n%s", out)
	}
}
