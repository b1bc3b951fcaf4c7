package chat

import (
	"context"
	"sync"
	"time"
)

// ReplayWindow is how far a signed request's timestamp may be from now, in
// either direction (Slack's and Discord's 5 minutes).
const ReplayWindow = 5 * time.Minute

// ReplayMemory is how long a request id is remembered: a request stamped up
// to ReplayWindow in the future stays acceptable for 2×ReplayWindow after it
// first arrives, so its id must be kept that long.
const ReplayMemory = 2 * ReplayWindow

// Replays remembers request ids for the replay window. The bot passes its
// store (state.Store.FirstSeen), so a restart inside the window does not
// forget; MemoryReplays is for tests and library use.
type Replays interface {
	// FirstSeen records key at now and reports whether it was not already
	// recorded less than window before now.
	FirstSeen(ctx context.Context, key string, now time.Time, window time.Duration) (bool, error)
}

// MemoryReplays is an in-memory Replays, pruned by age on every call.
type MemoryReplays struct {
	mu   sync.Mutex
	seen map[string]time.Time
}

// FirstSeen implements Replays.
func (m *MemoryReplays) FirstSeen(_ context.Context, key string, now time.Time, window time.Duration) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.seen == nil {
		m.seen = map[string]time.Time{}
	}
	for k, t := range m.seen {
		if now.Sub(t) >= window {
			delete(m.seen, k)
		}
	}
	if _, ok := m.seen[key]; ok {
		return false, nil
	}
	m.seen[key] = now
	return true, nil
}
