package slack

import (
	"testing"
	"time"
)

// The socket-mode dedupe remembers an envelope for less than its ttl: a
// redelivery just inside it is dropped, one a full ttl later is new.
func TestDedupeTTLEdge(t *testing.T) {
	t0 := time.Unix(1700000000, 0)
	now := t0
	d := newDedupe(10, time.Minute, func() time.Time { return now })
	if !d.firstTime("env-1") {
		t.Fatal("a new key is not first")
	}
	now = t0.Add(time.Minute - time.Nanosecond)
	if d.firstTime("env-1") {
		t.Fatal("a redelivery just inside the ttl is first")
	}
	now = t0.Add(time.Minute)
	if !d.firstTime("env-1") {
		t.Fatal("a delivery a full ttl later is dropped")
	}
}
