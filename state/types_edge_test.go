package state

import (
	"strings"
	"testing"
)

// Only the known states are valid: a stored or typed state outside the
// list is refused, not taken for one of them.
func TestOpStateValidIsTheKnownList(t *testing.T) {
	for _, s := range AllStates() {
		if !s.Valid() {
			t.Errorf("%s is not valid", s)
		}
	}
	for _, s := range []OpState{"", "bogus", "Running"} {
		if s.Valid() {
			t.Errorf("%q is valid", s)
		}
	}
}

// A refused transition says where the operation may go, or that it is
// terminal.
func TestTransitionErrorSaysWhereItMayGo(t *testing.T) {
	if msg := (&TransitionError{From: StateSucceeded, To: StateRunning}).Error(); !strings.Contains(msg, "it is terminal") {
		t.Errorf("from succeeded: %q", msg)
	}
	if msg := (&TransitionError{From: StateRunning, To: StatePlanned}).Error(); !strings.Contains(msg, "from running it may only go to") {
		t.Errorf("from running: %q", msg)
	}
}
