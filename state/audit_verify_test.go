package state

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// tamperTx is tamper with the whole transaction (buckets, meta, indexes).
func tamperTx(t *testing.T, src string, fn func(tx *bolt.Tx) error) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "tampered.db")
	copyFile(t, src, dst)
	db, err := bolt.Open(dst, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(fn); err != nil {
		t.Fatal(err)
	}
	return dst
}

func wantChainError(t *testing.T, err error, reason string) {
	t.Helper()
	var ce *ChainError
	if !errors.As(err, &ce) || !errors.Is(err, ErrChainBroken) {
		t.Fatalf("got %v, want a *ChainError about %q", err, reason)
	}
	if !strings.Contains(ce.Reason, reason) {
		t.Fatalf("ChainError %q does not mention %q", ce.Reason, reason)
	}
}

func TestVerifyDetectsAShortenedChain(t *testing.T) {
	path, recs := buildChain(t, 10)
	cases := []struct {
		name   string
		fn     func(tx *bolt.Tx) error
		reason string
	}{
		{"audit bucket deleted", func(tx *bolt.Tx) error { return tx.DeleteBucket(bAudit) }, "the audit bucket is missing"},
		{"audit bucket and head deleted", func(tx *bolt.Tx) error {
			if err := tx.DeleteBucket(bAudit); err != nil {
				return err
			}
			return tx.Bucket(bMeta).Delete(kAuditHead)
		}, "the audit bucket is missing"},
		{"head deleted", func(tx *bolt.Tx) error { return tx.Bucket(bMeta).Delete(kAuditHead) }, "the audit head (seq and hash of the last record) is missing"},
		{"last record and head deleted", func(tx *bolt.Tx) error {
			if err := tx.Bucket(bAudit).Delete(u64(10)); err != nil {
				return err
			}
			return tx.Bucket(bMeta).Delete(kAuditHead)
		}, "the audit head (seq and hash of the last record) is missing from meta after record 9"},
		{"last record deleted and head rewritten to match", func(tx *bolt.Tx) error {
			if err := tx.Bucket(bAudit).Delete(u64(10)); err != nil {
				return err
			}
			return writeHead(tx.Bucket(bMeta), auditHead{Seq: 9, Time: recs[8].Time, Hash: recs[8].Hash})
		}, "the time index names record 10 but the chain ends at record 9"},
		{"every record deleted, head reset", func(tx *bolt.Tx) error {
			if err := tx.DeleteBucket(bAudit); err != nil {
				return err
			}
			if _, err := tx.CreateBucket(bAudit); err != nil {
				return err
			}
			return writeHead(tx.Bucket(bMeta), auditHead{})
		}, "the time index names record 10 but the chain ends at record 0"},
		{"meta deleted (the file would pass as schema v0)", func(tx *bolt.Tx) error { return tx.DeleteBucket(bMeta) }, "the meta bucket (schema version and audit head) is missing"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := VerifyFile(t.Context(), tamperTx(t, path, c.fn))
			wantChainError(t, err, c.reason)
		})
	}
}

func TestVerifyExpectHead(t *testing.T) {
	path, recs := buildChain(t, 10)
	// The head pinned at record 7 is still in the grown chain.
	rep, err := VerifyFileWith(t.Context(), path, VerifyOptions{ExpectHead: recs[6].Hash})
	if err != nil || rep.Records != 10 {
		t.Fatalf("pinned head 7: %+v %v", rep, err)
	}
	// A chain cut back to 5 records and rewritten consistently (head, time
	// index) passes every internal check, but not the pinned head.
	cut := tamperTx(t, path, func(tx *bolt.Tx) error {
		for seq := uint64(6); seq <= 10; seq++ {
			if err := tx.Bucket(bAudit).Delete(u64(seq)); err != nil {
				return err
			}
		}
		if err := tx.DeleteBucket(bAuditByTime); err != nil {
			return err
		}
		if _, err := tx.CreateBucket(bAuditByTime); err != nil {
			return err
		}
		return writeHead(tx.Bucket(bMeta), auditHead{Seq: 5, Time: recs[4].Time, Hash: recs[4].Hash})
	})
	if rep, err := VerifyFile(t.Context(), cut); err != nil || rep.Records != 5 {
		t.Fatalf("the consistent rewrite passes without a pin: %+v %v", rep, err)
	}
	_, err = VerifyFileWith(t.Context(), cut, VerifyOptions{ExpectHead: recs[6].Hash})
	wantChainError(t, err, "the pinned head "+recs[6].Hash[:12]+" is not in the chain")
	if _, err := VerifyFileWith(t.Context(), path, VerifyOptions{ExpectHead: "abc"}); err == nil || !strings.Contains(err.Error(), "not a 64-hex-digit sha256") {
		t.Fatalf("malformed pin: %v", err)
	}
}

func TestNewDatabaseHasAHead(t *testing.T) {
	s, _, _ := openTest(t)
	seq, hash, err := s.Head(t.Context())
	if err != nil || seq != 0 || hash != "" {
		t.Fatalf("Head = %d %q %v", seq, hash, err)
	}
	if rep, err := s.VerifyAudit(t.Context()); err != nil || rep.Records != 0 {
		t.Fatalf("empty chain: %+v %v", rep, err)
	}
}

// A database written before the head existed from creation gets one when the
// bot opens it, if it has no records yet.
func TestOpenGivesAnEmptyLegacyDatabaseAHead(t *testing.T) {
	s, _, path := openTest(t)
	_ = s.Close()
	legacy := tamperTx(t, path, func(tx *bolt.Tx) error { return tx.Bucket(bMeta).Delete(kAuditHead) })
	if _, err := VerifyFile(t.Context(), legacy); err == nil {
		t.Fatal("a v1 file without a head must not verify")
	}
	s2, err := Open(legacy, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if _, err := s2.VerifyAudit(t.Context()); err != nil {
		t.Fatalf("after open: %v", err)
	}
}

func TestVerifyDamagedFileGivesAnErrorNotAPanic(t *testing.T) {
	path, _ := buildChain(t, 200)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// The test store preallocates; keep the pages in use (the rest is zero).
	page := os.Getpagesize()
	used := len(bytes.TrimRight(raw, "\x00"))
	raw = raw[:(used+page-1)/page*page]
	write := func(name string, b []byte) string {
		p := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// A flipped byte inside a record's JSON is an edited record. bbolt may
	// keep stale copies of a record in freed pages, so flip the byte in
	// every copy: the live one is then edited whichever it is.
	needle := []byte(`"actor":"user1"`)
	flipped := bytes.Clone(raw)
	copies := 0
	for off := 0; ; {
		i := bytes.Index(flipped[off:], needle)
		if i < 0 {
			break
		}
		flipped[off+i+len(`"actor":"user`)] ^= 0x02 // user1 → user3
		off += i + len(needle)
		copies++
	}
	if copies == 0 {
		t.Fatal("record bytes not found")
	}
	_, err = VerifyFile(t.Context(), write("flipped.db", flipped))
	wantChainError(t, err, "edited")

	for _, n := range []int{len(raw) / 2, len(raw) - page, 2*page + 100, 5000, 100, 0} {
		p := write("truncated.db", raw[:n])
		_, err := VerifyFile(t.Context(), p)
		if err == nil || !strings.Contains(err.Error(), p) {
			t.Errorf("truncated to %d bytes: %v; want an error naming %s", n, err, p)
		}
	}
	// Every page header overwritten in turn: never a panic.
	for off := 2 * page; off < len(raw); off += page {
		b := bytes.Clone(raw)
		for j := range 16 {
			b[off+j] = 0xff
		}
		p := write("garbled.db", b)
		if _, err := VerifyFile(t.Context(), p); err != nil && !strings.Contains(err.Error(), p) && !errors.Is(err, ErrChainBroken) {
			t.Errorf("page at %d garbled: %v does not name the file", off, err)
		}
	}
}

// The bot's own read-write open of a damaged file is an error naming it too.
func TestOpenDamagedFileGivesAnError(t *testing.T) {
	path, _ := buildChain(t, 200)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	page := os.Getpagesize()
	used := len(bytes.TrimRight(raw, "\x00"))
	raw = raw[:(used+page-1)/page*page]
	for off := 2 * page; off < len(raw); off += page {
		b := bytes.Clone(raw)
		for j := range 16 {
			b[off+j] = 0xff
		}
		p := filepath.Join(t.TempDir(), "garbled.db")
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := Open(p, Options{})
		if err != nil {
			if !strings.Contains(err.Error(), p) {
				t.Errorf("page at %d garbled: %v does not name the file", off, err)
			}
			continue
		}
		_ = s.Close()
	}
}
