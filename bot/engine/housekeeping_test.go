package engine_test

import (
	"context"
	"errors"
	"github.com/talosbot/talosbot/bot/engine"
	"github.com/talosbot/talosbot/state"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestPruneDropsOldTokensAndCancelMarksOfEndedOperations: after
// TokenRetention, a command button and the buttons and cancel mark of an
// ended operation are pruned (a click then is refused as unknown), while the
// buttons of an operation still awaiting approval are kept, whatever their age.
func TestPruneDropsOldTokensAndCancelMarksOfEndedOperations(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	unknown := "this button is unknown or no longer valid"

	// A command button (no operation).
	cmdButtons, err := e.eng.CommandButtons(ctx, []engine.Suggestion{{Label: "Health", Command: "/talos probe"}})
	if err != nil {
		t.Fatal(err)
	}
	// A cancelled run: its cancel mark.
	marker := filepath.Join(t.TempDir(), "m")
	cancelled, err := e.submit("alice", "stg", "/talos roll v2 --mode wait --marker "+marker)
	if err != nil {
		t.Fatal(err)
	}
	e.await(cancelled, state.StateRunning)
	// Cancel once the plugin runs (its first step started): a cancel that
	// lands while the run is still starting stops it before the plugin is
	// called, and the plugin then never sees a cancellation to mark.
	started, stop := context.WithTimeout(ctx, 60*time.Second)
	defer stop()
	if _, err := e.eng.Await(started, cancelled, func(o *state.Operation) bool {
		for _, st := range o.Steps {
			if st.ID == "s1" && st.Status == "running" {
				return true
			}
		}
		return false
	}); err != nil {
		t.Fatal(err)
	}
	if err := e.eng.Cancel(ctx, engine.Origin{User: "alice", Channel: "stg"}, cancelled); err != nil {
		t.Fatal(err)
	}
	e.await(cancelled, state.StateCancelled)
	waitFor(t, "the plugin to see the cancellation", func() bool {
		b, err := os.ReadFile(marker)
		return err == nil && string(b) == "cancelled"
	})
	// A production operation awaiting approval, and one that was denied.
	e.promote("v2")
	waiting, _ := e.submit("alice", "prd", "/talos roll v2")
	e.await(waiting, state.StateAwaitingApproval)
	approveWaiting := e.sink.Button(t, waiting, "Approve")
	if err := e.eng.Act(ctx, engine.Origin{User: "bob"}, e.sink.Button(t, waiting, "Deny")); err != nil {
		t.Fatal(err)
	}
	e.await(waiting, state.StateDenied)
	pending, _ := e.submit("alice", "prd", "/talos roll v2")
	e.await(pending, state.StateAwaitingApproval)
	approvePending := e.sink.Button(t, pending, "Approve")

	// Young records survive a pass.
	if n, err := e.eng.Prune(ctx); err != nil || n != 0 {
		t.Fatalf("prune of young records: %d, %v", n, err)
	}
	e.clock.Add(engine.TokenRetention + 1)
	n, err := e.eng.Prune(ctx)
	if err != nil || n < 5 { // the command button, the denied op's 3 buttons, the cancel mark (and the staging ops' buttons, if any)
		t.Fatalf("prune = %d, %v; want at least 5 records pruned", n, err)
	}
	if err := e.eng.Act(ctx, engine.Origin{User: "bob"}, cmdButtons[0].ID); err == nil || !strings.Contains(err.Error(), unknown) {
		t.Fatalf("pruned command button: %v", err)
	}
	if err := e.eng.Act(ctx, engine.Origin{User: "bob"}, approveWaiting); err == nil || !strings.Contains(err.Error(), unknown) {
		t.Fatalf("pruned button of a denied operation: %v", err)
	}
	if err := e.store.View(ctx, func(tx *state.Tx) error {
		_, err := tx.GetKV("cancel", cancelled)
		return err
	}); !errors.Is(err, state.ErrNotFound) {
		t.Fatalf("cancel mark of %s: %v, want it pruned", cancelled, err)
	}
	// The pending operation's button is still the real thing: it reaches
	// the approval logic (which finds the request expired), not "unknown".
	if err := e.eng.Act(ctx, engine.Origin{User: "bob"}, approvePending); err == nil || strings.Contains(err.Error(), unknown) || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("button of a pending operation: %v", err)
	}
}
