package state

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

func TestCanonicalBytesAndHash(t *testing.T) {
	s, clock, _ := openTest(t)
	clock.Set(time.Date(2026, 3, 1, 13, 0, 0, 500_000_000, time.FixedZone("CET", 3600)))
	rec, err := s.AppendAudit(t.Context(), AuditEvent{
		Actor: "alice", Action: "op.approve", Cluster: "prod", OpID: "op-1",
		Command: "upgrade talos", Result: "ok", Detail: map[string]string{"z": "1", "a": "<2>"},
	})
	if err != nil {
		t.Fatal(err)
	}
	// Sorted keys, UTC RFC 3339 nano time, map keys sorted.
	const want = `{"action":"op.approve","actor":"alice","cluster":"prod","command":"upgrade talos","detail":{"a":"\u003c2\u003e","z":"1"},"op_id":"op-1","prev_hash":"","result":"ok","seq":1,"time":"2026-03-01T12:00:00.5Z"}`
	got, err := canonicalBytes(rec)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Errorf("canonical bytes\n got %s\nwant %s", got, want)
	}
	sum := sha256.Sum256([]byte(want + ""))
	if rec.Hash != hex.EncodeToString(sum[:]) {
		t.Errorf("hash %s is not sha256(canonical || prev)", rec.Hash)
	}
	rec2, err := s.AppendAudit(t.Context(), AuditEvent{Actor: "bob", Action: "op.run"})
	if err != nil {
		t.Fatal(err)
	}
	c2, _ := canonicalBytes(rec2)
	sum = sha256.Sum256(append(c2, rec.Hash...))
	if rec2.Seq != 2 || rec2.PrevHash != rec.Hash || rec2.Hash != hex.EncodeToString(sum[:]) {
		t.Errorf("second record %+v does not chain onto the first", rec2)
	}
	// The stored form decodes to the same record.
	recs, err := s.QueryAudit(t.Context(), AuditQuery{})
	if err != nil || len(recs) != 2 {
		t.Fatalf("QueryAudit = %v, %v", recs, err)
	}
	if recs[1].Hash != rec.Hash || recs[1].Detail["a"] != "<2>" || !recs[1].Time.Equal(rec.Time) {
		t.Errorf("stored record %+v differs from appended %+v", recs[1], rec)
	}
}

func TestAuditTimesAndOddInput(t *testing.T) {
	s, clock, _ := openTest(t)
	ctx := t.Context()
	r1, _ := s.AppendAudit(ctx, AuditEvent{Actor: "a", Action: "x"})
	if !r1.Time.Equal(clock.Now()) {
		t.Errorf("zero time not stamped from the clock: %s", r1.Time)
	}
	explicit := clock.Now().Add(time.Hour)
	r2, _ := s.AppendAudit(ctx, AuditEvent{Actor: "a", Action: "x", Time: explicit})
	if !r2.Time.Equal(explicit) {
		t.Errorf("explicit time not kept: %s", r2.Time)
	}
	// The clock steps back: the record keeps its predecessor's time.
	r3, _ := s.AppendAudit(ctx, AuditEvent{Actor: "a", Action: "x"})
	if !r3.Time.Equal(explicit) {
		t.Errorf("time went backwards along the chain: %s after %s", r3.Time, explicit)
	}
	// Invalid UTF-8 and NUL bytes must not break verification or indexes.
	if _, err := s.AppendAudit(ctx, AuditEvent{Actor: "bad\xff\x00name", Action: "x", Cluster: "a\x00b", Detail: map[string]string{"k\xfe": "v\xff"}}); err != nil {
		t.Fatal(err)
	}
	if rep, err := s.VerifyAudit(ctx); err != nil || rep.Records != 4 {
		t.Fatalf("VerifyAudit = %+v, %v", rep, err)
	}
	recs, err := s.QueryAudit(ctx, AuditQuery{Cluster: "a\x00b"})
	if err != nil || len(recs) != 1 || recs[0].Actor != "bad\uFFFD\x00name" {
		t.Errorf("query by odd cluster = %+v, %v", recs, err)
	}
	if recs, _ := s.QueryAudit(ctx, AuditQuery{Cluster: "a"}); len(recs) != 0 {
		t.Errorf("cluster %q matched records of %q", "a", "a\x00b")
	}
}

// buildChain writes n records to a fresh store, closes it and returns the path.
func buildChain(t *testing.T, n int) (string, []AuditRecord) {
	t.Helper()
	s, clock, path := openTest(t)
	var recs []AuditRecord
	for i := range n {
		clock.Advance(time.Second)
		r, err := s.AppendAudit(t.Context(), AuditEvent{Actor: fmt.Sprintf("user%d", i%3), Action: "op.run", Cluster: "prod", OpID: fmt.Sprintf("op-%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, r)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return path, recs
}

// tamper copies the database and applies fn to the copy's audit bucket with
// raw bbolt, as an attacker with file access would.
func tamper(t *testing.T, src string, fn func(audit *bolt.Bucket) error) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "tampered.db")
	copyFile(t, src, dst)
	db, err := bolt.Open(dst, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(func(tx *bolt.Tx) error { return fn(tx.Bucket(bAudit)) }); err != nil {
		t.Fatal(err)
	}
	return dst
}

func rawRecord(t *testing.T, b *bolt.Bucket, seq uint64) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b.Get(u64(seq)), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func putRaw(t *testing.T, b *bolt.Bucket, seq uint64, m map[string]any) error {
	t.Helper()
	raw, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b.Put(u64(seq), raw)
}

func TestVerifyDetectsTampering(t *testing.T) {
	path, recs := buildChain(t, 10)

	rep, err := VerifyFile(t.Context(), path)
	if err != nil || rep.Records != 10 || rep.HeadSeq != 10 || rep.Head != recs[9].Hash {
		t.Fatalf("intact chain: %+v, %v", rep, err)
	}

	cases := []struct {
		name    string
		fn      func(b *bolt.Bucket) error
		wantSeq uint64
		reason  string
	}{
		{"edited", func(b *bolt.Bucket) error {
			m := rawRecord(t, b, 5)
			m["actor"] = "mallory"
			return putRaw(t, b, 5, m)
		}, 5, "edited"},
		{"edited with its own hash recomputed", func(b *bolt.Bucket) error {
			rec, err := decodeRecord(b.Get(u64(5)))
			if err != nil {
				return err
			}
			rec.Actor = "mallory"
			raw, err := encodeRecord(&rec)
			if err != nil {
				return err
			}
			return b.Put(u64(5), raw)
		}, 6, "prev_hash"},
		{"deleted", func(b *bolt.Bucket) error { return b.Delete(u64(5)) }, 5, "missing"},
		{"first deleted", func(b *bolt.Bucket) error { return b.Delete(u64(1)) }, 1, "missing"},
		{"last deleted", func(b *bolt.Bucket) error { return b.Delete(u64(10)) }, 10, "removed from the end"},
		{"reordered pair", func(b *bolt.Bucket) error {
			r4, r5 := clone(b.Get(u64(4))), clone(b.Get(u64(5)))
			if err := b.Put(u64(4), r5); err != nil {
				return err
			}
			return b.Put(u64(5), r4)
		}, 4, "reordered"},
		{"reordered pair with seq fields rewritten", func(b *bolt.Bucket) error {
			m4, m5 := rawRecord(t, b, 4), rawRecord(t, b, 5)
			m4["seq"], m5["seq"] = 5, 4
			if err := putRaw(t, b, 4, m5); err != nil {
				return err
			}
			return putRaw(t, b, 5, m4)
		}, 4, "prev_hash"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			bad := tamper(t, path, c.fn)
			_, err := VerifyFile(t.Context(), bad)
			var ce *ChainError
			if !errors.As(err, &ce) || !errors.Is(err, ErrChainBroken) {
				t.Fatalf("VerifyFile = %v, want *ChainError", err)
			}
			if ce.Seq != c.wantSeq || !strings.Contains(ce.Reason, c.reason) {
				t.Errorf("ChainError = seq %d %q, want seq %d mentioning %q", ce.Seq, ce.Reason, c.wantSeq, c.reason)
			}
		})
	}
}

// refQuery is an independent, brute-force QueryAudit over all records.
func refQuery(all []AuditRecord, q AuditQuery) []AuditRecord {
	limit := q.Limit
	if limit <= 0 {
		limit = DefaultAuditLimit
	}
	var out []AuditRecord
	for i := len(all) - 1; i >= 0 && len(out) < limit; i-- {
		r := all[i]
		if (q.Cluster == "" || r.Cluster == q.Cluster) &&
			(q.Actor == "" || r.Actor == q.Actor) &&
			(q.Action == "" || r.Action == q.Action) &&
			(q.Result == "" || r.Result == q.Result) &&
			(q.OpID == "" || r.OpID == q.OpID) &&
			(q.Since.IsZero() || !r.Time.Before(q.Since)) &&
			(q.Until.IsZero() || !r.Time.After(q.Until)) &&
			(q.BeforeSeq == 0 || r.Seq < q.BeforeSeq) {
			out = append(out, r)
		}
	}
	return out
}

func seqs(rs []AuditRecord) []uint64 {
	out := make([]uint64, len(rs))
	for i, r := range rs {
		out[i] = r.Seq
	}
	return out
}

func TestQueryAuditFilters(t *testing.T) {
	s, clock, _ := openTest(t)
	ctx := t.Context()
	rng := rand.New(rand.NewPCG(1, 2))
	pick := func(xs ...string) string { return xs[rng.IntN(len(xs))] }
	clusters := []string{"prod", "staging", "dev", "prod-eu"}
	actors := []string{"alice", "bob", "carol", "talosbot"}
	actions := []string{"op.plan", "op.approve", "op.run", "op.finish", "lock.acquire"}
	results := []string{"ok", "refused", "failed"}
	start := clock.Now()
	const n = 600
	mustUpdate(t, s, func(tx *Tx) error {
		for i := range n {
			switch rng.IntN(10) {
			case 0: // same instant as the previous record
			case 1:
				clock.Advance(-time.Minute) // clock steps back
			default:
				clock.Advance(time.Duration(rng.IntN(180)) * time.Second)
			}
			ev := AuditEvent{Actor: pick(actors...), Action: pick(actions...), Result: pick(results...), OpID: fmt.Sprintf("op-%d", i/7)}
			if rng.IntN(8) > 0 {
				ev.Cluster = pick(clusters...)
			}
			if _, err := tx.Append(ev); err != nil {
				return err
			}
		}
		return nil
	})
	var all []AuditRecord
	if err := s.IterateAudit(ctx, func(r AuditRecord) error { all = append(all, r); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(all) != n {
		t.Fatalf("IterateAudit returned %d records, want %d", len(all), n)
	}
	end := all[n-1].Time
	randTime := func() time.Time {
		return start.Add(time.Duration(rng.Int64N(int64(end.Sub(start)) + int64(time.Hour)))).Add(-30 * time.Minute)
	}

	check := func(q AuditQuery) {
		t.Helper()
		got, err := s.QueryAudit(ctx, q)
		if err != nil {
			t.Fatalf("QueryAudit(%+v): %v", q, err)
		}
		want := refQuery(all, q)
		if fmt.Sprint(seqs(got)) != fmt.Sprint(seqs(want)) {
			t.Fatalf("QueryAudit(%+v)\n got %v\nwant %v", q, seqs(got), seqs(want))
		}
	}

	// Hand-picked cases, each filter on its own and at the edges.
	check(AuditQuery{})
	check(AuditQuery{Limit: n + 10})
	check(AuditQuery{Cluster: "prod", Limit: n})
	check(AuditQuery{Cluster: "prod-eu", Limit: n})
	check(AuditQuery{Cluster: "pro", Limit: n}) // prefix of real names: nothing
	check(AuditQuery{Actor: "bob", Limit: n})
	check(AuditQuery{Action: "op.approve", Limit: n})
	check(AuditQuery{Result: "refused", Limit: n})
	check(AuditQuery{OpID: "op-12", Limit: n})
	check(AuditQuery{Since: all[100].Time, Limit: n})
	check(AuditQuery{Until: all[100].Time, Limit: n})
	check(AuditQuery{Since: all[100].Time, Until: all[100].Time, Limit: n})
	check(AuditQuery{Since: end.Add(time.Second)})
	check(AuditQuery{Until: start.Add(-time.Second)})
	check(AuditQuery{BeforeSeq: 1})
	check(AuditQuery{BeforeSeq: 2})
	check(AuditQuery{BeforeSeq: n + 100, Limit: 3})
	check(AuditQuery{Cluster: "prod", Actor: "alice", Action: "op.run", Result: "ok", Limit: n})
	if got, _ := s.QueryAudit(ctx, AuditQuery{Limit: 7}); len(got) != 7 || got[0].Seq != n {
		t.Errorf("Limit 7: %v, want the 7 newest", seqs(got))
	}

	// Random combinations.
	for range 400 {
		var q AuditQuery
		if rng.IntN(3) == 0 {
			q.Cluster = pick(append(clusters, "none")...)
		}
		if rng.IntN(3) == 0 {
			q.Actor = pick(actors...)
		}
		if rng.IntN(4) == 0 {
			q.Action = pick(actions...)
		}
		if rng.IntN(4) == 0 {
			q.Result = pick(results...)
		}
		if rng.IntN(6) == 0 {
			q.OpID = fmt.Sprintf("op-%d", rng.IntN(n/7+2))
		}
		if rng.IntN(3) == 0 {
			q.Since = randTime()
		}
		if rng.IntN(3) == 0 {
			q.Until = randTime()
		}
		if rng.IntN(3) == 0 {
			q.BeforeSeq = uint64(rng.IntN(n + 5))
		}
		q.Limit = rng.IntN(60) - 5
		check(q)
	}

	// Paging by BeforeSeq walks every match exactly once.
	q := AuditQuery{Cluster: "staging", Limit: 9}
	var paged []AuditRecord
	for {
		page, err := s.QueryAudit(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		paged = append(paged, page...)
		q.BeforeSeq = page[len(page)-1].Seq
	}
	want := refQuery(all, AuditQuery{Cluster: "staging", Limit: n})
	if fmt.Sprint(seqs(paged)) != fmt.Sprint(seqs(want)) {
		t.Errorf("paging: got %v, want %v", seqs(paged), seqs(want))
	}
}

// TestReadersDuringWrites: View transactions running while an Update appends
// always see a complete, verifiable chain whose head matches the newest
// record, and a snapshot never changes under a reader.
func TestReadersDuringWrites(t *testing.T) {
	s, _, _ := openTest(t)
	ctx := t.Context()

	t.Run("snapshot isolation", func(t *testing.T) {
		if _, err := s.AppendAudit(ctx, AuditEvent{Actor: "a", Action: "seed"}); err != nil {
			t.Fatal(err)
		}
		const k = 25
		mustView(t, s, func(tx *Tx) error {
			before, err := verifyChain(ctx, tx.tx, CurrentSchema, "", false)
			if err != nil {
				return err
			}
			// Writes commit while this read transaction is open.
			done := make(chan error, 1)
			go func() {
				for i := range k {
					if _, err := s.AppendAudit(ctx, AuditEvent{Actor: "w", Action: fmt.Sprint(i)}); err != nil {
						done <- err
						return
					}
				}
				done <- nil
			}()
			select {
			case err := <-done:
				if err != nil {
					return err
				}
			case <-time.After(10 * time.Second):
				return errors.New("writer blocked by an open reader")
			}
			after, err := verifyChain(ctx, tx.tx, CurrentSchema, "", false)
			if err != nil {
				return err
			}
			if after != before {
				t.Errorf("snapshot changed under the reader: %+v → %+v", before, after)
			}
			return nil
		})
		rep, err := s.VerifyAudit(ctx)
		if err != nil || rep.Records != 1+k {
			t.Errorf("after the writer: %+v, %v; want %d records", rep, err, 1+k)
		}
	})

	t.Run("concurrent readers", func(t *testing.T) {
		const writes = 300
		base, err := s.VerifyAudit(ctx)
		if err != nil {
			t.Fatal(err)
		}
		writerDone := make(chan struct{})
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for r := range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				last := 0
				for finished := false; !finished; {
					select {
					case <-writerDone:
						finished = true // one more read after the writer
					default:
					}
					err := s.View(ctx, func(tx *Tx) error {
						rep, err := verifyChain(ctx, tx.tx, CurrentSchema, "", false)
						if err != nil {
							return err
						}
						top, err := tx.QueryAudit(AuditQuery{Limit: 5})
						if err != nil {
							return err
						}
						if len(top) == 0 || top[0].Seq != rep.HeadSeq || top[0].Hash != rep.Head {
							return fmt.Errorf("query head %v disagrees with chain head %d", seqs(top), rep.HeadSeq)
						}
						for i := 1; i < len(top); i++ {
							if top[i].Seq != top[i-1].Seq-1 || top[i-1].PrevHash != top[i].Hash {
								return fmt.Errorf("newest records not contiguous: %v", seqs(top))
							}
						}
						if rep.Records < last {
							return fmt.Errorf("reader %d saw %d records after %d", r, rep.Records, last)
						}
						last = rep.Records
						return nil
					})
					if err != nil {
						errs <- err
						return
					}
				}
				if last != base.Records+writes {
					errs <- fmt.Errorf("reader %d finished at %d records, want %d", r, last, base.Records+writes)
				}
			}()
		}
		for i := range writes {
			if _, err := s.AppendAudit(ctx, AuditEvent{Actor: "w", Action: "append", Cluster: "prod", Detail: map[string]string{"i": fmt.Sprint(i)}}); err != nil {
				t.Fatal(err)
			}
		}
		close(writerDone)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	})
}

func TestUpdateHonoursContext(t *testing.T) {
	s, _, _ := openTest(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := s.AppendAudit(ctx, AuditEvent{Actor: "a", Action: "x"}); !errors.Is(err, context.Canceled) {
		t.Errorf("AppendAudit with cancelled ctx: %v", err)
	}
	if rep, _ := s.VerifyAudit(t.Context()); rep.Records != 0 {
		t.Errorf("cancelled append wrote %d records", rep.Records)
	}
}

func TestBackupVerifies(t *testing.T) {
	s, _, _ := openTest(t)
	for i := range 5 {
		if _, err := s.AppendAudit(t.Context(), AuditEvent{Actor: "a", Action: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
	}
	dst := filepath.Join(t.TempDir(), "backup.db")
	if err := s.Backup(t.Context(), dst); err != nil {
		t.Fatal(err)
	}
	rep, err := VerifyFile(t.Context(), dst)
	if err != nil || rep.Records != 5 {
		t.Errorf("VerifyFile(backup) = %+v, %v", rep, err)
	}
}
