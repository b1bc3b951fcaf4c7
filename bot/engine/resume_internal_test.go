package engine

import (
	"slices"
	"testing"

	"github.com/talosbot/talosbot/state"
)

// TestInterruptedSteps: the steps a resumed run is told were in flight are the ones a stopped
// attempt left stopped (or running) and no later attempt has run since, in order.
func TestInterruptedSteps(t *testing.T) {
	op := &state.Operation{
		History: []state.Attempt{
			{N: 1, End: "interrupted", Steps: []state.Step{
				{ID: "snapshot", Status: "ok"},
				{ID: "node/cp-1/upgrade", Status: "ok"},
				{ID: "node/cp-2/upgrade", Node: "cp-2", Status: StepStopped},
				{ID: "node/cp-3/upgrade", Status: "pending"},
			}},
			{N: 2, End: "interrupted", Steps: []state.Step{
				{ID: "snapshot", Status: StepStopped}, // stopped again, before cp-2
				{ID: "node/cp-1/upgrade", Status: "pending"},
				{ID: "node/cp-2/upgrade", Status: "pending"},
				{ID: "node/cp-3/upgrade", Status: "pending"},
			}},
		},
		Steps: []state.Step{
			{ID: "snapshot", Status: "ok"},
			{ID: "node/worker-1/upgrade", Node: "worker-1", Status: StepStopped},
			{ID: "node/cp-3/upgrade", Status: "pending"},
		},
	}
	var got []string
	for _, s := range interruptedSteps(op) {
		got = append(got, s.GetId()+"@"+s.GetNode())
	}
	if want := []string{"node/cp-2/upgrade@cp-2", "node/worker-1/upgrade@worker-1"}; !slices.Equal(got, want) {
		t.Fatalf("interruptedSteps = %q, want %q", got, want)
	}
	if got := interruptedSteps(&state.Operation{Steps: []state.Step{{ID: "a", Status: "pending"}, {ID: "b", Status: "ok"}}}); len(got) != 0 {
		t.Fatalf("a first run has nothing in flight, got %v", got)
	}
}
