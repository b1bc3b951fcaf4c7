package state

import (
	"context"
	"errors"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// A ChainError names the first record that cannot be trusted: after a chain
// cut back at its end, the record after the last one that verifies.
func TestChainErrorNamesTheFirstUntrustedRecord(t *testing.T) {
	path, recs := buildChain(t, 10)
	seqOf := func(err error) uint64 {
		t.Helper()
		var ce *ChainError
		if !errors.As(err, &ce) {
			t.Fatalf("got %v, want a *ChainError", err)
		}
		return ce.Seq
	}
	cases := map[string]struct {
		fn   func(tx *bolt.Tx) error
		opts VerifyOptions
		want uint64
	}{
		"head deleted": {func(tx *bolt.Tx) error { return tx.Bucket(bMeta).Delete(kAuditHead) }, VerifyOptions{}, 11},
		"last record deleted, head rewritten (time index)": {func(tx *bolt.Tx) error {
			if err := tx.Bucket(bAudit).Delete(u64(10)); err != nil {
				return err
			}
			return writeHead(tx.Bucket(bMeta), auditHead{Seq: 9, Time: recs[8].Time, Hash: recs[8].Hash})
		}, VerifyOptions{}, 10},
		"pinned head not in the chain": {func(*bolt.Tx) error { return nil }, VerifyOptions{ExpectHead: recs[0].PrevHash + "0000000000000000000000000000000000000000000000000000000000000000"}, 11},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := VerifyFileWith(t.Context(), tamperTx(t, path, c.fn), c.opts)
			if got := seqOf(err); got != c.want {
				t.Fatalf("ChainError.Seq = %d, want %d (%v)", got, c.want, err)
			}
		})
	}
}

// Store.Head is the last record's seq and hash.
func TestHeadIsTheLastRecord(t *testing.T) {
	s, _, _ := openTest(t)
	recs := appendN(t, s, 3)
	seq, hash, err := s.Head(t.Context())
	if err != nil || seq != 3 || hash != recs[2].Hash {
		t.Fatalf("Head = %d %s %v, want 3 %s", seq, hash, err, recs[2].Hash)
	}
}

// A long verification stops when its context is cancelled (it checks every
// 1024 records) instead of reading the whole chain.
func TestVerifyStopsWhenCancelled(t *testing.T) {
	path, _ := buildChain(t, 1100)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s, err := Open(path, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	err = s.View(context.Background(), func(tx *Tx) error {
		_, err := verifyChain(ctx, tx.tx, s.schema, "", false)
		return err
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("verify with a cancelled context: %v, want context.Canceled", err)
	}
}

// IterateAudit (the audit export) stops within 1024 records of its context
// being cancelled, with the cancellation as the error.
func TestIterateAuditStopsWhenCancelled(t *testing.T) {
	path, _ := buildChain(t, 1100)
	s, err := Open(path, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	n := 0
	err = s.IterateAudit(ctx, func(AuditRecord) error {
		if n++; n == 10 {
			cancel()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) || n > 1024 {
		t.Fatalf("after a cancel at record 10: %v after %d records, want context.Canceled within 1024", err, n)
	}
}
