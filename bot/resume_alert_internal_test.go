package bot

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/talosbot/talosbot/bot/alertpause"
	"github.com/talosbot/talosbot/bot/engine"
	"github.com/talosbot/talosbot/bot/grammar"
	lifecyclev1 "github.com/talosbot/talosbot/plugins/sdk/proto/lifecycle/v1"
	"github.com/talosbot/talosbot/state"
)

// resumeOps is the engine's side of a resume: the operation, and a Resume
// that refuses whoever is not in allowed.
type resumeOps struct {
	Operations
	op      *state.Operation
	allowed string
	refused []string
}

func (o *resumeOps) Refuse(_ context.Context, _ engine.Origin, _ string, _ *grammar.Invocation, err error) {
	o.refused = append(o.refused, err.Error())
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
	pausedOn(t, st, op.ID, "EtcdNoSpace", "DiskFull")

	if err := r.resume(ctx, engine.Origin{User: "alice"}, resumeInv(op.ID, "EtcdNoSpace")); err != nil {
		t.Fatal(err)
	}
	if err := r.resume(ctx, engine.Origin{User: "carol"}, resumeInv(op.ID, "EtcdNoSpace")); err == nil {
		t.Fatal("carol's resume was not refused")
	}
	if err := r.resume(ctx, engine.Origin{User: "carol"}, resumeInv(op.ID, "DiskFull")); err == nil {
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

func resumeInv(id, ignore string) *grammar.Invocation {
	return &grammar.Invocation{Spec: grammar.CommandSpec{Command: &lifecyclev1.Command{Name: "resume"}},
		Args: map[string]string{"id": id, "ignore-alert": ignore}}
}

// pausedOn records that op's last alert pause named names (as the checker
// does when it pauses).
func pausedOn(t *testing.T, st *state.Store, opID string, names ...string) {
	t.Helper()
	raw, _ := json.Marshal(names)
	if err := st.SaveKV(context.Background(), alertpause.PausedBucket, opID, raw); err != nil {
		t.Fatal(err)
	}
}

// --ignore-alert goes on past an alert the run paused on, and no other: a
// name in another case, a glob, or a name that never paused the run is
// refused (and nothing is recorded or resumed), as is any name on a run an
// alert did not pause.
func TestIgnoreAlertOnlyPastAnAlertItPausedOn(t *testing.T) {
	ctx := context.Background()
	st, err := state.Open(filepath.Join(t.TempDir(), "db"), state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	op := &state.Operation{ID: "op1", Cluster: "prod", Command: "upgrade talos", State: state.StateInterrupted}
	ops := &resumeOps{op: op, allowed: "alice"}
	r := &Router{store: st, clock: time.Now, ops: ops}

	for _, name := range []string{"EtcdNoSpace", "etcdnospace", "*", "Etcd.*"} {
		err := r.resume(ctx, engine.Origin{User: "alice"}, resumeInv(op.ID, name))
		if !errors.Is(err, alertpause.ErrNotPausedOn) {
			t.Fatalf("--ignore-alert %s on a run no alert paused: %v", name, err)
		}
	}
	pausedOn(t, st, op.ID, "EtcdNoSpace")
	for _, name := range []string{"etcdnospace", "*", "Etcd.*", "KubeNodeNotReady"} {
		err := r.resume(ctx, engine.Origin{User: "alice"}, resumeInv(op.ID, name))
		if !errors.Is(err, alertpause.ErrNotPausedOn) || !strings.Contains(err.Error(), "paused on EtcdNoSpace") {
			t.Fatalf("--ignore-alert %s: %v", name, err)
		}
	}
	if len(ops.refused) != 8 {
		t.Fatalf("refusals answered: %d, want 8", len(ops.refused))
	}
	if names, _ := alertpause.Ignored(ctx, st, op.ID); len(names) != 0 {
		t.Fatalf("a refused --ignore-alert was recorded: %v", names)
	}
	if err := r.resume(ctx, engine.Origin{User: "alice"}, resumeInv(op.ID, "EtcdNoSpace")); err != nil {
		t.Fatal(err)
	}
	if names, _ := alertpause.Ignored(ctx, st, op.ID); !slices.Equal(names, []string{"EtcdNoSpace"}) {
		t.Fatalf("ignored: %v", names)
	}
}
