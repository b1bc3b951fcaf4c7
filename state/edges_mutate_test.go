package state

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// The exact edges of the store's bounds, each stated by the doc comment it
// tests: "older than" and "before" are strict, "since" is inclusive, a log
// line is cut only when it is longer than MaxLogLine, and the index finds any
// cluster name whatever bytes it contains.

// TestAppendLogCutsOnlyPastMaxLogLine: a line of exactly MaxLogLine bytes is
// stored whole; one byte more is cut to MaxLogLine and marked.
func TestAppendLogCutsOnlyPastMaxLogLine(t *testing.T) {
	s, _, _ := openTest(t)
	exact := strings.Repeat("a", MaxLogLine)
	over := strings.Repeat("b", MaxLogLine+1)
	mustUpdate(t, s, func(tx *Tx) error {
		if err := tx.AppendLog("op1", exact); err != nil {
			return err
		}
		return tx.AppendLog("op1", over)
	})
	lines, err := s.Logs(t.Context(), "op1")
	if err != nil || len(lines) != 2 {
		t.Fatalf("Logs = %d lines, %v; want 2", len(lines), err)
	}
	if lines[0].Line != exact {
		t.Errorf("a line of exactly MaxLogLine bytes was changed: %d bytes, ends %q", len(lines[0].Line), lines[0].Line[len(lines[0].Line)-20:])
	}
	if want := over[:MaxLogLine] + " …[truncated]"; lines[1].Line != want {
		t.Errorf("a line one byte over MaxLogLine: %d bytes, want %d (cut and marked)", len(lines[1].Line), len(want))
	}
}

// TestPruneKVKeepsAKeyWrittenAtTheCutoff: PruneKV deletes keys "last put
// before olderThan"; a key put at exactly olderThan is not before it.
func TestPruneKVKeepsAKeyWrittenAtTheCutoff(t *testing.T) {
	s, clock, _ := openTest(t)
	mustUpdate(t, s, func(tx *Tx) error { return tx.PutKV("actions", "early", []byte("1")) })
	clock.Advance(time.Second)
	at := clock.Now()
	mustUpdate(t, s, func(tx *Tx) error { return tx.PutKV("actions", "at-cutoff", []byte("2")) })
	clock.Advance(time.Hour)
	n, err := s.PruneKV(t.Context(), "actions", at, nil)
	if err != nil || n != 1 {
		t.Fatalf("PruneKV = %d, %v; want 1 (only the key put before the cutoff)", n, err)
	}
	if got := kvKeys(t, s, "actions"); !slices.Equal(got, []string{"at-cutoff"}) {
		t.Errorf("keys after prune = %v; want [at-cutoff]", got)
	}
}

// TestOperationsSinceIncludesItsOwnInstant: OpFilter.Since means
// CreatedAt >= Since, with and without a cluster (two different indexes).
func TestOperationsSinceIncludesItsOwnInstant(t *testing.T) {
	s, clock, _ := openTest(t)
	mustUpdate(t, s, func(tx *Tx) error { return tx.PutOperation(&Operation{ID: "before", Cluster: "prod"}) })
	clock.Advance(time.Minute)
	since := clock.Now()
	mustUpdate(t, s, func(tx *Tx) error { return tx.PutOperation(&Operation{ID: "at", Cluster: "prod"}) })
	clock.Advance(time.Minute)
	mustUpdate(t, s, func(tx *Tx) error { return tx.PutOperation(&Operation{ID: "after", Cluster: "prod"}) })
	for _, f := range []OpFilter{{Since: since}, {Cluster: "prod", Since: since}} {
		mustView(t, s, func(tx *Tx) error {
			ops, err := tx.Operations(f)
			if err != nil {
				return err
			}
			if got := opIDs(ops); !slices.Equal(got, []string{"after", "at"}) {
				t.Errorf("Operations(cluster %q, since) = %v; want [after at]", f.Cluster, got)
			}
			return nil
		})
	}
}

// TestOperationsOfClustersWhoseNamesEndInFF: the per-cluster index scan
// finds a cluster's operations whatever bytes its name holds, including
// names whose index prefix ends in 0xff bytes (the scan's upper bound must
// carry into an earlier byte) and a name of 255 0xff bytes, whose whole
// prefix but the first byte is 0xff. Neighbouring clusters sort on either
// side so a wrong bound lands on one of them.
func TestOperationsOfClustersWhoseNamesEndInFF(t *testing.T) {
	s, clock, _ := openTest(t)
	clusters := []string{
		"a",
		"a\xff",
		"a\xff\xff",
		"b",
		strings.Repeat("\xff", 255),
		strings.Repeat("\x00", 256),
		strings.Repeat("z", 300),
	}
	for i, c := range clusters {
		for j := range 2 {
			id := string(rune('A'+i)) + string(rune('0'+j))
			mustUpdate(t, s, func(tx *Tx) error { return tx.PutOperation(&Operation{ID: id, Cluster: c}) })
			clock.Advance(time.Second)
		}
	}
	mustView(t, s, func(tx *Tx) error {
		for i, c := range clusters {
			ops, err := tx.Operations(OpFilter{Cluster: c})
			if err != nil {
				return err
			}
			want := []string{string(rune('A'+i)) + "1", string(rune('A'+i)) + "0"}
			if got := opIDs(ops); !slices.Equal(got, want) {
				t.Errorf("Operations(cluster %q (%d bytes)) = %v; want %v", clip(c), len(c), got, want)
			}
		}
		return nil
	})
}

// TestApprovalsAtTheSameInstantInUserOrder: "oldest first", and approvals
// given at the same instant in the order of their users' names, so the
// answer does not depend on the order they were written in.
func TestApprovalsAtTheSameInstantInUserOrder(t *testing.T) {
	s, clock, _ := openTest(t)
	at := clock.Now()
	mustUpdate(t, s, func(tx *Tx) error {
		for _, u := range []string{"carol", "alice", "bob"} {
			if err := tx.PutApproval(Approval{OpID: "op1", User: u, At: at}); err != nil {
				return err
			}
		}
		return tx.PutApproval(Approval{OpID: "op1", User: "aaron", At: at.Add(time.Second)})
	})
	mustView(t, s, func(tx *Tx) error {
		as, err := tx.Approvals("op1")
		if err != nil {
			return err
		}
		var got []string
		for _, a := range as {
			got = append(got, a.User)
		}
		if want := []string{"alice", "bob", "carol", "aaron"}; !slices.Equal(got, want) {
			t.Errorf("Approvals = %v; want %v", got, want)
		}
		return nil
	})
}

func opIDs(ops []*Operation) []string {
	var ids []string
	for _, op := range ops {
		ids = append(ids, op.ID)
	}
	return ids
}

func clip(s string) string {
	if len(s) > 12 {
		return s[:12] + "…"
	}
	return s
}

// TestOpenReadOnlyZeroTimeoutWaitsTheDefault: a zero timeout means
// DefaultVerifyTimeout (the CLI's short wait), not Open's zero (its longer
// DefaultTimeout): with the bot holding the file, the CLI gets ErrLockedByBot
// naming the wait it gave up after.
func TestOpenReadOnlyZeroTimeoutWaitsTheDefault(t *testing.T) {
	_, _, path := openTest(t) // held open (and locked) until the test ends
	done := make(chan error, 1)
	go func() {
		s, err := OpenReadOnly(path, 0)
		if err == nil {
			_ = s.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		// The refusal names the wait it gave up after.
		if !errors.Is(err, ErrLockedByBot) || !strings.Contains(err.Error(), "for more than "+DefaultVerifyTimeout.String()) {
			t.Fatalf("OpenReadOnly(locked file, 0) = %v; want ErrLockedByBot after %s", err, DefaultVerifyTimeout)
		}
	case <-time.After(10 * DefaultVerifyTimeout):
		t.Fatalf("OpenReadOnly(locked file, 0) still waiting after %s; a zero timeout must mean DefaultVerifyTimeout (%s)", 10*DefaultVerifyTimeout, DefaultVerifyTimeout)
	}
}
