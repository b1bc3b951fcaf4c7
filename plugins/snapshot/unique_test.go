package snapshot

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/talosbot/talosbot/plugins/cluster/etcd"
	"github.com/talosbot/talosbot/plugins/sdk"
	"github.com/talosbot/talosbot/plugins/sdk/sdktest"
)

// settableClock is a clock the test moves by hand.
type settableClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *settableClock) now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *settableClock) set(t time.Time) { c.mu.Lock(); defer c.mu.Unlock(); c.t = t }

// verifyFile checks a snapshot file with etcd's trailer and returns its sha256.
func verifyFile(t *testing.T, ctx context.Context, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	_, sum, err := etcd.CheckStream(ctx, f)
	if err != nil {
		t.Fatalf("%s does not verify: %v", path, err)
	}
	return sum
}

// Issue 29: two snapshots in the same second (here: the same instant, a
// frozen clock) are two files with distinct ids, and both verify. The name
// was <UTC second>-<node>.db and the second run's rename replaced the first
// run's verified file, both reporting success under one id.
func TestSnapshotsInOneSecondAreDistinct(t *testing.T) {
	c := startSim(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ec, err := c.Etcd().Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer ec.Close()
	dir := t.TempDir()
	at := time.Date(2026, 12, 2, 14, 30, 0, 0, time.UTC)
	p := &Plugin{now: func() time.Time { return at }}
	var arts []*sdk.Artifact
	for i := range 2 {
		// A write between the two, so their contents differ as in the issue.
		if _, err := ec.Put(ctx, "/talosbot/run", fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
		rec, err := sdktest.Run(ctx, p, request(c, dir, 0), nil)
		if err != nil || !rec.FinalResult().OK {
			t.Fatalf("run %d: %v %v", i, err, rec.FinalResult())
		}
		arts = append(arts, rec.Artifacts()[0])
	}
	if arts[0].ID == arts[1].ID || arts[0].Location == arts[1].Location {
		t.Fatalf("two snapshots share a name: %v and %v", arts[0], arts[1])
	}
	if arts[0].Sha256 == arts[1].Sha256 {
		t.Fatal("the two snapshots have the same contents; the test needs them to differ")
	}
	files, _ := filepath.Glob(filepath.Join(dir, "staging", "*.db"))
	if len(files) != 2 {
		t.Fatalf("files %v, want both snapshots", files)
	}
	for _, a := range arts {
		if got := verifyFile(t, ctx, a.Location); got != a.Sha256 {
			t.Fatalf("%s holds sha256 %s, its record says %s", a.Location, got, a.Sha256)
		}
	}
}

// Issue 29: parallel snapshots of one cluster all succeed, one after the
// other, and none is lost. They used to race for one name: 5 of 6 failed
// with "file exists" (and one that won could replace another's file).
func TestParallelSnapshotsOfOneClusterQueue(t *testing.T) {
	c := startSim(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	at := time.Date(2026, 12, 2, 14, 30, 0, 0, time.UTC)
	p := &Plugin{now: func() time.Time { return at }}
	const n = 6
	recs := make([]*sdktest.Recorder, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			req := request(c, dir, 0)
			req.OperationID = fmt.Sprintf("op-%d", i)
			recs[i], errs[i] = sdktest.Run(ctx, p, req, nil)
		})
	}
	wg.Wait()
	ids := map[string]bool{}
	for i, rec := range recs {
		if errs[i] != nil || !rec.FinalResult().OK {
			t.Fatalf("run %d: %v %v", i, errs[i], rec.FinalResult())
		}
		a := rec.Artifacts()[0]
		if ids[a.ID] {
			t.Fatalf("id %s reported twice", a.ID)
		}
		ids[a.ID] = true
		if got := verifyFile(t, ctx, a.Location); got != a.Sha256 {
			t.Fatalf("%s holds sha256 %s, run %d reported %s", a.Location, got, i, a.Sha256)
		}
		// A queued run says whose snapshot it waited for.
		for _, l := range rec.Logs() {
			if strings.Contains(l.Message, "queued") && !strings.Contains(l.Message, "the snapshot of operation op-") {
				t.Fatalf("run %d: queue message names no operation: %s", i, l.Message)
			}
		}
	}
	files, _ := filepath.Glob(filepath.Join(dir, "staging", "*"))
	if len(files) != n {
		t.Fatalf("%d files after %d snapshots: %v", len(files), n, files)
	}
}

// Issue 29: a run's retention keeps a snapshot that a concurrent run wrote
// after the host computed this run's protected ids (the pre-upgrade
// snapshot whose record the host had not seen yet), and the record-named
// one however many runs follow; an unnamed one is pruned once settled.
func TestRetentionKeepsSnapshotOfConcurrentRun(t *testing.T) {
	c := startSim(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	clock := &settableClock{t: time.Date(2026, 12, 2, 14, 30, 0, 0, time.UTC)}
	p := &Plugin{now: clock.now}
	run := func(protected ...string) *sdk.Artifact {
		t.Helper()
		req := request(c, dir, 0)
		req.Evidence.Backups = &sdk.Backups{Dir: req.Evidence.Backups.GetDir(), Local: &sdk.Retention{Keep: 1}, ProtectedSnapshots: protected}
		rec, err := sdktest.Run(ctx, p, req, nil)
		if err != nil || !rec.FinalResult().OK {
			t.Fatalf("run: %v %v", err, rec.FinalResult())
		}
		return rec.Artifacts()[0]
	}
	exists := func(a *sdk.Artifact) bool { _, err := os.Stat(a.Location); return err == nil }

	upgrade := run() // the pre-upgrade snapshot; its record is not in the next request
	clock.set(clock.now().Add(time.Minute))
	plain := run() // its request was built before the upgrade's record named the snapshot
	if !exists(upgrade) {
		t.Fatalf("retention deleted %s, written by a concurrent run a minute earlier", upgrade.ID)
	}
	// Later the host names it; the plain one is pruned once settled.
	for range 3 {
		clock.set(clock.now().Add(time.Hour))
		run(upgrade.ID)
	}
	if !exists(upgrade) || exists(plain) {
		t.Fatalf("after settling: record-named kept %v, unnamed kept %v; want true, false", exists(upgrade), exists(plain))
	}
}
