package slack

import (
	"container/list"
	"sync"
	"time"
)

// dedupe remembers recently seen ids (envelope_id, event_id) so Slack's
// retries run nothing twice. It is bounded both in size (least recently seen
// ids are dropped first) and in age, and its clock is injected.
type dedupe struct {
	mu    sync.Mutex
	cap   int
	ttl   time.Duration
	now   func() time.Time
	order *list.List // front = most recent; values are *seenEntry
	index map[string]*list.Element
}

type seenEntry struct {
	key string
	at  time.Time
}

func newDedupe(capacity int, ttl time.Duration, now func() time.Time) *dedupe {
	return &dedupe{cap: capacity, ttl: ttl, now: now, order: list.New(), index: map[string]*list.Element{}}
}

// firstTime records key and reports whether it was not seen within the window.
// An empty key is never deduplicated.
func (d *dedupe) firstTime(key string) bool {
	if key == "" {
		return true
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	now := d.now()
	if el, ok := d.index[key]; ok {
		e := el.Value.(*seenEntry)
		if now.Sub(e.at) < d.ttl {
			d.order.MoveToFront(el)
			return false
		}
		e.at = now
		d.order.MoveToFront(el)
		return true
	}
	d.index[key] = d.order.PushFront(&seenEntry{key: key, at: now})
	for d.order.Len() > d.cap {
		last := d.order.Back()
		d.order.Remove(last)
		delete(d.index, last.Value.(*seenEntry).key)
	}
	return true
}

func (d *dedupe) len() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.order.Len()
}
