package state

import (
	"errors"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

func kvKeys(t *testing.T, s *Store, bucket string) []string {
	t.Helper()
	var keys []string
	if err := s.View(t.Context(), func(tx *Tx) error {
		return tx.ForEachKV(bucket, func(k string, _ []byte) error { keys = append(keys, k); return nil })
	}); err != nil {
		t.Fatal(err)
	}
	return keys
}

// TestPruneKVByAge: keys go once their last write is older than the cutoff,
// a rewrite renews a key, keep spares keys in use, other buckets are
// untouched, and the write-time bookkeeping goes with the key.
func TestPruneKVByAge(t *testing.T) {
	s, clock, _ := openTest(t)
	put := func(bucket, key string) {
		mustUpdate(t, s, func(tx *Tx) error { return tx.PutKV(bucket, key, []byte("v-"+key)) })
	}
	put("actions", "old")
	put("actions", "renewed")
	put("actions", "kept")
	put("alerts", "other-bucket")
	clock.Advance(10 * 24 * time.Hour)
	put("actions", "renewed") // written again: young
	put("actions", "young")
	clock.Advance(time.Hour)
	cutoff := clock.Now().Add(-7 * 24 * time.Hour)

	var asked []string
	n, err := s.PruneKV(t.Context(), "actions", cutoff, func(_ *Tx, key string, val []byte) (bool, error) {
		asked = append(asked, key+"="+string(val))
		return key == "kept", nil
	})
	if err != nil || n != 1 {
		t.Fatalf("PruneKV = %d, %v; want 1 pruned", n, err)
	}
	if got := kvKeys(t, s, "actions"); len(got) != 3 || got[0] != "kept" || got[1] != "renewed" || got[2] != "young" {
		t.Fatalf("actions left: %v, want [kept renewed young]", got)
	}
	if len(asked) != 2 || asked[0] != "kept=v-kept" || asked[1] != "old=v-old" {
		t.Fatalf("keep asked about %v, want only the two old keys, with their values", asked)
	}
	if got := kvKeys(t, s, "alerts"); len(got) != 1 {
		t.Fatalf("another bucket was pruned: %v", got)
	}
	// The write time of a pruned key goes with it; a deleted key's too.
	mustUpdate(t, s, func(tx *Tx) error { return tx.DeleteKV("actions", "young") })
	if err := s.View(t.Context(), func(tx *Tx) error {
		w := tx.tx.Bucket(bKV).Bucket(kvWritten).Bucket([]byte("actions"))
		for _, k := range []string{"old", "young"} {
			if w.Get([]byte(k)) != nil {
				t.Errorf("write time of %q left behind", k)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// A missing bucket prunes nothing.
	if n, err := s.PruneKV(t.Context(), "nope", clock.Now(), nil); n != 0 || err != nil {
		t.Fatalf("missing bucket: %d, %v", n, err)
	}
	// keep's error aborts the pass and changes nothing.
	clock.Advance(30 * 24 * time.Hour)
	boom := errors.New("boom")
	if _, err := s.PruneKV(t.Context(), "actions", clock.Now(), func(*Tx, string, []byte) (bool, error) { return false, boom }); !errors.Is(err, boom) {
		t.Fatalf("keep error: %v", err)
	}
	if got := kvKeys(t, s, "actions"); len(got) != 2 {
		t.Fatalf("a failed pass changed the bucket: %v", got)
	}
}

// TestPruneKVStampsKeysWrittenBeforeWriteTimes: keys from a database written
// before write times were recorded are not pruned at once (their age is
// unknown) but stamped, and go one retention period later.
func TestPruneKVStampsKeysWrittenBeforeWriteTimes(t *testing.T) {
	s, clock, _ := openTest(t)
	if err := s.db.Update(func(btx *bolt.Tx) error {
		b, err := btx.Bucket(bKV).CreateBucketIfNotExists([]byte("cancel"))
		if err != nil {
			return err
		}
		return b.Put([]byte("op-1"), []byte("alice"))
	}); err != nil {
		t.Fatal(err)
	}
	if n, err := s.PruneKV(t.Context(), "cancel", clock.Now().Add(time.Hour), nil); n != 0 || err != nil {
		t.Fatalf("first pass: %d, %v; want the unstamped key kept", n, err)
	}
	clock.Advance(8 * 24 * time.Hour)
	if n, err := s.PruneKV(t.Context(), "cancel", clock.Now().Add(-7*24*time.Hour), nil); n != 1 || err != nil {
		t.Fatalf("a retention period later: %d, %v; want it pruned", n, err)
	}
}

func TestPutKVRefusesTheWriteTimeBucket(t *testing.T) {
	s, _, _ := openTest(t)
	err := s.Update(t.Context(), func(tx *Tx) error { return tx.PutKV(string(kvWritten), "k", nil) })
	if err == nil {
		t.Fatal("PutKV into the reserved write-time bucket was allowed")
	}
}
