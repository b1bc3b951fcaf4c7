package engine_test

import (
	"context"
	"errors"
	"github.com/talosbot/talosbot/bot/engine"
	"github.com/talosbot/talosbot/state"
	"strings"
	"testing"
)

// Pause is offered only where the command's manifest says it pauses
// between nodes: a disruptive run of another command shows Cancel alone,
// and /talos pause on it says why not and what stops it, changing nothing.
func TestPauseNotOfferedForACommandThatDoesNotPause(t *testing.T) {
	e := newEnvConfig(t, nodesConfig)
	id, err := e.submit("alice", "stg", "/talos push")
	if err != nil {
		t.Fatal(err)
	}
	e.sink.Button(t, id, "Cancel")
	e.sink.Mu.Lock()
	have := e.sink.Buttons[id]
	e.sink.Mu.Unlock()
	for _, b := range have {
		if b.Label == "Pause" {
			t.Fatalf("Pause offered on a command that does not pause: %v", have)
		}
	}
	var ae *engine.ActionError
	err = e.eng.Pause(context.Background(), engine.Origin{User: "alice", Channel: "stg"}, id)
	if !errors.As(err, &ae) || !strings.Contains(ae.Msg, "cannot pause: its plugin does not stop between nodes") || !strings.Contains(ae.Msg, "/talos cancel "+id) {
		t.Fatalf("pause of a non-pausing run: %v", err)
	}
	if op, _ := e.eng.Operation(context.Background(), id); op.State != state.StateRunning {
		t.Fatalf("a refused pause changed the run: %s", op.State)
	}
	if err := e.eng.Cancel(context.Background(), engine.Origin{User: "alice", Channel: "stg"}, id); err != nil {
		t.Fatal(err)
	}
	e.await(id, state.StateCancelled)
}
