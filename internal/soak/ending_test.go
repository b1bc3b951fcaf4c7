package soak

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/talosbot/talosbot/state"
)

// TestEndingLinesParse: the ending check reads the engine's ending lines
// (bot/engine/endings.go, Ending.Lines) as they appear in a stopped run's
// message; a pattern that matched nothing would make the check vacuous.
func TestEndingLinesParse(t *testing.T) {
	text := `upgrade of cp-3 failed; the roll stopped, no later node was touched. cp-3 is unchanged: it runs v1.11.6
Where every node was left:
• worker-1: partly done, at v1.12.6
• cp-1: done, at v1.13.9 — node 2/4 cp-1
• cp-2: not started, at v1.12.6
• cp-3: failed, version unknown (check it before going on) — hop 1/2 → v1.12.6: node 4/4 cp-3: v1.11.6 → v1.12.6: upgrade cp-3
• cp-4: already there, at v1.13.9
⚠️ the cluster is at mixed versions (v1.13.9, unknown, v1.12.6); finish or undo the change`
	var got []string
	for _, m := range endingLine.FindAllStringSubmatch(text, -1) {
		got = append(got, m[1]+"|"+m[2]+"|"+m[3])
	}
	want := []string{"worker-1|partly done|v1.12.6", "cp-1|done|v1.13.9", "cp-2|not started|v1.12.6", "cp-3|failed|", "cp-4|already there|v1.13.9"}
	if !slices.Equal(got, want) {
		t.Fatalf("parsed %q, want %q", got, want)
	}
}

// TestStoreMessageReadsAnEndedOperation: an operation that ended right before a SIGKILL has no
// message in the restarted bot's console (seeds 1037, 1062 read "" for 7 minutes and broke
// "ended or resumable"); the harness reads its end from a copy of the store, as the bot's
// message words it, and nothing for an operation that has not ended.
func TestStoreMessageReadsAnEndedOperation(t *testing.T) {
	db := filepath.Join(t.TempDir(), "talosbot.db")
	st, err := state.Open(db, state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ends := map[string]state.OpState{"op1": state.StateFailed, "op2": state.StateInterrupted}
	if err := st.Update(context.Background(), func(tx *state.Tx) error {
		for _, id := range []string{"op1", "op2"} {
			if err := tx.PutOperation(&state.Operation{ID: id, Command: "upgrade talos", Cluster: "staging", State: state.StatePlanned}); err != nil {
				return err
			}
			for _, to := range []state.OpState{state.StateApproved, state.StateRunning, ends[id]} {
				if _, err := tx.Transition(id, to, func(o *state.Operation) {
					if to == state.StateFailed {
						o.Result, o.Error = "upgrade of cp-3 failed\nWhere every node was left:\n• cp-3: failed, version unknown", "NOSPACE"
					}
				}); err != nil {
					return err
				}
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	m, ok := storeMessage(db, "op1")
	if !ok || m.Field("State") != "failed" || m.Field("Operation") != "op1" || !strings.Contains(m.Text, "• cp-3: failed, version unknown") || !strings.Contains(m.Text, "NOSPACE") {
		t.Fatalf("op1: %v %+v", ok, m)
	}
	if m, ok := storeMessage(db, "op2"); ok {
		t.Fatalf("an interrupted operation has not ended: %+v", m)
	}
	if _, ok := storeMessage(db, "nope"); ok {
		t.Fatal("an unknown operation read as ended")
	}
}
