package state

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// rawRecords returns every stored record's bytes by seq.
func rawRecords(t *testing.T, s *Store) map[uint64][]byte {
	t.Helper()
	out := map[uint64][]byte{}
	if err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bAudit).ForEach(func(k, v []byte) error {
			out[getU64(k)] = bytes.Clone(v)
			return nil
		})
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// wantHeadRefusal checks that err is a refusal that says how to inspect and
// repair the database.
func wantHeadRefusal(t *testing.T, err error, path, reason string) {
	t.Helper()
	var he *HeadError
	if !errors.Is(err, ErrAuditHeadBroken) || !errors.As(err, &he) {
		t.Fatalf("got %v, want a refusal wrapping ErrAuditHeadBroken", err)
	}
	for _, w := range []string{reason, "talosbot audit verify --db " + path, "talosbot audit repair-head --db " + path} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("the refusal lacks %q: %v", w, err)
		}
	}
}

func appendN(t *testing.T, s *Store, n int) []AuditRecord {
	t.Helper()
	var recs []AuditRecord
	for range n {
		r, err := s.AppendAudit(t.Context(), AuditEvent{Actor: "alice", Action: "op.run", Cluster: "prod"})
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, r)
	}
	return recs
}

// The defect of issue 29: with meta/audit_head deleted under a running bot,
// the next record was numbered 1 and replaced the oldest record.
func TestAppendRefusesWhenTheHeadIsMissing(t *testing.T) {
	s, _, path := openTest(t)
	appendN(t, s, 3)
	before := rawRecords(t, s)
	if err := s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bMeta).Delete(kAuditHead) }); err != nil {
		t.Fatal(err)
	}
	_, err := s.AppendAudit(t.Context(), AuditEvent{Actor: "mallory", Action: "op.run"})
	wantHeadRefusal(t, err, path, "the audit head (meta/audit_head) is missing but the chain has records up to 3")
	// The same refusal inside a caller's transaction: its state change is
	// rolled back with the record that could not be written.
	err = s.Update(t.Context(), func(tx *Tx) error {
		if err := tx.PutKV("k", "v", []byte("x")); err != nil {
			return err
		}
		_, err := tx.Append(AuditEvent{Actor: "mallory", Action: "kv.put"})
		return err
	})
	wantHeadRefusal(t, err, path, "is missing")
	mustView(t, s, func(tx *Tx) error {
		if v, _ := tx.GetKV("k", "v"); v != nil {
			t.Fatalf("the state change of the refused transaction committed: %q", v)
		}
		return nil
	})
	after := rawRecords(t, s)
	if len(after) != 3 || !bytes.Equal(after[1], before[1]) {
		t.Fatalf("record 1 changed or records were added:\nbefore %s\nafter  %s (%d records)", before[1], after[1], len(after))
	}
}

func TestAppendRefusesAMismatchedHead(t *testing.T) {
	cases := []struct {
		name   string
		head   func(recs []AuditRecord) auditHead
		reason string
	}{
		{"hash edited", func(r []AuditRecord) auditHead {
			return auditHead{Seq: 3, Time: r[2].Time, Hash: r[0].Hash}
		}, "does not match hash %s of the last record 3"},
		{"rolled back to record 2", func(r []AuditRecord) auditHead {
			return auditHead{Seq: 2, Time: r[1].Time, Hash: r[1].Hash}
		}, "the audit head names record 2 but the chain goes on to record 3: the next record would overwrite record 3"},
		{"ahead of the chain", func(r []AuditRecord) auditHead {
			return auditHead{Seq: 5, Time: r[2].Time, Hash: r[2].Hash}
		}, "the audit head names record 5 but the chain ends at record 3"},
		{"rolled back to empty", func([]AuditRecord) auditHead { return auditHead{} }, "the audit head names record 0 but the chain goes on to record 3"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, _, path := openTest(t)
			recs := appendN(t, s, 3)
			before := rawRecords(t, s)
			if err := s.db.Update(func(tx *bolt.Tx) error { return writeHead(tx.Bucket(bMeta), c.head(recs)) }); err != nil {
				t.Fatal(err)
			}
			reason := strings.Replace(c.reason, "%s", short(recs[2].Hash), 1)
			_, err := s.AppendAudit(t.Context(), AuditEvent{Actor: "mallory", Action: "op.run"})
			wantHeadRefusal(t, err, path, reason)
			after := rawRecords(t, s)
			if len(after) != 3 {
				t.Fatalf("%d records after the refusal, want 3", len(after))
			}
			for seq, raw := range before {
				if !bytes.Equal(after[seq], raw) {
					t.Fatalf("record %d was overwritten:\nbefore %s\nafter  %s", seq, raw, after[seq])
				}
			}
		})
	}
}

// The put itself refuses an existing seq, whatever checked the head before.
func TestAnExistingRecordIsNeverOverwritten(t *testing.T) {
	s, _, path := openTest(t)
	appendN(t, s, 2)
	before := rawRecords(t, s)
	err := s.db.Update(func(tx *bolt.Tx) error {
		return putNewRecord(tx.Bucket(bAudit), 1, []byte(`{"forged":true}`), path)
	})
	if !errors.Is(err, ErrAuditHeadBroken) || !strings.Contains(err.Error(), "audit record 1 already exists") {
		t.Fatalf("putNewRecord over record 1: %v", err)
	}
	if after := rawRecords(t, s); !bytes.Equal(after[1], before[1]) {
		t.Fatalf("record 1 was overwritten: %s", after[1])
	}
	if _, err := s.VerifyAudit(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// A writer refuses the database at Open; readers still open it, so verify
// and export can show what is wrong.
func TestOpenRefusesABrokenHeadForWriting(t *testing.T) {
	path, _ := buildChain(t, 3)
	broken := tamperTx(t, path, func(tx *bolt.Tx) error { return tx.Bucket(bMeta).Delete(kAuditHead) })
	_, err := Open(broken, testOptions(newFakeClock()))
	wantHeadRefusal(t, err, broken, "is missing but the chain has records up to 3")
	ro, err := Open(broken, Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("read-only open: %v", err)
	}
	_ = ro.Close()
	// A fresh database (no records, no head) is not a broken one.
	s, _, _ := openTest(t)
	if _, err := s.AppendAudit(t.Context(), AuditEvent{Actor: "alice", Action: "first"}); err != nil {
		t.Fatal(err)
	}
}

// The head and the record are written in one transaction: a writer that
// fails after its append (as a kill -9 before commit would) leaves neither.
func TestAppendCommitsRecordAndHeadTogether(t *testing.T) {
	s, _, _ := openTest(t)
	appendN(t, s, 2)
	boom := errors.New("boom")
	err := s.Update(t.Context(), func(tx *Tx) error {
		if _, err := tx.Append(AuditEvent{Actor: "alice", Action: "op.run"}); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatal(err)
	}
	rep, err := s.VerifyAudit(t.Context())
	if err != nil || rep.Records != 2 || rep.HeadSeq != 2 {
		t.Fatalf("after a rolled-back append: %+v %v", rep, err)
	}
}

func TestRepairHead(t *testing.T) {
	path, recs := buildChain(t, 3)
	opts := testOptions(newFakeClock())

	t.Run("missing head", func(t *testing.T) {
		broken := tamperTx(t, path, func(tx *bolt.Tx) error { return tx.Bucket(bMeta).Delete(kAuditHead) })
		rep, err := RepairHeadFile(t.Context(), broken, "os:carol", opts)
		if err != nil {
			t.Fatal(err)
		}
		if !rep.Repaired || rep.FromHash != "" || rep.ToSeq != 3 || rep.ToHash != recs[2].Hash || rep.Record.Seq != 4 || rep.Record.PrevHash != recs[2].Hash {
			t.Fatalf("repair: %+v", rep)
		}
		s, err := Open(broken, opts)
		if err != nil {
			t.Fatalf("open after the repair: %v", err)
		}
		defer s.Close()
		v, err := s.VerifyAudit(t.Context())
		if err != nil || v.Records != 4 || v.Head != rep.Record.Hash {
			t.Fatalf("verify after the repair: %+v %v", v, err)
		}
		got, err := s.QueryAudit(t.Context(), AuditQuery{Action: "audit head repaired"})
		if err != nil || len(got) != 1 {
			t.Fatalf("the repair is not in the trail: %v %v", got, err)
		}
		d := got[0].Detail
		if got[0].Actor != "os:carol" || d["from"] != "missing" || d["to"] != "3 "+recs[2].Hash || !strings.Contains(d["problem"], "is missing") {
			t.Fatalf("repair record %+v", got[0])
		}
		for i, r := range recs {
			q, _ := s.QueryAudit(t.Context(), AuditQuery{OpID: r.OpID})
			if len(q) != 1 || q[0].Hash != r.Hash {
				t.Fatalf("record %d changed: %+v", i+1, q)
			}
		}
		if _, err := s.AppendAudit(t.Context(), AuditEvent{Actor: "alice", Action: "after"}); err != nil {
			t.Fatalf("append after the repair: %v", err)
		}
	})

	t.Run("edited head", func(t *testing.T) {
		broken := tamperTx(t, path, func(tx *bolt.Tx) error {
			return writeHead(tx.Bucket(bMeta), auditHead{Seq: 2, Time: recs[1].Time, Hash: recs[1].Hash})
		})
		rep, err := RepairHeadFile(t.Context(), broken, "os:carol", opts)
		if err != nil || !rep.Repaired || rep.FromSeq != 2 || rep.FromHash != recs[1].Hash || rep.Record.Detail["from"] != "2 "+recs[1].Hash {
			t.Fatalf("repair: %+v %v", rep, err)
		}
		if v, err := VerifyFile(t.Context(), broken); err != nil || v.Records != 4 {
			t.Fatalf("verify after the repair: %+v %v", v, err)
		}
	})

	t.Run("a matching head is left alone", func(t *testing.T) {
		dst := tamperTx(t, path, func(*bolt.Tx) error { return nil })
		rep, err := RepairHeadFile(t.Context(), dst, "os:carol", opts)
		if err != nil || rep.Repaired {
			t.Fatalf("repair of a good head: %+v %v", rep, err)
		}
		if v, err := VerifyFile(t.Context(), dst); err != nil || v.Records != 3 {
			t.Fatalf("verify: %+v %v", v, err)
		}
	})

	refused := []struct {
		name   string
		fn     func(tx *bolt.Tx) error
		reason string
	}{
		{"an edited record", func(tx *bolt.Tx) error {
			a := tx.Bucket(bAudit)
			v := bytes.Replace(a.Get(u64(2)), []byte(`"actor":"user1"`), []byte(`"actor":"userX"`), 1)
			if err := a.Put(u64(2), v); err != nil {
				return err
			}
			return tx.Bucket(bMeta).Delete(kAuditHead)
		}, "the audit chain itself is broken"},
		{"the last record removed with the head", func(tx *bolt.Tx) error {
			if err := tx.Bucket(bAudit).Delete(u64(3)); err != nil {
				return err
			}
			return tx.Bucket(bMeta).Delete(kAuditHead)
		}, "the time index names record 3 but the chain ends at record 2"},
		{"the last record removed, the head kept", func(tx *bolt.Tx) error {
			if err := tx.DeleteBucket(bAuditByTime); err != nil {
				return err
			}
			if _, err := tx.CreateBucket(bAuditByTime); err != nil {
				return err
			}
			return tx.Bucket(bAudit).Delete(u64(3))
		}, "the audit head names record 3 but the chain ends at record 2: records were removed from the end"},
	}
	for _, c := range refused {
		t.Run("refuses "+c.name, func(t *testing.T) {
			broken := tamperTx(t, path, c.fn)
			_, err := RepairHeadFile(t.Context(), broken, "os:carol", opts)
			if err == nil || !strings.Contains(err.Error(), "refusing to repair") || !strings.Contains(err.Error(), c.reason) || !strings.Contains(err.Error(), "nothing was changed") {
				t.Fatalf("got %v, want a refusal about %q", err, c.reason)
			}
			// Nothing changed: the file still fails verification, without a
			// repair record.
			if _, err := VerifyFile(t.Context(), broken); err == nil {
				t.Fatal("the refused repair made the file verify")
			}
			ro, err := OpenReadOnly(broken, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer ro.Close()
			if got, _ := ro.QueryAudit(t.Context(), AuditQuery{Action: "audit head repaired"}); len(got) != 0 {
				t.Fatalf("a refused repair appended %+v", got)
			}
		})
	}
}
