package state

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// wantAllowed is the transition table as the brief states it, written out
// independently of transitions() so a change there fails this test.
var wantAllowed = map[OpState][]OpState{
	StatePlanned:          {StateAwaitingApproval, StateApproved, StateRunning, StateCancelled, StateFailed, StateRefused},
	StateAwaitingApproval: {StateApproved, StateDenied, StateExpired, StateCancelled, StateFailed, StateRefused},
	StateApproved:         {StateRunning, StateAwaitingApproval, StateCancelled, StateExpired, StateFailed, StateRefused},
	StateRunning:          {StateSucceeded, StateFailed, StateCancelled, StateInterrupted, StateRefused},
	StateInterrupted:      {StateRunning, StateCancelled, StateAwaitingApproval},
}

func allowed(from, to OpState) bool {
	for _, s := range wantAllowed[from] {
		if s == to {
			return true
		}
	}
	return false
}

func TestCanTransitionAllPairs(t *testing.T) {
	states := AllStates()
	if len(states) != 11 {
		t.Fatalf("AllStates has %d states, want 11", len(states))
	}
	for _, from := range states {
		for _, to := range states {
			if got, want := CanTransition(from, to), allowed(from, to); got != want {
				t.Errorf("CanTransition(%s, %s) = %v, want %v", from, to, got, want)
			}
		}
	}
	// Unknown states never transition.
	for _, s := range states {
		if CanTransition("bogus", s) || CanTransition(s, "bogus") {
			t.Errorf("unknown state transitions with %s", s)
		}
	}
}

func TestTerminal(t *testing.T) {
	want := map[OpState]bool{
		StateSucceeded: true, StateFailed: true, StateCancelled: true, StateDenied: true, StateExpired: true, StateRefused: true,
	}
	for _, s := range AllStates() {
		if s.Terminal() != want[s] {
			t.Errorf("%s.Terminal() = %v, want %v", s, s.Terminal(), want[s])
		}
		// Terminal states have no way out; non-terminal ones have one.
		if (len(wantAllowed[s]) == 0) != want[s] {
			t.Errorf("%s: terminal=%v but %d outgoing transitions", s, want[s], len(wantAllowed[s]))
		}
	}
}

// pathTo returns legal transitions from planned to target (BFS over the
// expected table).
func pathTo(target OpState) []OpState {
	prev := map[OpState]OpState{}
	seen := map[OpState]bool{StatePlanned: true}
	queue := []OpState{StatePlanned}
	for len(queue) > 0 {
		s := queue[0]
		queue = queue[1:]
		for _, n := range wantAllowed[s] {
			if !seen[n] {
				seen[n], prev[n] = true, s
				queue = append(queue, n)
			}
		}
	}
	var path []OpState
	for s := target; s != StatePlanned; s = prev[s] {
		path = append([]OpState{s}, path...)
	}
	return path
}

// TestTransitionAllPairs drives a real operation to every state and tries
// every target state through Tx.Transition.
func TestTransitionAllPairs(t *testing.T) {
	s, _, _ := openTest(t)
	n := 0
	for _, from := range AllStates() {
		for _, to := range AllStates() {
			n++
			id := fmt.Sprintf("op-%d", n)
			t.Run(fmt.Sprintf("%s→%s", from, to), func(t *testing.T) {
				mustUpdate(t, s, func(tx *Tx) error {
					if err := tx.PutOperation(&Operation{ID: id, Cluster: "c", Command: "upgrade talos"}); err != nil {
						return err
					}
					for _, step := range pathTo(from) {
						if _, err := tx.Transition(id, step, nil); err != nil {
							return err
						}
					}
					return nil
				})
				err := s.Update(t.Context(), func(tx *Tx) error {
					op, err := tx.Transition(id, to, func(op *Operation) { op.Result = "touched" })
					if err != nil {
						return err
					}
					if op.State != to {
						t.Errorf("returned state %s, want %s", op.State, to)
					}
					return nil
				})
				var got *Operation
				mustView(t, s, func(tx *Tx) error {
					var err error
					got, err = tx.Operation(id)
					return err
				})
				if allowed(from, to) {
					if err != nil {
						t.Fatalf("legal transition refused: %v", err)
					}
					if got.State != to || got.Result != "touched" {
						t.Errorf("stored state %s result %q, want %s and the mutation", got.State, got.Result, to)
					}
					return
				}
				var te *TransitionError
				if !errors.As(err, &te) || !errors.Is(err, ErrIllegalTransition) {
					t.Fatalf("illegal transition: err = %v, want *TransitionError", err)
				}
				if te.ID != id || te.From != from || te.To != to {
					t.Errorf("TransitionError = %+v", te)
				}
				if msg := err.Error(); !strings.Contains(msg, string(from)) || !strings.Contains(msg, string(to)) {
					t.Errorf("message %q does not name both states", msg)
				}
				if got.State != from || got.Result == "touched" {
					t.Errorf("illegal transition changed the operation: state %s result %q", got.State, got.Result)
				}
			})
		}
	}
}

func TestTransitionSideEffects(t *testing.T) {
	s, clock, _ := openTest(t)
	mustUpdate(t, s, func(tx *Tx) error {
		return tx.PutOperation(&Operation{ID: "op1", Cluster: "prod", Command: "upgrade talos", Digest: "d1"})
	})

	// approved → awaiting_approval voids approvals.
	mustUpdate(t, s, func(tx *Tx) error {
		if _, err := tx.Transition("op1", StateAwaitingApproval, nil); err != nil {
			return err
		}
		if err := tx.PutApproval(Approval{OpID: "op1", User: "alice", Digest: "d1"}); err != nil {
			return err
		}
		if _, err := tx.Transition("op1", StateApproved, nil); err != nil {
			return err
		}
		return tx.AcquireLock(Lock{Cluster: "prod", OpID: "op1", Holder: "alice", Command: "upgrade talos"})
	})
	mustUpdate(t, s, func(tx *Tx) error {
		_, err := tx.Transition("op1", StateAwaitingApproval, func(op *Operation) { op.Digest = "d2" })
		return err
	})
	mustView(t, s, func(tx *Tx) error {
		as, err := tx.Approvals("op1")
		if err != nil {
			return err
		}
		if len(as) != 0 {
			t.Errorf("approvals after digest change: %+v, want none", as)
		}
		return nil
	})

	// running: Attempts and StartedAt; interrupted → running resumes.
	start := clock.Now()
	mustUpdate(t, s, func(tx *Tx) error {
		for _, st := range []OpState{StateApproved, StateRunning, StateInterrupted} {
			if _, err := tx.Transition("op1", st, nil); err != nil {
				return err
			}
		}
		return nil
	})
	clock.Advance(5 * time.Minute)
	var op *Operation
	mustUpdate(t, s, func(tx *Tx) error {
		var err error
		if _, err = tx.Transition("op1", StateRunning, nil); err != nil {
			return err
		}
		op, err = tx.Transition("op1", StateSucceeded, nil)
		return err
	})
	if op.Attempts != 2 {
		t.Errorf("Attempts = %d, want 2 (run + resume)", op.Attempts)
	}
	if !op.StartedAt.Equal(start) {
		t.Errorf("StartedAt = %s, want first start %s", op.StartedAt, start)
	}
	if !op.EndedAt.Equal(clock.Now()) {
		t.Errorf("EndedAt = %s, want %s", op.EndedAt, clock.Now())
	}
	// Terminal state released the lock the op held.
	mustView(t, s, func(tx *Tx) error {
		l, err := tx.Lock("prod")
		if l != nil {
			t.Errorf("lock still held after success: %+v", l)
		}
		return err
	})
}

func TestStateChangesOnlyThroughTransition(t *testing.T) {
	s, _, _ := openTest(t)
	ctx := t.Context()
	err := s.Update(ctx, func(tx *Tx) error {
		return tx.PutOperation(&Operation{ID: "x", State: StateRunning})
	})
	if err == nil || !strings.Contains(err.Error(), "Transition") {
		t.Errorf("creating a running op: err = %v, want refusal pointing at Transition", err)
	}
	mustUpdate(t, s, func(tx *Tx) error { return tx.PutOperation(&Operation{ID: "x"}) })
	err = s.Update(ctx, func(tx *Tx) error {
		op, err := tx.Operation("x")
		if err != nil {
			return err
		}
		op.State = StateSucceeded
		return tx.PutOperation(op)
	})
	if err == nil {
		t.Error("PutOperation changed the state")
	}
	err = s.Update(ctx, func(tx *Tx) error {
		_, err := tx.Transition("x", StateRunning, func(op *Operation) { op.State = StateSucceeded })
		return err
	})
	if err == nil {
		t.Error("mutate changed the state")
	}
	err = s.Update(ctx, func(tx *Tx) error {
		_, err := tx.Transition("missing", StateRunning, nil)
		return err
	})
	if !errors.Is(err, ErrNotFound) {
		t.Errorf("transition of a missing op: %v, want ErrNotFound", err)
	}
}
