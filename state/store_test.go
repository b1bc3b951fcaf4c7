package state

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

func TestLockContention(t *testing.T) {
	s, clock, _ := openTest(t)
	since := clock.Now()
	lockA := Lock{Cluster: "prod", OpID: "op-a", Holder: "alice", Command: "upgrade talos"}
	mustUpdate(t, s, func(tx *Tx) error { return tx.AcquireLock(lockA) })
	clock.Advance(time.Minute)

	// Same op again: no-op, Since unchanged.
	mustUpdate(t, s, func(tx *Tx) error { return tx.AcquireLock(lockA) })

	err := s.Update(t.Context(), func(tx *Tx) error {
		return tx.AcquireLock(Lock{Cluster: "prod", OpID: "op-b", Holder: "bob", Command: "upgrade kubernetes"})
	})
	var le *LockedError
	if !errors.As(err, &le) || !errors.Is(err, ErrLocked) {
		t.Fatalf("second op: err = %v, want *LockedError", err)
	}
	if le.Holder.OpID != "op-a" || !le.Holder.Since.Equal(since) {
		t.Errorf("holder = %+v, want op-a since %s", le.Holder, since)
	}
	for _, want := range []string{"op-a", "upgrade talos", "alice", since.Format(time.RFC3339)} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}

	// Another cluster is independent.
	mustUpdate(t, s, func(tx *Tx) error {
		return tx.AcquireLock(Lock{Cluster: "staging", OpID: "op-b", Holder: "bob", Command: "x"})
	})

	// Only the holder releases.
	if err := s.Update(t.Context(), func(tx *Tx) error { return tx.ReleaseLock("prod", "op-b") }); err == nil {
		t.Error("op-b released op-a's lock")
	}
	mustUpdate(t, s, func(tx *Tx) error { return tx.ReleaseLock("prod", "op-a") })
	mustUpdate(t, s, func(tx *Tx) error { return tx.ReleaseLock("prod", "op-a") }) // free: no-op
	mustUpdate(t, s, func(tx *Tx) error {
		return tx.AcquireLock(Lock{Cluster: "prod", OpID: "op-b", Holder: "bob", Command: "upgrade kubernetes"})
	})
	mustView(t, s, func(tx *Tx) error {
		l, err := tx.Lock("prod")
		if err != nil {
			return err
		}
		if l == nil || l.OpID != "op-b" || !l.Since.Equal(clock.Now()) {
			t.Errorf("lock = %+v, want op-b since %s", l, clock.Now())
		}
		return nil
	})
}

// TestFailedUpdateChangesNothing: every write method inside an Update that
// returns an error (or panics) leaves the database as it was.
func TestFailedUpdateChangesNothing(t *testing.T) {
	s, _, _ := openTest(t)
	mustUpdate(t, s, func(tx *Tx) error {
		if err := tx.PutOperation(&Operation{ID: "op1", Cluster: "prod", Command: "upgrade talos"}); err != nil {
			return err
		}
		_, err := tx.Append(AuditEvent{Actor: "alice", Action: "op.plan", Cluster: "prod", OpID: "op1"})
		return err
	})
	snapshot := func() []byte {
		var buf bytes.Buffer
		mustView(t, s, func(tx *Tx) error {
			// Dump every bucket's keys and values (not the file: page
			// allocation may differ while content does not).
			return tx.tx.ForEach(func(name []byte, b *bolt.Bucket) error {
				return dumpBucket(&buf, name, b)
			})
		})
		return buf.Bytes()
	}
	before := snapshot()

	boom := errors.New("boom")
	writeAll := func(tx *Tx) {
		t.Helper()
		check := func(err error) {
			if err != nil {
				t.Fatalf("write inside tx: %v", err)
			}
		}
		check(tx.PutOperation(&Operation{ID: "op2", Cluster: "prod"}))
		_, err := tx.Transition("op1", StateAwaitingApproval, nil)
		check(err)
		_, err = tx.Append(AuditEvent{Actor: "alice", Action: "op.approve", Cluster: "prod", OpID: "op1"})
		check(err)
		check(tx.AcquireLock(Lock{Cluster: "prod", OpID: "op1", Holder: "alice"}))
		check(tx.PutApproval(Approval{OpID: "op1", User: "alice", Digest: "d"}))
		check(tx.PutKV("alerts", "fp1", []byte("x")))
		check(tx.AppendLog("op1", "line"))
	}
	err := s.Update(t.Context(), func(tx *Tx) error {
		writeAll(tx)
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Update returned %v, want boom", err)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("panic inside Update was swallowed")
			}
		}()
		_ = s.Update(t.Context(), func(tx *Tx) error {
			writeAll(tx)
			panic("mid-transaction panic")
		})
	}()
	if after := snapshot(); !bytes.Equal(before, after) {
		t.Errorf("failed Update changed the database:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if rep, err := s.VerifyAudit(t.Context()); err != nil || rep.Records != 1 {
		t.Errorf("VerifyAudit = %+v, %v; want 1 record", rep, err)
	}
}

func dumpBucket(buf *bytes.Buffer, name []byte, b *bolt.Bucket) error {
	return b.ForEach(func(k, v []byte) error {
		if v == nil {
			if nb := b.Bucket(k); nb != nil {
				return dumpBucket(buf, append(append(clone(name), '/'), k...), nb)
			}
		}
		buf.WriteString(string(name) + " " + string(k) + "=" + string(v) + "\n")
		return nil
	})
}

func TestOpenCreatesPrivateFile(t *testing.T) {
	s, _, path := openTest(t)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode = %v, want 0600", fi.Mode().Perm())
	}
	if s.SchemaVersion() != CurrentSchema {
		t.Errorf("SchemaVersion = %d, want %d", s.SchemaVersion(), CurrentSchema)
	}
	_ = s.Close()

	// A file that is readable by others is tightened.
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	s2, err := Open(path, testOptions(newFakeClock()))
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode after reopen = %v, want 0600", fi.Mode().Perm())
	}
}

func TestOpenRefusesNewerSchema(t *testing.T) {
	s, _, path := openTest(t)
	_ = s.Close()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bMeta).Put(kSchemaVersion, []byte("2"))
	}); err != nil {
		t.Fatal(err)
	}
	_ = db.Close()

	for _, ro := range []bool{false, true} {
		opts := testOptions(newFakeClock())
		opts.ReadOnly = ro
		_, err = Open(path, opts)
		if !errors.Is(err, ErrSchemaTooNew) {
			t.Fatalf("Open(readOnly=%v) err = %v, want ErrSchemaTooNew", ro, err)
		}
		if !strings.Contains(err.Error(), "version 2") || !strings.Contains(err.Error(), "up to 1") {
			t.Errorf("error %q does not name both versions", err)
		}
	}
	if _, err := VerifyFile(t.Context(), path); !errors.Is(err, ErrSchemaTooNew) {
		t.Errorf("VerifyFile err = %v, want ErrSchemaTooNew", err)
	}
}

func TestReadOnlyAndFileLock(t *testing.T) {
	s, _, path := openTest(t)
	mustUpdate(t, s, func(tx *Tx) error { return tx.PutKV("alerts", "a", []byte("1")) })

	// The writer holds an exclusive file lock: a second open times out with
	// a message that says what to do.
	opts := testOptions(newFakeClock())
	opts.Timeout = 50 * time.Millisecond
	if _, err := Open(path, opts); err == nil || !strings.Contains(err.Error(), "another talosbot") {
		t.Errorf("second open: err = %v, want lock timeout naming another talosbot", err)
	}
	_ = s.Close()

	opts.ReadOnly = true
	ro, err := Open(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if err := ro.Update(t.Context(), func(*Tx) error { return nil }); !errors.Is(err, ErrReadOnly) {
		t.Errorf("Update on read-only store: %v, want ErrReadOnly", err)
	}
	mustView(t, ro, func(tx *Tx) error {
		v, err := tx.GetKV("alerts", "a")
		if string(v) != "1" {
			t.Errorf("GetKV = %q, %v", v, err)
		}
		return err
	})
	if _, err := Open(filepath.Join(t.TempDir(), "missing.db"), opts); err == nil {
		t.Error("read-only open of a missing file succeeded")
	}
}

func TestOperationsFilter(t *testing.T) {
	s, clock, _ := openTest(t)
	type spec struct {
		id, cluster, command string
		path                 []OpState
	}
	specs := []spec{
		{"o1", "prod", "upgrade talos", []OpState{StateRunning, StateSucceeded}},
		{"o2", "staging", "upgrade talos", []OpState{StateRunning, StateFailed}},
		{"o3", "prod", "health", nil},
		{"o4", "prod", "upgrade talos", []OpState{StateAwaitingApproval}},
		{"o5", "staging", "health", []OpState{StateRunning}},
	}
	for _, sp := range specs {
		clock.Advance(time.Minute)
		mustUpdate(t, s, func(tx *Tx) error {
			if err := tx.PutOperation(&Operation{ID: sp.id, Cluster: sp.cluster, Command: sp.command}); err != nil {
				return err
			}
			for _, st := range sp.path {
				if _, err := tx.Transition(sp.id, st, nil); err != nil {
					return err
				}
			}
			return nil
		})
	}
	created := func(i int) time.Time { return newFakeClock().Now().Add(time.Duration(i) * time.Minute) }
	cases := []struct {
		f    OpFilter
		want string
	}{
		{OpFilter{}, "o5 o4 o3 o2 o1"},
		{OpFilter{Cluster: "prod"}, "o4 o3 o1"},
		{OpFilter{Cluster: "prod", Command: "upgrade talos"}, "o4 o1"},
		{OpFilter{States: []OpState{StateRunning, StateFailed}}, "o5 o2"},
		{OpFilter{Cluster: "staging", States: []OpState{StateRunning}}, "o5"},
		{OpFilter{Since: created(3)}, "o5 o4 o3"},
		{OpFilter{Cluster: "prod", Since: created(3)}, "o4 o3"},
		{OpFilter{Limit: 2}, "o5 o4"},
		{OpFilter{Cluster: "nope"}, ""},
		{OpFilter{Cluster: "pro"}, ""}, // prefix of another name
	}
	for _, c := range cases {
		var got []string
		mustView(t, s, func(tx *Tx) error {
			ops, err := tx.Operations(c.f)
			for _, op := range ops {
				got = append(got, op.ID)
			}
			return err
		})
		if g := strings.Join(got, " "); g != c.want {
			t.Errorf("Operations(%+v) = %q, want %q", c.f, g, c.want)
		}
	}

	// Moving an op to another cluster moves its index entry.
	mustUpdate(t, s, func(tx *Tx) error {
		op, err := tx.Operation("o3")
		if err != nil {
			return err
		}
		op.Cluster = "staging"
		return tx.PutOperation(op)
	})
	mustView(t, s, func(tx *Tx) error {
		prod, _ := tx.Operations(OpFilter{Cluster: "prod"})
		stg, err := tx.Operations(OpFilter{Cluster: "staging"})
		if len(prod) != 2 || len(stg) != 3 {
			t.Errorf("after move: prod %d ops, staging %d, want 2 and 3", len(prod), len(stg))
		}
		all, _ := tx.Operations(OpFilter{})
		if len(all) != 5 {
			t.Errorf("after move: %d ops in the time index, want 5", len(all))
		}
		return err
	})
}

func TestApprovalsAndKV(t *testing.T) {
	s, clock, _ := openTest(t)
	mustUpdate(t, s, func(tx *Tx) error {
		if err := tx.PutApproval(Approval{OpID: "op/1", User: "bob", Digest: "d"}); err != nil {
			return err
		}
		clock.Advance(time.Second)
		if err := tx.PutApproval(Approval{OpID: "op/1", User: "alice", Digest: "d"}); err != nil {
			return err
		}
		// "op" is a prefix of "op/1": its approvals must not mix.
		return tx.PutApproval(Approval{OpID: "op", User: "carol", Digest: "e"})
	})
	mustView(t, s, func(tx *Tx) error {
		as, err := tx.Approvals("op/1")
		if len(as) != 2 || as[0].User != "bob" || as[1].User != "alice" {
			t.Errorf("Approvals(op/1) = %+v, want bob then alice", as)
		}
		return err
	})
	mustUpdate(t, s, func(tx *Tx) error { return tx.DeleteApprovals("op/1") })
	mustView(t, s, func(tx *Tx) error {
		a1, _ := tx.Approvals("op/1")
		a2, err := tx.Approvals("op")
		if len(a1) != 0 || len(a2) != 1 {
			t.Errorf("after delete: %d and %d approvals, want 0 and 1", len(a1), len(a2))
		}
		return err
	})

	mustUpdate(t, s, func(tx *Tx) error {
		if err := tx.PutKV("alerts", "fp1", []byte("v1")); err != nil {
			return err
		}
		return tx.PutKV("alerts", "fp2", nil)
	})
	mustView(t, s, func(tx *Tx) error {
		if v, err := tx.GetKV("alerts", "fp1"); err != nil || string(v) != "v1" {
			t.Errorf("GetKV fp1 = %q, %v", v, err)
		}
		if v, err := tx.GetKV("alerts", "fp2"); err != nil || v == nil {
			t.Errorf("GetKV fp2 = %v, %v; want empty non-nil", v, err)
		}
		if _, err := tx.GetKV("alerts", "nope"); !errors.Is(err, ErrNotFound) {
			t.Errorf("GetKV missing: %v, want ErrNotFound", err)
		}
		if _, err := tx.GetKV("nobucket", "x"); !errors.Is(err, ErrNotFound) {
			t.Errorf("GetKV missing bucket: %v, want ErrNotFound", err)
		}
		var keys []string
		err := tx.ForEachKV("alerts", func(k string, _ []byte) error { keys = append(keys, k); return nil })
		if strings.Join(keys, ",") != "fp1,fp2" {
			t.Errorf("ForEachKV keys = %v", keys)
		}
		return err
	})
	mustUpdate(t, s, func(tx *Tx) error { return tx.DeleteKV("alerts", "fp1") })
	mustView(t, s, func(tx *Tx) error {
		if _, err := tx.GetKV("alerts", "fp1"); !errors.Is(err, ErrNotFound) {
			t.Errorf("after DeleteKV: %v", err)
		}
		return nil
	})
	// Writes on a View transaction fail.
	err := s.View(t.Context(), func(tx *Tx) error { return tx.PutKV("alerts", "x", nil) })
	if err == nil {
		t.Error("PutKV in a View succeeded")
	}
}

func TestLogsAndPrune(t *testing.T) {
	s, clock, _ := openTest(t)
	start := clock.Now()
	mustUpdate(t, s, func(tx *Tx) error {
		if err := tx.AppendLog("op1", "old 1"); err != nil {
			return err
		}
		if err := tx.AppendLog("op2", "old only"); err != nil {
			return err
		}
		return tx.AppendLog("op1", "old 2")
	})
	clock.Advance(time.Hour)
	mustUpdate(t, s, func(tx *Tx) error { return tx.AppendLog("op1", "new") })
	lines, err := s.Logs(t.Context(), "op1")
	if err != nil || len(lines) != 3 || lines[0].Line != "old 1" || lines[2].Line != "new" || !lines[0].Time.Equal(start) {
		t.Fatalf("Logs = %+v, %v", lines, err)
	}
	n, err := s.PruneLogs(t.Context(), start.Add(time.Minute))
	if err != nil || n != 3 {
		t.Fatalf("PruneLogs = %d, %v; want 3", n, err)
	}
	lines, _ = s.Logs(t.Context(), "op1")
	if len(lines) != 1 || lines[0].Line != "new" {
		t.Errorf("op1 after prune: %+v", lines)
	}
	if lines, _ := s.Logs(t.Context(), "op2"); len(lines) != 0 {
		t.Errorf("op2 after prune: %+v", lines)
	}
	mustView(t, s, func(tx *Tx) error {
		if tx.tx.Bucket(bLogs).Bucket([]byte("op2")) != nil {
			t.Error("empty op2 log bucket kept")
		}
		return nil
	})
}
