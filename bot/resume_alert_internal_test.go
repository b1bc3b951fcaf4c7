package bot

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/talosbot/talosbot/bot/alertpause"
	"github.com/talosbot/talosbot/bot/engine"
	"github.com/talosbot/talosbot/state"
)

// resumeOps is the engine's side of a resume: the operation, and a Resume
// that refuses whoever is not in allowed.
type resumeOps struct {
	Operations
	op      *state.Operation
	allowed string
}

func (o *resumeOps) Operation(context.Context, string) (*state.Operation, error) { return o.op, nil }
func (o *resumeOps) Resume(_ context.Context, from engine.Origin, _ string) error {
	if from.User != o.allowed {
		return &engine.ActionError{Msg: from.User + " may not resume"}
	}
	return nil
}

// A refused `resume --ignore-alert NAME` takes back only what it added:
// when an earlier, allowed resume already ignores NAME, a refused one by
// someone else leaves it ignored (it used to delete it, so the roll paused
// again on an alert its operator had resumed past). A refused resume that
// added the name takes it back, and says so in the audit.
func TestRefusedIgnoreAlertKeepsEarlierIgnore(t *testing.T) {
	ctx := context.Background()
	st, err := state.Open(filepath.Join(t.TempDir(), "db"), state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	op := &state.Operation{ID: "op1", Cluster: "prod", Command: "upgrade talos", State: state.StateInterrupted}
	r := &Router{store: st, clock: time.Now, ops: &resumeOps{op: op, allowed: "alice"}}

	if err := r.resume(ctx, engine.Origin{User: "alice"}, op.ID, "EtcdNoSpace"); err != nil {
		t.Fatal(err)
	}
	if err := r.resume(ctx, engine.Origin{User: "carol"}, op.ID, "EtcdNoSpace"); err == nil {
		t.Fatal("carol's resume was not refused")
	}
	if err := r.resume(ctx, engine.Origin{User: "carol"}, op.ID, "DiskFull"); err == nil {
		t.Fatal("carol's resume was not refused")
	}
	names, err := alertpause.Ignored(ctx, st, op.ID)
	if err != nil || !slices.Equal(names, []string{"EtcdNoSpace"}) {
		t.Fatalf("ignored after a refused resume: %v %v; want [EtcdNoSpace]", names, err)
	}
	recs, err := st.QueryAudit(ctx, state.AuditQuery{OpID: op.ID, Action: "alert ignore withdrawn"})
	if err != nil || len(recs) != 1 || recs[0].Actor != "carol" || recs[0].Detail["alertname"] != "DiskFull" {
		t.Fatalf("withdrawals audited: %v %+v; want carol's DiskFull only", err, recs)
	}
}
