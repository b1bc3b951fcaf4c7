package state

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// v0LastHash reads the chain head of an unmigrated file with raw bbolt.
func v0LastHash(t *testing.T, path string) (uint64, string) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var seq uint64
	var hash string
	if err := db.View(func(tx *bolt.Tx) error {
		if tx.Bucket(bMeta) != nil {
			return fmt.Errorf("fixture already has a meta bucket: not v0")
		}
		_, v := tx.Bucket(bAudit).Cursor().Last()
		rec, err := decodeRecord(v)
		seq, hash = rec.Seq, rec.Hash
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return seq, hash
}

func TestMigrateV0Fixture(t *testing.T) {
	t.Run("shipped fixture", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "v0.db")
		copyFile(t, v0FixturePath, path)
		checkV0Migration(t, path)
	})
	t.Run("regenerated fixture", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "v0.db")
		if err := writeV0Fixture(path); err != nil {
			t.Fatal(err)
		}
		checkV0Migration(t, path)
	})
}

func checkV0Migration(t *testing.T, path string) {
	ctx := t.Context()
	headSeq, headHash := v0LastHash(t, path)
	if headSeq != 12 {
		t.Fatalf("fixture has %d audit records, want 12", headSeq)
	}

	// Unmigrated: read-only Open refuses with the fix; VerifyFile works.
	ro := testOptions(newFakeClock())
	ro.ReadOnly = true
	if _, err := Open(path, ro); err == nil || !strings.Contains(err.Error(), "needs migration") {
		t.Errorf("read-only open of v0: err = %v, want 'needs migration'", err)
	}
	if rep, err := VerifyFile(ctx, path); err != nil || rep.Records != 12 || rep.Head != headHash {
		t.Errorf("VerifyFile(v0) = %+v, %v", rep, err)
	}

	clock := newFakeClock()
	clock.Set(v0Base.Add(-24 * time.Hour)) // a clock behind the old records
	opts := testOptions(clock)
	s, err := Open(path, opts)
	if err != nil {
		t.Fatalf("Open(v0): %v", err)
	}
	defer s.Close()
	if s.SchemaVersion() != 1 {
		t.Errorf("SchemaVersion = %d, want 1", s.SchemaVersion())
	}

	// The chain is untouched and verifiable, and the head was built.
	rep, err := s.VerifyAudit(ctx)
	if err != nil || rep.Records != 12 || rep.Head != headHash {
		t.Fatalf("VerifyAudit after migration = %+v, %v; want 12 records, head %s", rep, err, headHash)
	}

	mustView(t, s, func(tx *Tx) error {
		// Renamed state.
		op, err := tx.Operation("op-2")
		if err != nil {
			return err
		}
		if op.State != StateAwaitingApproval || op.Args["to"] != "1.37.2" || op.Requester != "bob" {
			t.Errorf("op-2 after migration = %+v", op)
		}
		// Ops indexes built.
		var ids []string
		ops, err := tx.Operations(OpFilter{Cluster: "prod"})
		for _, o := range ops {
			ids = append(ids, o.ID)
		}
		if strings.Join(ids, " ") != "op-4 op/3 op-1" {
			t.Errorf("Operations(prod) = %v", ids)
		}
		waiting, _ := tx.Operations(OpFilter{States: []OpState{StateAwaitingApproval}})
		if len(waiting) != 1 || waiting[0].ID != "op-2" {
			t.Errorf("awaiting ops = %v", waiting)
		}
		// Approvals re-keyed: "op/3/bob" was ambiguous in v0.
		for op, user := range map[string]string{"op-1": "bob", "op-2": "alice", "op/3": "bob"} {
			as, err := tx.Approvals(op)
			if err != nil || len(as) != 1 || as[0].User != user {
				t.Errorf("Approvals(%s) = %+v, %v", op, as, err)
			}
		}
		if as, _ := tx.Approvals("op"); len(as) != 0 {
			t.Errorf("Approvals(op) = %+v, want none", as)
		}
		if l, err := tx.Lock("prod"); err != nil || l == nil || l.OpID != "op/3" {
			t.Errorf("Lock(prod) = %+v, %v", l, err)
		}
		// Alerts moved into kv.
		if v, err := tx.GetKV("alerts", "fp-bbb"); err != nil || !strings.Contains(string(v), "12:20") {
			t.Errorf("kv alerts/fp-bbb = %q, %v", v, err)
		}
		if tx.tx.Bucket([]byte("alerts")) != nil {
			t.Error("top-level v0 alerts bucket still exists")
		}
		return err
	})

	// Audit indexes built: compare with brute force.
	var all []AuditRecord
	if err := s.IterateAudit(ctx, func(r AuditRecord) error { all = append(all, r); return nil }); err != nil {
		t.Fatal(err)
	}
	for _, q := range []AuditQuery{
		{Cluster: "prod"}, {Cluster: "staging"}, {Actor: "talosbot"}, {Action: "op.plan"},
		{OpID: "op-1"}, {OpID: "op/3"}, {Result: "denied"},
		{Since: v0Base.Add(115 * time.Minute)}, // record 8 (110 min) sits after record 7 (120 min)
		{Until: v0Base.Add(115 * time.Minute)},
		{Since: v0Base.Add(100 * time.Minute), Until: v0Base.Add(130 * time.Minute)},
	} {
		got, err := s.QueryAudit(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		if want := refQuery(all, q); fmt.Sprint(seqs(got)) != fmt.Sprint(seqs(want)) {
			t.Errorf("QueryAudit(%+v) = %v, want %v", q, seqs(got), seqs(want))
		}
	}

	// The chain continues from the v0 head; time does not go back.
	rec, err := s.AppendAudit(ctx, AuditEvent{Actor: "alice", Action: "op.approve", Cluster: "staging", OpID: "op-2"})
	if err != nil {
		t.Fatal(err)
	}
	if rec.Seq != 13 || rec.PrevHash != headHash || rec.Time.Before(v0Base.Add(200*time.Minute)) {
		t.Errorf("first v1 record = %+v", rec)
	}
	mustUpdate(t, s, func(tx *Tx) error {
		_, err := tx.Transition("op-2", StateApproved, nil)
		return err
	})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// Reopening does not migrate again.
	s2, err := Open(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if rep, err := s2.VerifyAudit(ctx); err != nil || rep.Records != 13 {
		t.Errorf("after reopen: %+v, %v", rep, err)
	}
	if got, _ := s2.QueryAudit(ctx, AuditQuery{Cluster: "prod", Limit: 100}); len(got) != 10 {
		t.Errorf("prod records after reopen = %d, want 10 (index not duplicated)", len(got))
	}
}

// A migration that fails half way leaves the v0 file exactly as it was.
func TestMigrationFailureChangesNothing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "v0.db")
	copyFile(t, v0FixturePath, path)
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		// Sorts after the good operations, so their index entries are
		// written before the failure.
		return tx.Bucket(bOperations).Put([]byte("zz-broken"), []byte("{not json"))
	}); err != nil {
		t.Fatal(err)
	}
	_ = db.Close()

	_, err = Open(path, testOptions(newFakeClock()))
	if err == nil || !strings.Contains(err.Error(), "zz-broken") || !strings.Contains(err.Error(), "nothing was changed") {
		t.Fatalf("Open = %v, want a migration error naming the bad record", err)
	}
	db, err = bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.View(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bMeta, bOpsByCluster, bAuditByCluster, bKV} {
			if tx.Bucket(b) != nil {
				t.Errorf("failed migration left bucket %s", b)
			}
		}
		if tx.Bucket([]byte("alerts")) == nil {
			t.Error("failed migration removed the v0 alerts bucket")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
