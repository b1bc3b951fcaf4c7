package state

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Replay state: the ids of signed requests seen recently (Discord interaction
// ids, Slack request signatures and event ids), so a captured request sent
// again inside its window is refused. It lives in the store, not in memory,
// so a restart inside the window does not forget what was seen. Entries are
// pruned by age on every write; the set stays as small as the traffic of one
// window.
//
//	kv/replay          key → time(seen)
//	kv/replay_by_time  time(seen) | key → ∅
var (
	bReplay       = []byte("replay")
	bReplayByTime = []byte("replay_by_time")
)

// maxReplayKey bounds a replay key; callers pass ids or digests, never bodies.
const maxReplayKey = 512

// FirstSeen records key as seen at now and reports whether it is new: not
// already recorded less than window before now. Entries older than window
// are deleted in the same transaction. now comes from the caller's clock (the
// chat adapter's), so tests drive the window without sleeping.
func (s *Store) FirstSeen(ctx context.Context, key string, now time.Time, window time.Duration) (bool, error) {
	if key == "" || len(key) > maxReplayKey {
		return false, fmt.Errorf("replay key must be 1 to %d bytes (got %d)", maxReplayKey, len(key))
	}
	if window <= 0 {
		return false, errors.New("replay window must be positive")
	}
	first := false
	err := s.Update(ctx, func(tx *Tx) error {
		keys, byTime, err := tx.replayBuckets()
		if err != nil {
			return err
		}
		if err := pruneReplay(keys, byTime, now.Add(-window)); err != nil {
			return err
		}
		if v := keys.Get([]byte(key)); len(v) == 8 {
			if seen := ordTime(getU64(v)); now.Sub(seen) < window {
				return nil // seen inside the window (a clock that went back counts as inside)
			}
			if err := byTime.Delete(join(v, []byte(key))); err != nil {
				return fmt.Errorf("replay: %w", err)
			}
		}
		first = true
		t := timeBytes(now)
		if err := keys.Put([]byte(key), t); err != nil {
			return fmt.Errorf("replay: record %q: %w", key, err)
		}
		if err := byTime.Put(join(t, []byte(key)), []byte{}); err != nil {
			return fmt.Errorf("replay: record %q: %w", key, err)
		}
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("replay state: %w", err)
	}
	return first, nil
}

// ReplayEntries returns how many replay keys are stored (for tests and
// diagnostics).
func (s *Store) ReplayEntries(ctx context.Context) (int, error) {
	n := 0
	err := s.View(ctx, func(tx *Tx) error {
		kv, err := tx.bucket(bKV)
		if err != nil {
			return err
		}
		if b := kv.Bucket(bReplay); b != nil {
			n = b.Stats().KeyN
		}
		return nil
	})
	return n, err
}

func (t *Tx) replayBuckets() (keys, byTime *bolt.Bucket, err error) {
	if err := t.writable("replay"); err != nil {
		return nil, nil, err
	}
	kv, err := t.bucket(bKV)
	if err != nil {
		return nil, nil, err
	}
	if keys, err = kv.CreateBucketIfNotExists(bReplay); err != nil {
		return nil, nil, fmt.Errorf("replay bucket: %w", err)
	}
	if byTime, err = kv.CreateBucketIfNotExists(bReplayByTime); err != nil {
		return nil, nil, fmt.Errorf("replay bucket: %w", err)
	}
	return keys, byTime, nil
}

// pruneReplay deletes entries seen at or before cutoff, oldest first.
func pruneReplay(keys, byTime *bolt.Bucket, cutoff time.Time) error {
	limit := timeBytes(cutoff)
	var old [][]byte
	c := byTime.Cursor()
	for k, _ := c.First(); len(k) >= 8 && bytes.Compare(k[:8], limit) <= 0; k, _ = c.Next() {
		old = append(old, clone(k))
	}
	for _, k := range old {
		if err := byTime.Delete(k); err != nil {
			return fmt.Errorf("replay prune: %w", err)
		}
		// Only delete the key if it still points at this entry (it may have
		// been recorded again later).
		if v := keys.Get(k[8:]); v != nil && bytes.Equal(v, k[:8]) {
			if err := keys.Delete(k[8:]); err != nil {
				return fmt.Errorf("replay prune: %w", err)
			}
		}
	}
	return nil
}
