package etcdsim

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// testIPs returns n loopback addresses in a random 127.a.b.0/24, so parallel
// tests (and parallel test binaries) do not fight over 2379/2380.
func testIPs(t testing.TB, n int) []MemberSpec {
	t.Helper()
	r := func(max int64) int64 {
		v, err := rand.Int(rand.Reader, big.NewInt(max))
		if err != nil {
			t.Fatal(err)
		}
		return v.Int64()
	}
	a, b := 1+r(254), r(256)
	specs := make([]MemberSpec, n)
	for i := range specs {
		specs[i] = MemberSpec{Name: fmt.Sprintf("cp-%d", i+1), IP: fmt.Sprintf("127.%d.%d.%d", a, b, i+2)}
	}
	return specs
}

// testLogger sends records to t.Log until the test ends; etcd goroutines
// that log late must not make the testing package panic.
func testLogger(t testing.TB, level slog.Level) *slog.Logger {
	w := &testWriter{t: t}
	t.Cleanup(w.stop)
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}

type testWriter struct {
	mu   sync.Mutex
	t    testing.TB
	done bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

func (w *testWriter) stop() {
	w.mu.Lock()
	w.done = true
	w.mu.Unlock()
}

func testCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func startCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	c, err := Start(testCtx(t, time.Minute), t.TempDir(), testIPs(t, n), Options{Logger: testLogger(t, slog.LevelWarn)})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return c
}

// waitFor polls cond until it returns nil or the deadline passes.
func waitFor(t testing.TB, d time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached within %v: %v", what, d, err)
		}
		<-tick.C
	}
}

// leaderOf returns the leader every listed member reports via Status.
func agreedStatusLeader(ctx context.Context, ms []*Member) (uint64, error) {
	var lead uint64
	for _, m := range ms {
		st, err := m.Status(ctx)
		if err != nil {
			return 0, err
		}
		if st.Leader == 0 {
			return 0, fmt.Errorf("%s has no leader", m.Name())
		}
		if lead != 0 && st.Leader != lead {
			return 0, fmt.Errorf("%s sees leader %x, another member sees %x", m.Name(), st.Leader, lead)
		}
		lead = st.Leader
	}
	return lead, nil
}

func memberNames(resp *clientv3.MemberListResponse) []string {
	var names []string
	for _, m := range resp.Members {
		names = append(names, m.Name)
	}
	slices.Sort(names)
	return names
}

func TestStartOneMember(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 1)
	ctx := testCtx(t, 30*time.Second)
	m := c.Member("cp-1")
	if m == nil || len(c.Members()) != 1 {
		t.Fatalf("want one member cp-1, got %v", c.Members())
	}
	if !m.Running() || m.ID() == 0 {
		t.Fatalf("member not running (running=%v id=%x)", m.Running(), m.ID())
	}
	st, err := m.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Leader != m.ID() || st.Header.MemberId != m.ID() {
		t.Fatalf("single member must lead itself: leader %x member %x id %x", st.Leader, st.Header.MemberId, m.ID())
	}
	if err := m.Healthy(ctx); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(m.ClientURL(), "http://127.") || !strings.HasSuffix(m.ClientURL(), ":2379") {
		t.Fatalf("client URL %q: want http://127.x.y.z:2379", m.ClientURL())
	}
	if _, err := os.Stat(filepath.Join(m.DataDir(), "member", "wal")); err != nil {
		t.Fatalf("data dir not under dir/<name>: %v", err)
	}
}

func TestStartThreeMembersAgreeOnLeader(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3)
	ctx := testCtx(t, 30*time.Second)
	ids := map[uint64]string{}
	for _, m := range c.Members() {
		ids[m.ID()] = m.Name()
	}
	if len(ids) != 3 {
		t.Fatalf("want 3 distinct member IDs, got %v", ids)
	}
	var lead uint64
	waitFor(t, 10*time.Second, "all members report one leader", func() (err error) {
		lead, err = agreedStatusLeader(ctx, c.Members())
		return err
	})
	if _, ok := ids[lead]; !ok {
		t.Fatalf("leader %x is not a member", lead)
	}
	for _, m := range c.Members() {
		list, err := m.MemberList(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got := memberNames(list); !slices.Equal(got, []string{"cp-1", "cp-2", "cp-3"}) {
			t.Fatalf("%s member list: %v", m.Name(), got)
		}
		if err := m.Healthy(ctx); err != nil {
			t.Fatal(err)
		}
		alarms, err := m.AlarmList(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(alarms.Alarms) != 0 {
			t.Fatalf("unexpected alarms: %v", alarms.Alarms)
		}
	}
}

func TestSnapshotIsRealAndRestores(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3)
	ctx := testCtx(t, time.Minute)
	cli, err := c.Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	put, err := cli.Put(ctx, "/talosbot/snapshot-test", "kept")
	if err != nil {
		t.Fatal(err)
	}

	// Take it from a follower: Talos can snapshot through any control plane.
	var src *Member
	for _, m := range c.Members() {
		if st, err := m.Status(ctx); err == nil && st.Leader != m.ID() {
			src = m
		}
	}
	if src == nil {
		t.Fatal("no follower found")
	}
	// A linearizable read through the follower makes sure it applied the put.
	if err := src.Healthy(ctx); err != nil {
		t.Fatal(err)
	}
	rc, err := src.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	if len(data)%512 != sha256.Size {
		t.Fatalf("snapshot size %d: want size %% 512 == 32 (bbolt pages + sha256 trailer)", len(data))
	}
	body, trailer := data[:len(data)-sha256.Size], data[len(data)-sha256.Size:]
	if sum := sha256.Sum256(body); !bytes.Equal(sum[:], trailer) {
		t.Fatalf("sha256 trailer %x does not match body sum %x", trailer, sum)
	}
	path := filepath.Join(t.TempDir(), "snap.db")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}

	lg := zap.NewNop()
	st, err := snapshot.NewV3(lg).Status(path)
	if err != nil {
		t.Fatalf("etcdutl snapshot status: %v", err)
	}
	if st.Revision < put.Header.Revision || st.TotalKey < 1 {
		t.Fatalf("snapshot status %+v: want revision >= %d and at least one key", st, put.Header.Revision)
	}

	// Restore into a fresh data dir and run a one-member cluster from it.
	spec := testIPs(t, 1)[0]
	spec.Name = "restored"
	dir := t.TempDir()
	peer := fmt.Sprintf("http://%s:%d", spec.IP, DefaultPeerPort)
	if err := snapshot.NewV3(lg).Restore(snapshot.RestoreConfig{
		SnapshotPath:        path,
		Name:                spec.Name,
		OutputDataDir:       filepath.Join(dir, spec.Name),
		PeerURLs:            []string{peer},
		InitialCluster:      spec.Name + "=" + peer,
		InitialClusterToken: "restored",
	}); err != nil {
		t.Fatalf("etcdutl snapshot restore: %v", err)
	}
	rcl, err := Start(ctx, dir, []MemberSpec{spec}, Options{Logger: testLogger(t, slog.LevelWarn)})
	if err != nil {
		t.Fatalf("start from restored data: %v", err)
	}
	defer rcl.Close()
	rcli, err := rcl.Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer rcli.Close()
	got, err := rcli.Get(ctx, "/talosbot/snapshot-test")
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Kvs) != 1 || string(got.Kvs[0].Value) != "kept" {
		t.Fatalf("restored cluster lost the key: %v", got.Kvs)
	}
	list, err := rcl.Member("restored").MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := memberNames(list); !slices.Equal(got, []string{"restored"}) {
		t.Fatalf("restored membership %v: want only the restored member", got)
	}
}

func TestLeaveShrinksMembership(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3)
	ctx := testCtx(t, time.Minute)
	lead, err := c.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Leaving from the leader also exercises the hand-off before removal.
	leaver := c.MemberByID(lead)
	if err := leaver.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	if leaver.Running() || !leaver.Removed() {
		t.Fatalf("after Leave: running=%v removed=%v", leaver.Running(), leaver.Removed())
	}
	if _, err := os.Stat(leaver.DataDir()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("data dir not wiped: %v", err)
	}
	var rest []*Member
	for _, m := range c.Members() {
		if m != leaver {
			rest = append(rest, m)
		}
	}
	waitFor(t, 10*time.Second, "remaining members agree on a leader", func() error {
		_, err := agreedStatusLeader(ctx, rest)
		return err
	})
	list, err := rest[0].MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Members) != 2 {
		t.Fatalf("membership after leave: %v", memberNames(list))
	}
	for _, pm := range list.Members {
		if pm.ID == leaver.ID() {
			t.Fatalf("%s still listed", leaver.Name())
		}
	}
	if err := leaver.Restart(ctx); !errors.Is(err, ErrRemoved) {
		t.Fatalf("Restart after Leave: %v, want ErrRemoved", err)
	}
	cli, err := c.Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if _, err := cli.Put(ctx, "k", "v"); err != nil {
		t.Fatalf("two remaining members must still accept writes: %v", err)
	}
}

func TestLeaveRefusesLastMember(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 1)
	m := c.Members()[0]
	if err := m.Leave(testCtx(t, 10*time.Second)); !errors.Is(err, ErrLastMember) {
		t.Fatalf("Leave of the only member: %v, want ErrLastMember", err)
	}
	if !m.Running() {
		t.Fatal("refused Leave must not stop the member")
	}
}

func TestRemoveMember(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3)
	ctx := testCtx(t, time.Minute)
	a, b, d := c.Member("cp-1"), c.Member("cp-2"), c.Member("cp-3")

	// A stopped member is removed at once (etcd's fast path for a down peer).
	if err := d.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := a.RemoveMember(ctx, d.ID()); err != nil {
		t.Fatal(err)
	}
	if !d.Removed() {
		t.Fatal("removed member not marked removed")
	}
	list, err := b.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := memberNames(list); !slices.Equal(got, []string{"cp-1", "cp-2"}) {
		t.Fatalf("membership after removing cp-3: %v", got)
	}
	if err := d.Restart(ctx); !errors.Is(err, ErrRemoved) {
		t.Fatalf("Restart of removed member: %v, want ErrRemoved", err)
	}

	// Removing a running member stops its server, as etcd does.
	if err := a.RemoveMember(ctx, b.ID()); err != nil {
		t.Fatal(err)
	}
	if b.Running() {
		t.Fatal("removed running member still runs")
	}
	list, err = a.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := memberNames(list); !slices.Equal(got, []string{"cp-1"}) {
		t.Fatalf("membership after removing cp-2: %v", got)
	}
}

func TestStopRestartKeepsDataAndRejoins(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3)
	ctx := testCtx(t, time.Minute)
	cli, err := c.Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if _, err := cli.Put(ctx, "before", "1"); err != nil {
		t.Fatal(err)
	}
	lead, err := c.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m := c.MemberByID(lead) // stopping the leader forces a new election
	id := m.ID()
	if err := m.Stop(); err != nil {
		t.Fatal(err)
	}
	if m.Running() {
		t.Fatal("Running after Stop")
	}
	if _, err := m.Status(ctx); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("Status of stopped member: %v, want ErrNotRunning", err)
	}
	if _, err := os.Stat(filepath.Join(m.DataDir(), "member")); err != nil {
		t.Fatalf("Stop must keep the data dir: %v", err)
	}
	if _, err := cli.Put(ctx, "while-down", "2"); err != nil {
		t.Fatalf("two of three members must accept writes: %v", err)
	}

	// Restart binds the same address and port again.
	if err := m.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if m.ID() != id {
		t.Fatalf("member ID changed across restart: %x -> %x", id, m.ID())
	}
	if err := m.Healthy(ctx); err != nil {
		t.Fatal(err)
	}
	own, err := clientv3.New(clientv3.Config{Endpoints: []string{m.ClientURL()}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	for k, want := range map[string]string{"before": "1", "while-down": "2"} {
		got, err := own.Get(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Kvs) != 1 || string(got.Kvs[0].Value) != want {
			t.Fatalf("restarted member: %s = %v, want %q", k, got.Kvs, want)
		}
	}
	waitFor(t, 10*time.Second, "all three agree on a leader again", func() error {
		_, err := agreedStatusLeader(ctx, c.Members())
		return err
	})
}

func TestStartResumesFromDataDirs(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, time.Minute)
	dir, specs := t.TempDir(), testIPs(t, 3)
	opts := Options{Logger: testLogger(t, slog.LevelWarn)}
	c, err := Start(ctx, dir, specs, opts)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]uint64{}
	for _, m := range c.Members() {
		ids[m.Name()] = m.ID()
	}
	cli, err := c.Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, "survives", "restart"); err != nil {
		t.Fatal(err)
	}
	cli.Close()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	for _, m := range c.Members() {
		if m.Running() {
			t.Fatalf("%s still running after Close", m.Name())
		}
	}

	// Same dir and addresses, as after a simulator process restart.
	c, err = Start(ctx, dir, specs, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, m := range c.Members() {
		if m.ID() != ids[m.Name()] {
			t.Fatalf("%s came back as %x, was %x", m.Name(), m.ID(), ids[m.Name()])
		}
	}
	cli, err = c.Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	got, err := cli.Get(ctx, "survives")
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Kvs) != 1 || string(got.Kvs[0].Value) != "restart" {
		t.Fatalf("data lost across cluster restart: %v", got.Kvs)
	}
}

func TestStopMajorityLeavesSurvivorWithoutLeader(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3)
	ctx := testCtx(t, time.Minute)
	ms := c.Members()
	for _, m := range ms[:2] {
		if err := m.Stop(); err != nil {
			t.Fatal(err)
		}
	}
	survivor := ms[2]
	waitFor(t, 10*time.Second, "survivor reports no leader", func() error {
		st, err := survivor.Status(ctx)
		if err != nil {
			return err
		}
		if st.Leader != 0 {
			return fmt.Errorf("still sees leader %x", st.Leader)
		}
		if !slices.Contains(st.Errors, "etcdserver: no leader") {
			return fmt.Errorf("errors %v lack \"etcdserver: no leader\"", st.Errors)
		}
		return nil
	})
	began := time.Now()
	if _, err := survivor.Status(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("Status on the leaderless survivor answered in %v", time.Since(began))
	if err := survivor.Healthy(ctx); !errors.Is(err, rpctypes.ErrNoLeader) {
		t.Fatalf("survivor without quorum: Healthy = %v, want rpctypes.ErrNoLeader", err)
	}
	if _, err := survivor.MemberListSerializable(ctx); err != nil {
		t.Fatalf("serializable member list must work without a leader: %v", err)
	}
	if _, err := survivor.MemberList(ctx); err == nil {
		t.Fatal("linearizable member list succeeded without a leader")
	}
	if _, err := c.WaitLeader(testCtx(t, 200*time.Millisecond)); err == nil {
		t.Fatal("WaitLeader succeeded without quorum")
	}

	// Bringing both back together restores quorum.
	if err := c.RestartStopped(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	if err := survivor.Healthy(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestForfeitLeadership(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3)
	ctx := testCtx(t, time.Minute)
	lead, err := c.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var follower *Member
	for _, m := range c.Members() {
		if m.ID() != lead {
			follower = m
		}
	}
	got, err := follower.ForfeitLeadership(ctx)
	if err != nil || got != lead {
		t.Fatalf("follower ForfeitLeadership = %x, %v; want no-op returning leader %x", got, err, lead)
	}

	newLead, err := c.MemberByID(lead).ForfeitLeadership(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if newLead == lead || c.MemberByID(newLead) == nil {
		t.Fatalf("leadership not moved: old %x new %x", lead, newLead)
	}
	waitFor(t, 10*time.Second, "every member reports the new leader", func() error {
		l, err := agreedStatusLeader(ctx, c.Members())
		if err != nil {
			return err
		}
		if l != newLead {
			return fmt.Errorf("leader %x, want %x", l, newLead)
		}
		return nil
	})
}

func TestForfeitLeadershipSingleMember(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 1)
	m := c.Members()[0]
	got, err := m.ForfeitLeadership(testCtx(t, 10*time.Second))
	if !errors.Is(err, ErrNoTransferee) || got != m.ID() {
		t.Fatalf("ForfeitLeadership on one member = %x, %v; want own ID and ErrNoTransferee", got, err)
	}
}

func TestAddLearnerPromoteAndRejoin(t *testing.T) {
	t.Parallel()
	specs := testIPs(t, 3)
	c, err := Start(testCtx(t, time.Minute), t.TempDir(), specs[:1], Options{Logger: testLogger(t, slog.LevelWarn)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ctx := testCtx(t, 2*time.Minute)
	first := c.Member("cp-1")
	cli, err := c.Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if _, err := cli.Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}

	learner, err := c.AddLearner(ctx, specs[1])
	if err != nil {
		t.Fatal(err)
	}
	if !learner.IsLearner() {
		t.Fatal("AddLearner: member is not a learner")
	}
	st, err := learner.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !st.IsLearner || st.Leader != first.ID() {
		t.Fatalf("learner status: learner=%v leader=%x, want learner following %x", st.IsLearner, st.Leader, first.ID())
	}
	if err := learner.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "promoted member votes", func() error {
		if learner.IsLearner() {
			return errors.New("still a learner")
		}
		return nil
	})

	third, err := c.Add(ctx, specs[2])
	if err != nil {
		t.Fatal(err)
	}
	list, err := first.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := memberNames(list); !slices.Equal(got, []string{"cp-1", "cp-2", "cp-3"}) {
		t.Fatalf("membership after adds: %v", got)
	}
	for _, pm := range list.Members {
		if pm.IsLearner {
			t.Fatalf("%s still a learner after Add/Promote", pm.Name)
		}
	}

	// A member that left comes back with a new ID and the cluster's data.
	oldID := third.ID()
	if err := third.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	if err := third.Rejoin(ctx); err != nil {
		t.Fatal(err)
	}
	if third.ID() == oldID || third.Removed() || third.IsLearner() {
		t.Fatalf("after Rejoin: id %x (old %x) removed=%v learner=%v", third.ID(), oldID, third.Removed(), third.IsLearner())
	}
	if err := third.Healthy(ctx); err != nil {
		t.Fatal(err)
	}
	own, err := clientv3.New(clientv3.Config{Endpoints: []string{third.ClientURL()}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	got, err := own.Get(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Kvs) != 1 || string(got.Kvs[0].Value) != "v" {
		t.Fatalf("rejoined member does not have the data: %v", got.Kvs)
	}
	if _, err := c.Add(ctx, specs[2]); err == nil {
		t.Fatal("Add accepted a taken name")
	}
}

// recordHandler keeps every record it is given.
type recordHandler struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *recordHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.recs = append(h.recs, r.Clone())
	h.mu.Unlock()
	return nil
}
func (h *recordHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recordHandler) WithGroup(string) slog.Handler      { return h }

func (h *recordHandler) etcdRecords() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, r := range h.recs {
		isEtcd := false
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "component" && a.Value.String() == "etcd" {
				isEtcd = true
				return false
			}
			return true
		})
		if isEtcd {
			n++
		}
	}
	return n
}

func TestEtcdLoggingQuietByDefault(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		level string
		quiet bool
	}{{"", true}, {"info", false}} {
		h := &recordHandler{}
		c, err := Start(testCtx(t, time.Minute), t.TempDir(), testIPs(t, 1), Options{Logger: slog.New(h), EtcdLogLevel: tc.level})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		// By default a clean start and stop logs nothing from etcd at all:
		// info is below the threshold and the closed-listener "errors" of
		// every stop are recognised as routine.
		n := h.etcdRecords()
		if quiet := n == 0; quiet != tc.quiet {
			t.Errorf("EtcdLogLevel %q: %d etcd records, want quiet=%v", tc.level, n, tc.quiet)
		}
	}
	if _, err := Start(t.Context(), t.TempDir(), testIPs(t, 1), Options{EtcdLogLevel: "loud"}); err == nil {
		t.Error("Start accepted EtcdLogLevel \"loud\"")
	}
}

func TestStartRejectsBadSpecs(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 10*time.Second)
	for name, specs := range map[string][]MemberSpec{
		"none":           nil,
		"not loopback":   {{Name: "a", IP: "10.0.0.1"}},
		"duplicate name": {{Name: "a", IP: "127.9.9.1"}, {Name: "a", IP: "127.9.9.2"}},
		"same address":   {{Name: "a", IP: "127.9.9.1"}, {Name: "b", IP: "127.9.9.1"}},
		"path in name":   {{Name: "../x", IP: "127.9.9.1"}},
	} {
		if c, err := Start(ctx, t.TempDir(), specs, Options{}); err == nil {
			c.Close()
			t.Errorf("%s: Start accepted %v", name, specs)
		}
	}
}

func benchmarkStart(b *testing.B, n int) {
	var total time.Duration
	for i := 0; i < b.N; i++ {
		dir, specs := b.TempDir(), testIPs(b, n)
		began := time.Now()
		c, err := Start(context.Background(), dir, specs, Options{})
		total += time.Since(began)
		if err != nil {
			b.Fatal(err)
		}
		if err := c.Close(); err != nil {
			b.Fatal(err)
		}
	}
	// ns/op includes Close (about 1 s per stopped member of a multi-member
	// cluster); start-ms is Start alone.
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "start-ms")
}

// BenchmarkStart1 and BenchmarkStart3 measure Start until every member serves
// and agrees on a leader.
func BenchmarkStart1(b *testing.B) { benchmarkStart(b, 1) }
func BenchmarkStart3(b *testing.B) { benchmarkStart(b, 3) }

// TestCancelledStartWithoutQuorumReturns: a member whose start is cancelled before it could
// become ready (its peers never came, or already left, as when Ctrl-C stops the demo while
// its clusters start) is closed and the start returns. embed.Etcd.Close alone waits for a
// readiness that needs a quorum, and the demo then never exited.
func TestCancelledStartWithoutQuorumReturns(t *testing.T) {
	c, err := newCluster(t.TempDir(), testIPs(t, 3), Options{Logger: testLogger(t, slog.LevelWarn)})
	if err != nil {
		t.Fatal(err)
	}
	m := c.members[0]
	// Only one of three members runs: it can never be ready.
	e, err := m.launch(embed.ClusterStateFlagNew, c.initialCluster())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	done := make(chan error, 1)
	go func() { done <- m.awaitReady(ctx, e) }()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("awaitReady with a cancelled start = %v, want an error wrapping context.Canceled", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("a cancelled start of a member without quorum did not return within a minute: closing it waited for a readiness that needs a quorum")
	}
	if m.Running() {
		t.Error("the member whose start was cancelled still counts as running")
	}
}
