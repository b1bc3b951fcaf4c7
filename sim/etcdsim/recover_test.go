package etcdsim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// snapshotTo writes m's snapshot (as `etcdctl snapshot save` gets it) to path.
func snapshotTo(t *testing.T, ctx context.Context, m *Member, path string) []byte {
	t.Helper()
	rc, err := m.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return data
}

// votersAndLeader describes the membership m sees: voting member names, learners, and whether
// every running member in ms agrees on one leader that is a voter.
func votersAndLeader(ctx context.Context, m *Member, ms []*Member) ([]string, error) {
	list, err := m.MemberList(ctx)
	if err != nil {
		return nil, err
	}
	var voters []string
	for _, pm := range list.Members {
		if pm.IsLearner {
			return nil, fmt.Errorf("%s is still a learner", pm.Name)
		}
		voters = append(voters, pm.Name)
	}
	slices.Sort(voters)
	if _, err := agreedStatusLeader(ctx, ms); err != nil {
		return nil, err
	}
	return voters, nil
}

// TestLoseQuorumBootstrapFromSnapshotAndRejoin is Talos's disaster recovery on the real etcd:
// a snapshot, data lost on two of three members, the survivor without a leader, Bootstrap
// with the snapshot on a wiped member (etcdutl restore), the other wiped member joining as a
// learner and promoted, and the survivor joining only once its stale data is wiped.
func TestLoseQuorumBootstrapFromSnapshotAndRejoin(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3)
	ctx := testCtx(t, 3*time.Minute)
	cli, err := c.Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if _, err := cli.Put(ctx, "/registry/before", "kept"); err != nil {
		t.Fatal(err)
	}
	ms := c.Members()
	a, b, survivor := ms[0], ms[1], ms[2]
	snapshotTo(t, ctx, a, a.RecoverySnapshotPath())
	if _, err := cli.Put(ctx, "/registry/after", "lost"); err != nil {
		t.Fatal(err)
	}

	for _, m := range []*Member{a, b} {
		if err := m.Wipe(); err != nil {
			t.Fatal(err)
		}
		if !m.DataEmpty() || m.Running() || !m.Removed() {
			t.Fatalf("%s after Wipe: empty=%v running=%v removed=%v", m.Name(), m.DataEmpty(), m.Running(), m.Removed())
		}
	}
	if _, err := os.Stat(a.RecoverySnapshotPath()); err != nil {
		t.Fatalf("Wipe removed the uploaded snapshot next to the data dir: %v", err)
	}
	waitFor(t, 10*time.Second, "survivor without a leader", func() error {
		if err := survivor.Healthy(ctx); !errors.Is(err, rpctypes.ErrNoLeader) {
			return fmt.Errorf("Healthy = %v", err)
		}
		return nil
	})
	if err := b.JoinCluster(ctx); err == nil || b.Running() {
		t.Fatalf("JoinCluster without quorum = %v (running %v), want an error", err, b.Running())
	}

	// The survivor has data: neither bootstrap nor join.
	if _, err := survivor.Bootstrap(ctx, true, false); !errors.Is(err, ErrDataPresent) {
		t.Fatalf("Bootstrap on the member with data = %v, want ErrDataPresent", err)
	}
	// No snapshot uploaded on b.
	if _, err := b.Bootstrap(ctx, true, false); err == nil || !strings.Contains(err.Error(), "error verifying snapshot") {
		t.Fatalf("Bootstrap without a snapshot = %v, want \"error verifying snapshot\"", err)
	}
	if !b.DataEmpty() {
		t.Fatal("a failed bootstrap left data behind")
	}

	st, err := a.Bootstrap(ctx, true, false)
	if err != nil {
		t.Fatalf("Bootstrap from snapshot: %v", err)
	}
	if st == nil || st.TotalKey < 1 || st.Revision < 1 {
		t.Fatalf("snapshot status %+v", st)
	}
	if _, err := os.Stat(a.RecoverySnapshotPath()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("snapshot file still there after the restore: %v", err)
	}
	if _, err := a.Bootstrap(ctx, true, false); !errors.Is(err, ErrDataPresent) {
		t.Fatalf("second Bootstrap = %v, want ErrDataPresent", err)
	}
	got, err := a.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if names := memberNames(got); !slices.Equal(names, []string{a.Name()}) {
		t.Fatalf("restored membership %v, want only %s", names, a.Name())
	}

	// b joins through a (the survivor, in the old cluster, answers without a leader).
	waitFor(t, 30*time.Second, "b joins", func() error { return b.JoinCluster(ctx) })
	if err := b.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	// The survivor's stale data keeps it out: it never sees the new leader.
	if err := survivor.Healthy(ctx); !errors.Is(err, rpctypes.ErrNoLeader) {
		t.Fatalf("stale survivor Healthy = %v, want no leader", err)
	}
	if err := survivor.JoinCluster(ctx); !errors.Is(err, ErrDataPresent) {
		t.Fatalf("JoinCluster with stale data = %v, want ErrDataPresent", err)
	}
	if err := survivor.Wipe(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "survivor joins", func() error { return survivor.JoinCluster(ctx) })
	if err := survivor.Promote(ctx); err != nil {
		t.Fatal(err)
	}

	waitFor(t, 30*time.Second, "three voters, one leader", func() error {
		voters, err := votersAndLeader(ctx, a, ms)
		if err != nil {
			return err
		}
		if len(voters) != 3 {
			return fmt.Errorf("voters %v", voters)
		}
		return nil
	})
	if _, err := c.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	rcli, err := c.Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer rcli.Close()
	before, err := rcli.Get(ctx, "/registry/before")
	if err != nil {
		t.Fatal(err)
	}
	after, err := rcli.Get(ctx, "/registry/after")
	if err != nil {
		t.Fatal(err)
	}
	if len(before.Kvs) != 1 || string(before.Kvs[0].Value) != "kept" || len(after.Kvs) != 0 {
		t.Fatalf("after recovery: before=%v after=%v; want the snapshot's key only", before.Kvs, after.Kvs)
	}
}

// TestBootstrapHashCheck: a database copied out of a data directory has no sha256 trailer;
// etcdutl refuses it unless the hash check is skipped (talosctl --recover-skip-hash-check).
func TestBootstrapHashCheck(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 1)
	ctx := testCtx(t, 2*time.Minute)
	m := c.Members()[0]
	cli, err := c.Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if _, err := cli.Put(ctx, "/k", "v"); err != nil {
		t.Fatal(err)
	}
	data := snapshotTo(t, ctx, m, m.RecoverySnapshotPath())
	if err := m.Wipe(); err != nil {
		t.Fatal(err)
	}
	// Without the trailer: a raw db copy.
	if err := os.WriteFile(m.RecoverySnapshotPath(), data[:len(data)-32], 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Bootstrap(ctx, true, false); err == nil || !strings.Contains(err.Error(), "error recovering from the snapshot") {
		t.Fatalf("Bootstrap of a db without hash = %v, want a restore error", err)
	}
	// etcdutl copied the db before checking it and leaves it: the data directory is not empty
	// (on Talos the next Bootstrap answers AlreadyExists), so it must be wiped again.
	if m.DataEmpty() {
		t.Fatal("refused restore left no data; etcdutl changed, check Talos's behaviour again")
	}
	if _, err := m.Bootstrap(ctx, true, true); !errors.Is(err, ErrDataPresent) {
		t.Fatalf("Bootstrap over the half-restored dir = %v, want ErrDataPresent", err)
	}
	if err := m.Wipe(); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Bootstrap(ctx, true, true); err != nil {
		t.Fatalf("Bootstrap with SkipHashCheck: %v", err)
	}
	got, err := m.Status(ctx)
	if err != nil || got.Leader == 0 {
		t.Fatalf("restored member status %v, %v", got, err)
	}
}
