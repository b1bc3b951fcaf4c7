package state

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestFirstSeenWindowPruneAndRestart(t *testing.T) {
	ctx := context.Background()
	s, clock, path := openTest(t)
	const window = 10 * time.Minute
	seen := func(key string) bool {
		t.Helper()
		first, err := s.FirstSeen(ctx, key, clock.Now(), window)
		if err != nil {
			t.Fatalf("FirstSeen(%q): %v", key, err)
		}
		return first
	}
	if !seen("discord:1") {
		t.Fatal("a new key must be first")
	}
	if seen("discord:1") {
		t.Fatal("the same key inside the window must not be first")
	}
	clock.Advance(4 * time.Minute)
	if !seen("discord:2") || seen("discord:2") || seen("discord:1") {
		t.Fatal("keys are independent, and the first is still inside its window")
	}

	// A restart inside the window remembers both.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, err := Open(path, testOptions(clock))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s2.Close() })
	s = s2
	if seen("discord:1") || seen("discord:2") {
		t.Fatal("a restart forgot keys seen inside the window")
	}

	// Past the window the first key is new again, and writes prune old ones.
	clock.Advance(window - 4*time.Minute)
	if n, _ := s.ReplayEntries(ctx); n != 2 {
		t.Fatalf("entries before prune = %d, want 2", n)
	}
	if !seen("discord:3") {
		t.Fatal("new key")
	}
	if n, _ := s.ReplayEntries(ctx); n != 2 {
		t.Fatalf("entries after prune = %d, want 2 (discord:1 expired, 2 and 3 kept)", n)
	}
	if !seen("discord:1") {
		t.Fatal("a key older than the window is new again")
	}
	clock.Advance(2 * window)
	if !seen("discord:4") {
		t.Fatal("new key")
	}
	if n, _ := s.ReplayEntries(ctx); n != 1 {
		t.Fatalf("entries after a long pause = %d, want 1", n)
	}

	// A clock that went back counts as inside the window, never as new.
	if !seen("back") {
		t.Fatal("new key")
	}
	clock.Advance(-time.Minute)
	if seen("back") {
		t.Fatal("a clock step backwards made a seen key new")
	}
}

func TestFirstSeenRefusesBadInput(t *testing.T) {
	s, clock, _ := openTest(t)
	ctx := context.Background()
	for _, key := range []string{"", strings.Repeat("k", maxReplayKey+1)} {
		if _, err := s.FirstSeen(ctx, key, clock.Now(), time.Minute); err == nil {
			t.Errorf("key of %d bytes accepted", len(key))
		}
	}
	if _, err := s.FirstSeen(ctx, "k", clock.Now(), 0); err == nil {
		t.Error("zero window accepted")
	}
}
