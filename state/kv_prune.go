package state

import (
	"context"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// kvWritten is the nested bucket of kv that records when each key of each kv
// bucket was last put (bucket → key → time), so that PruneKV can go by age
// without every bucket's values carrying a time. PutKV refuses it as a name.
var kvWritten = []byte("\x00written")

// written returns the write-time bucket of the kv bucket named bucket,
// creating it as needed.
func written(kv *bolt.Bucket, bucket string) (*bolt.Bucket, error) {
	all, err := kv.CreateBucketIfNotExists(kvWritten)
	if err != nil {
		return nil, fmt.Errorf("kv write times: %w", err)
	}
	b, err := all.CreateBucketIfNotExists([]byte(bucket))
	if err != nil {
		return nil, fmt.Errorf("kv write times of %s: %w", bucket, err)
	}
	return b, nil
}

// PruneKV deletes the keys of the kv bucket named bucket that were last put
// before olderThan, except those keep (if non-nil) asks to keep, and returns
// how many went. keep sees the key, its value and the transaction, so a
// caller can keep records that are still in use whatever their age. A key
// without a recorded write time (put before write times existed) is stamped
// with the store clock's now and so goes one retention period later. One
// transaction.
func (s *Store) PruneKV(ctx context.Context, bucket string, olderThan time.Time, keep func(tx *Tx, key string, val []byte) (bool, error)) (int, error) {
	n := 0
	err := s.Update(ctx, func(tx *Tx) error {
		n = 0
		kv, err := tx.bucket(bKV)
		if err != nil {
			return err
		}
		b := kv.Bucket([]byte(bucket))
		if b == nil {
			return nil
		}
		w, err := written(kv, bucket)
		if err != nil {
			return err
		}
		cutoff := timeOrd(olderThan)
		var old, unstamped [][]byte
		if err := b.ForEach(func(k, v []byte) error {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("prune kv %s: %w", bucket, err)
			}
			at := w.Get(k)
			if at == nil {
				unstamped = append(unstamped, clone(k))
				return nil
			}
			if len(at) != 8 || getU64(at) >= cutoff {
				return nil
			}
			if keep != nil {
				ok, err := keep(tx, string(k), v)
				if err != nil {
					return fmt.Errorf("prune kv %s/%s: %w", bucket, k, err)
				}
				if ok {
					return nil
				}
			}
			old = append(old, clone(k))
			return nil
		}); err != nil {
			return err
		}
		for _, k := range old {
			if err := b.Delete(k); err != nil {
				return fmt.Errorf("prune kv %s/%s: %w", bucket, k, err)
			}
			if err := w.Delete(k); err != nil {
				return fmt.Errorf("prune kv %s/%s: %w", bucket, k, err)
			}
		}
		for _, k := range unstamped {
			if err := w.Put(k, timeBytes(tx.now())); err != nil {
				return fmt.Errorf("prune kv %s/%s: stamp: %w", bucket, k, err)
			}
		}
		n = len(old)
		return nil
	})
	return n, err
}
