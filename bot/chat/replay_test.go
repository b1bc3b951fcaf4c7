package chat_test

import (
	"context"
	"testing"
	"time"

	"github.com/talosbot/talosbot/bot/chat"
)

// ReplayMemory must cover a request stamped a full window ahead that
// arrives at once and is replayed just before its timestamp ages out.
func TestReplayMemoryCoversAFutureTimestampsWholeLife(t *testing.T) {
	if chat.ReplayMemory < 2*chat.ReplayWindow {
		t.Fatalf("ReplayMemory %s < 2×ReplayWindow %s: a replay of a request stamped ahead would be forgotten while still valid", chat.ReplayMemory, chat.ReplayWindow)
	}
}

// FirstSeen remembers a key for less than window: seen again inside it is
// a replay; at exactly window it is new again, and old keys are pruned.
func TestMemoryReplaysRemembersForTheWindow(t *testing.T) {
	ctx := context.Background()
	var m chat.MemoryReplays
	t0 := time.Unix(1700000000, 0)
	w := 10 * time.Minute
	first := func(key string, at time.Time) bool {
		t.Helper()
		ok, err := m.FirstSeen(ctx, key, at, w)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if !first("a", t0) {
		t.Fatal("a new key is not first")
	}
	if first("a", t0) {
		t.Fatal("the same key at once is first again")
	}
	if first("a", t0.Add(w-time.Nanosecond)) {
		t.Fatal("the same key just inside the window is first again")
	}
	if !first("b", t0.Add(time.Minute)) {
		t.Fatal("another key is not first")
	}
	if !first("a", t0.Add(w)) {
		t.Fatal("a key recorded a full window ago is still remembered")
	}
	if first("b", t0.Add(w)) {
		t.Fatal("b, recorded 9 minutes ago, was forgotten")
	}
}
