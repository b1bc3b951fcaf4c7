package state

import (
	"strings"
	"testing"
	"time"
)

// A replay key may be 1 to 512 bytes: 512 is accepted, 513 refused.
func TestFirstSeenKeyLengthBound(t *testing.T) {
	s, _, _ := openTest(t)
	now := time.Unix(1700000000, 0)
	if first, err := s.FirstSeen(t.Context(), strings.Repeat("k", maxReplayKey), now, time.Minute); err != nil || !first {
		t.Fatalf("a %d-byte key: %t %v", maxReplayKey, first, err)
	}
	if _, err := s.FirstSeen(t.Context(), strings.Repeat("k", maxReplayKey+1), now, time.Minute); err == nil {
		t.Fatalf("a %d-byte key was accepted", maxReplayKey+1)
	}
}

// A key is remembered for less than window: just inside it a repeat is a
// replay, at exactly window it is new again.
func TestFirstSeenWindowEdge(t *testing.T) {
	s, _, _ := openTest(t)
	t0 := time.Unix(1700000000, 0)
	w := 10 * time.Minute
	seen := func(at time.Time) bool {
		t.Helper()
		first, err := s.FirstSeen(t.Context(), "slack:request:abc", at, w)
		if err != nil {
			t.Fatal(err)
		}
		return first
	}
	if !seen(t0) {
		t.Fatal("new key not first")
	}
	if seen(t0.Add(w - time.Nanosecond)) {
		t.Fatal("a repeat just inside the window is first")
	}
	if !seen(t0.Add(w)) {
		t.Fatal("a repeat a full window later is still a replay")
	}
}
