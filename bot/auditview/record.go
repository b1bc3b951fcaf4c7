package auditview

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/talosbot/talosbot/bot/chat"
	lifecyclev1 "github.com/talosbot/talosbot/plugins/sdk/proto/lifecycle/v1"
	"github.com/talosbot/talosbot/state"
)

// Record keys the maintenance record reads (operation args, artifact names
// with spaces and dashes as underscores, or audit details): they name kinds
// of evidence, never a plugin or a command. KeyCommit is the detail the Git
// follow-up (bot/gitbump) records.
const (
	KeyTerraformPlan = "terraform_plan"
	KeyGitCommit     = "git_commit"
	KeyCommit        = "commit"
)

// MaintenanceRecord renders the maintenance record of one operation (rule
// R22): requester and approvers, plan and digest, snapshot id and sha256,
// Terraform plan summary and Git commit where recorded, start and end, every
// step's result and the validation result. recs are the operation's audit
// records (any order); approvals are its stored approvals (may be empty: the
// audit trail keeps approvals of earlier, voided plans too).
func MaintenanceRecord(op *state.Operation, recs []state.AuditRecord, approvals []state.Approval) string {
	sort.Slice(recs, func(i, j int) bool { return recs[i].Seq < recs[j].Seq })
	var b strings.Builder
	env := ""
	if op.Environment != "" {
		env = " (" + op.Environment + ")"
	}
	fmt.Fprintf(&b, "*Maintenance record %s* — /talos %s · %s%s\n", op.ID, op.Command, op.Cluster, env)
	fmt.Fprintf(&b, "State: %s", op.State)
	if op.Result != "" {
		fmt.Fprintf(&b, " — %s", firstLine(op.Result))
	}
	b.WriteString("\n")
	if op.Error != "" {
		fmt.Fprintf(&b, "Error: %s\n", firstLine(op.Error))
	}
	fmt.Fprintf(&b, "Requested by: %s at %s", op.Requester, stamp(op.CreatedAt))
	if op.Text != "" {
		fmt.Fprintf(&b, " (`%s`)", op.Text)
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "Approved by: %s\n", approvers(op, recs, approvals))
	if len(op.Flags) > 0 {
		fmt.Fprintf(&b, "Flags: %s\n", strings.Join(op.Flags, ", "))
	}

	plan := decodePlan(op.Plan)
	switch {
	case op.Digest == "" && plan == nil:
		b.WriteString("Plan: none recorded (the operation never got a plan)\n")
	default:
		summary := plan.GetSummary()
		if summary == "" {
			summary = "(no summary)"
		}
		fmt.Fprintf(&b, "Plan: %s\n", summary)
		fmt.Fprintf(&b, "Plan digest: %s\n", orNone(op.Digest))
		if op.Target != "" {
			fmt.Fprintf(&b, "Target: %s\n", op.Target)
		}
		for _, p := range plan.GetPreconditions() {
			mark := "✅"
			if !p.GetOk() {
				mark = "❌"
			}
			rule := ""
			if p.GetRule() != "" {
				rule = " [" + p.GetRule() + "]"
			}
			fmt.Fprintf(&b, "  %s precondition %s%s: %s\n", mark, p.GetName(), rule, p.GetDetail())
		}
		for _, w := range plan.GetWarnings() {
			fmt.Fprintf(&b, "  ⚠️ %s\n", w)
		}
	}

	snaps := 0
	for _, a := range op.Artifacts {
		if a.SnapshotOf(op.Cluster) { // rule:R22
			snaps++
			fmt.Fprintf(&b, "Snapshot: %s sha256 %s (%d bytes", a.ID, orNone(a.SHA256), a.Size)
			if a.Location != "" {
				fmt.Fprintf(&b, ", %s", a.Location)
			}
			if a.Revision != 0 {
				fmt.Fprintf(&b, ", etcd revision %d", a.Revision)
			}
			b.WriteString(")\n")
		}
	}
	if snaps == 0 {
		b.WriteString("Snapshot: none taken by this operation\n")
	}
	for _, a := range op.Artifacts {
		if !a.SnapshotOf(op.Cluster) {
			fmt.Fprintf(&b, "Artifact: %s %s sha256 %s (%d bytes)\n", a.Name, a.ID, orNone(a.SHA256), a.Size)
		}
	}
	fmt.Fprintf(&b, "Terraform plan: %s\n", orDefault(lookup(op, recs, KeyTerraformPlan), "not recorded (no Terraform integration for this operation)"))
	fmt.Fprintf(&b, "Git commit: %s\n", orDefault(lookup(op, recs, KeyGitCommit, KeyCommit), "not recorded"))

	fmt.Fprintf(&b, "Started: %s\n", stamp(op.StartedAt))
	fmt.Fprintf(&b, "Ended: %s", stamp(op.EndedAt))
	if !op.StartedAt.IsZero() && !op.EndedAt.IsZero() {
		fmt.Fprintf(&b, " (took %s)", chat.Duration(op.EndedAt.Sub(op.StartedAt)))
	}
	b.WriteString("\n")
	if op.Attempts > 1 {
		fmt.Fprintf(&b, "Attempts: %d (resumed after an interruption)\n", op.Attempts)
	}

	// Every attempt's step results: the earlier ones from the history, the
	// last from the operation's steps.
	for _, a := range op.History {
		fmt.Fprintf(&b, "Steps, attempt %d (%s", a.N, orNone(a.End))
		if !a.StartedAt.IsZero() {
			fmt.Fprintf(&b, ", started %s", stamp(a.StartedAt))
		}
		b.WriteString("):\n")
		writeSteps(&b, a.Steps)
	}
	if len(op.Steps) > 0 {
		if len(op.History) > 0 {
			fmt.Fprintf(&b, "Steps, attempt %d (%s):\n", op.Attempts, op.State)
		} else {
			b.WriteString("Steps:\n")
		}
		writeSteps(&b, op.Steps)
	}
	fmt.Fprintf(&b, "Validation: %s\n", validation(op, plan))
	if len(recs) > 0 {
		fmt.Fprintf(&b, "Audit: %d records, seq %d–%d (`/talos audit --op_id %s`)", len(recs), recs[0].Seq, recs[len(recs)-1].Seq, op.ID)
	}
	return strings.TrimRight(b.String(), "\n")
}

func decodePlan(raw []byte) *lifecyclev1.OperationPlan {
	if len(raw) == 0 {
		return nil
	}
	var p lifecyclev1.OperationPlan
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(raw, &p); err != nil {
		return nil
	}
	return &p
}

// approvers lists who approved the plan that ran (the current digest), from
// the audit trail and the stored approvals.
func approvers(op *state.Operation, recs []state.AuditRecord, apps []state.Approval) string {
	at := map[string]time.Time{}
	for _, a := range apps {
		if a.Digest == op.Digest {
			at[a.User] = a.At
		}
	}
	policy := ""
	for _, r := range recs {
		switch {
		case r.Action == "approval" && r.Result == "ok" && r.Detail["digest"] == op.Digest:
			if _, ok := at[r.Actor]; !ok {
				at[r.Actor] = r.Time
			}
		case r.Action == "approved" && r.Detail["reason"] != "":
			policy = r.Detail["reason"]
		}
	}
	if len(at) == 0 {
		if policy != "" {
			return "nobody needed (" + policy + ")"
		}
		if !op.Disruptive {
			return "not needed (read-only)"
		}
		return "nobody"
	}
	users := make([]string, 0, len(at))
	for u := range at {
		users = append(users, u)
	}
	sort.Slice(users, func(i, j int) bool { return at[users[i]].Before(at[users[j]]) })
	parts := make([]string, 0, len(users))
	for _, u := range users {
		parts = append(parts, fmt.Sprintf("%s (%s)", u, stamp(at[u])))
	}
	return strings.Join(parts, ", ")
}

// lookup finds a value recorded under one of keys: operation args, artifact
// names, then audit details (newest wins). Plugins that integrate Terraform
// or Git record these there; absent means not recorded.
func lookup(op *state.Operation, recs []state.AuditRecord, keys ...string) string {
	for _, k := range keys {
		if v := op.Args[k]; v != "" {
			return v
		}
	}
	for _, a := range op.Artifacts {
		n := strings.ToLower(strings.NewReplacer(" ", "_", "-", "_").Replace(a.Name))
		for _, k := range keys {
			if n == k || strings.HasPrefix(n, k+"_") {
				return fmt.Sprintf("%s (sha256 %s, %s)", a.ID, orNone(a.SHA256), orDefault(a.Location, "no location"))
			}
		}
	}
	for i := len(recs) - 1; i >= 0; i-- {
		for _, k := range keys {
			if v := recs[i].Detail[k]; v != "" {
				return v
			}
		}
	}
	return ""
}

// validation summarises the checks after the work: the trailing steps of kind
// gate/verify/validate in the plan, or the whole plan when every step is a
// check (a health gate), or the last step when the plan has no kinds.
func validation(op *state.Operation, plan *lifecyclev1.OperationPlan) string {
	if len(op.Steps) == 0 {
		return "not run"
	}
	isCheck := func(kind string) bool { return kind == "gate" || kind == "verify" || kind == "validate" }
	kinds := map[string]string{}
	for _, s := range plan.GetSteps() {
		kinds[s.GetId()] = s.GetKind()
	}
	var checks []state.Step
	for i := len(op.Steps) - 1; i >= 0; i-- {
		if !isCheck(kinds[op.Steps[i].ID]) {
			break
		}
		checks = append([]state.Step{op.Steps[i]}, checks...)
	}
	if len(checks) == 0 {
		checks = op.Steps[len(op.Steps)-1:]
	}
	var failed, pending []string
	for _, s := range checks {
		switch s.Status {
		case "failed":
			failed = append(failed, s.Title)
		case "ok", "skipped":
		default:
			pending = append(pending, s.Title)
		}
	}
	switch {
	case len(failed) > 0:
		return fmt.Sprintf("failed (%d of %d checks): %s", len(failed), len(checks), strings.Join(failed, "; "))
	case len(pending) > 0:
		return fmt.Sprintf("not completed (%d of %d checks did not finish): %s", len(pending), len(checks), strings.Join(pending, "; "))
	}
	return fmt.Sprintf("passed (%d of %d checks)", len(checks), len(checks))
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.UTC().Format("2006-01-02 15:04:05 MST")
}

func orNone(s string) string { return orDefault(s, "none") }

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// writeSteps writes one attempt's step results.
func writeSteps(b *strings.Builder, steps []state.Step) {
	for _, s := range steps {
		// The same marker and word as the message and the thread: a
		// probe that could not run is "❔ not checked", not "⏭️ skipped".
		st, detail := chat.ShownStatus(s.Status, s.Detail)
		line := "  " + chat.StatusMark(st) + " " + s.Title
		if s.Node != "" && !strings.Contains(s.Title, s.Node) {
			line += " [" + s.Node + "]"
		}
		line += " — " + chat.StatusLabel(st)
		if detail != "" {
			line += ": " + firstLine(detail)
		}
		if d := s.EndedAt.Sub(s.StartedAt); !s.StartedAt.IsZero() && !s.EndedAt.IsZero() && d >= time.Second {
			line += " (" + chat.Duration(d) + ")"
		}
		b.WriteString(line + "\n")
	}
}
