package snapshot

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/talosbot/talosbot/internal/seal"
	"github.com/talosbot/talosbot/plugins/sdk"
	"github.com/talosbot/talosbot/plugins/sdk/sdktest"
	"github.com/talosbot/talosbot/sim"
)

func startSim(t *testing.T, cps int) *sim.Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := sim.Start(ctx, sim.Options{ControlPlanes: cps, Workers: 1})
	if err != nil {
		t.Fatalf("start sim: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func request(c *sim.Cluster, dir string, keep int32) *sdk.OperationRequest {
	pc := &sdk.Cluster{Name: "staging", Environment: "staging"}
	for _, n := range c.Nodes() {
		pc.Nodes = append(pc.Nodes, &sdk.Node{Name: n.Name, Address: n.IP, Role: n.Role})
	}
	return &sdk.OperationRequest{OperationID: "op-1", Command: Command, Cluster: *pc,
		Credentials: sdk.Credentials{Talosconfig: c.Talosconfig()},
		Evidence:    sdk.Evidence{Backups: &sdk.Backups{Dir: dir, Local: &sdk.Retention{Keep: keep}}}}
}

// fixedClock returns successive times one hour apart.
func fixedClock(start time.Time) func() time.Time {
	t := start.Add(-time.Hour)
	return func() time.Time { t = t.Add(time.Hour); return t }
}

func TestSnapshotRestoresKeyWrittenBefore(t *testing.T) {
	c := startSim(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	ec, err := c.Etcd().Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer ec.Close()
	if _, err := ec.Put(ctx, "/talosbot/marker", "before-snapshot"); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	p := &Plugin{now: fixedClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))}
	rec, err := sdktest.Run(ctx, p, request(c, dir, 0), nil)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	res := rec.FinalResult()
	if !res.OK {
		t.Fatalf("snapshot failed: %s %s", res.Summary, res.Error)
	}
	arts := rec.Artifacts()
	if len(arts) != 1 {
		t.Fatalf("want one artifact, got %v", arts)
	}
	a := arts[0]
	// <cluster>/<UTC time to the millisecond>-<node>-<unique suffix>
	if !regexp.MustCompile(`^staging/20260301T\d{6}\.\d{3}Z-cp-\d-[0-9a-f]{8}$`).MatchString(a.ID) || len(a.Sha256) != 64 {
		t.Fatalf("artifact = %v", a)
	}
	wantDir := filepath.Join(dir, "staging")
	if filepath.Dir(a.Location) != wantDir || !strings.HasSuffix(a.Location, ".db") {
		t.Fatalf("location %s not a .db in %s", a.Location, wantDir)
	}
	fi, err := os.Stat(a.Location)
	if err != nil || fi.Size() != a.Size || fi.Mode().Perm() != 0o600 {
		t.Fatalf("file %v (%v), artifact size %d", fi, err, a.Size)
	}
	if parts, _ := filepath.Glob(filepath.Join(wantDir, "*.part")); len(parts) > 0 {
		t.Fatalf("part files left: %v", parts)
	}
	for _, s := range rec.Steps() {
		// Without off-site storage the off-site step did not run: it is
		// skipped, never OK (TestNoOffsiteIsSkippedNotDone).
		want := sdk.StepOK
		if s.StepID == "snapshot-offsite" {
			want = sdk.StepSkipped
		}
		if s.Status != want {
			t.Fatalf("step %s = %s (%s)", s.StepID, s.Status, s.Detail)
		}
	}

	if got := restoreAndGet(t, a.Location, "/talosbot/marker"); got != "before-snapshot" {
		t.Fatalf("restored value = %q, want before-snapshot", got)
	}
}

// restoreAndGet restores the snapshot with etcdutl into a fresh data dir,
// starts a one-member etcd on it and reads key.
func restoreAndGet(t *testing.T, snap, key string) string {
	t.Helper()
	peer, client := freeURL(t), freeURL(t)
	dataDir := filepath.Join(t.TempDir(), "restored")
	err := snapshot.NewV3(zap.NewNop()).Restore(snapshot.RestoreConfig{
		SnapshotPath: snap, Name: "restore", OutputDataDir: dataDir,
		PeerURLs: []string{peer}, InitialCluster: "restore=" + peer, InitialClusterToken: "restore-test",
	})
	if err != nil {
		t.Fatalf("etcdutl restore: %v", err)
	}
	cfg := embed.NewConfig()
	cfg.Name, cfg.Dir = "restore", dataDir
	cfg.LogLevel = "error"
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = urls(t, peer), urls(t, peer)
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = urls(t, client), urls(t, client)
	cfg.InitialCluster = "restore=" + peer
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatalf("start restored etcd: %v", err)
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(time.Minute):
		t.Fatal("restored etcd not ready within a minute")
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{client}, DialTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return ""
	}
	return string(resp.Kvs[0].Value)
}

func freeURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return fmt.Sprintf("http://%s", l.Addr())
}

func urls(t *testing.T, s string) []url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return []url.URL{*u}
}

func TestSnapshotRetentionKeepsNewest(t *testing.T) {
	c := startSim(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	p := &Plugin{now: fixedClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))}
	var paths []string
	for i := range 3 {
		rec, err := sdktest.Run(ctx, p, request(c, dir, 2), nil)
		if err != nil || !rec.FinalResult().OK {
			t.Fatalf("run %d: %v %v", i, err, rec.FinalResult())
		}
		paths = append(paths, rec.Artifacts()[0].Location)
	}
	got, _ := filepath.Glob(filepath.Join(dir, "staging", "*"))
	if len(got) != 2 || got[0] != paths[1] || got[1] != paths[2] {
		t.Fatalf("after 3 snapshots with keep=2: %v, want %v", got, paths[1:])
	}
	// A single-CP cluster's snapshot comes from its one control plane.
	if !regexp.MustCompile(`-cp-1-[0-9a-f]{8}\.db$`).MatchString(paths[0]) {
		t.Fatalf("snapshot %s not from cp-1", paths[0])
	}
}

func TestSnapshotRefusesWithoutFreeSpace(t *testing.T) {
	c := startSim(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	p := &Plugin{freeSpace: func(string) (uint64, error) { return 1000, nil }}
	rec, _ := sdktest.Run(ctx, p, request(c, dir, 0), nil)
	res := rec.FinalResult()
	if res.OK || !strings.Contains(res.Error, "not enough free space") ||
		!strings.Contains(res.Error, "available 1000 B") || !strings.Contains(res.Error, "need ") {
		t.Fatalf("want a clear refusal naming needed and available space, got %v", res)
	}
	if c.Calls("cp-1", "EtcdSnapshot") != 0 {
		t.Fatal("snapshot was started despite too little space")
	}
	left, _ := filepath.Glob(filepath.Join(dir, "staging", "*"))
	if len(left) != 0 {
		t.Fatalf("files left behind: %v", left)
	}
}

func TestPlanRefusesWithoutSnapshotDir(t *testing.T) {
	c := startSim(t, 1)
	plan, err := New().Plan(context.Background(), request(c, "", 0))
	if err != nil {
		t.Fatal(err)
	}
	if plan.Refusal.Rule != "R12" || !strings.Contains(plan.Refusal.Fix, "snapshot_dir") {
		t.Fatalf("want an R12 refusal naming snapshot_dir, got %v", plan)
	}
}

// Issue 16: retention never deletes a snapshot that an operation record
// names (the host passes those ids), nor the newest one, however many runs.
func TestRecordNamedSnapshotSurvivesManyRuns(t *testing.T) {
	c := startSim(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	p := &Plugin{now: fixedClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))}
	var named, newest string
	for i := range 8 {
		req := request(c, dir, 1)
		req.Evidence.Backups = &sdk.Backups{Dir: req.Evidence.Backups.GetDir(), Local: &sdk.Retention{Keep: 1}}
		if named != "" {
			req.Evidence.Backups.ProtectedSnapshots = []string{named}
		}
		rec, err := sdktest.Run(ctx, p, req, nil)
		if err != nil || !rec.FinalResult().OK {
			t.Fatalf("run %d: %v %v", i, err, rec.FinalResult())
		}
		a := rec.Artifacts()[0]
		if i == 0 {
			named = a.ID
		}
		newest = a.Location
	}
	got, _ := filepath.Glob(filepath.Join(dir, "staging", "*"))
	want := []string{filepath.Join(dir, "staging", strings.TrimPrefix(named, "staging/")+".db"), newest}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("after 8 runs with keep=1: %v, want the record-named one and the newest %v", got, want)
	}
}

// With a recipient configured the snapshot is encrypted at rest: only the
// .db.age file exists, and with the identity it restores.
func TestEncryptedSnapshotRestores(t *testing.T) {
	c := startSim(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ec, err := c.Etcd().Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer ec.Close()
	if _, err := ec.Put(ctx, "/talosbot/secret-marker", "plaintext-marker-value"); err != nil {
		t.Fatal(err)
	}
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	req := request(c, dir, 0)
	req.Evidence.Backups = &sdk.Backups{Dir: req.Evidence.Backups.GetDir(), AgeRecipients: []string{id.Recipient().String()}}
	rec, err := sdktest.Run(ctx, New(), req, nil)
	if err != nil || !rec.FinalResult().OK {
		t.Fatalf("run: %v %v", err, rec.FinalResult())
	}
	a := rec.Artifacts()[0]
	files, _ := filepath.Glob(filepath.Join(dir, "staging", "*"))
	if len(files) != 1 || files[0] != a.Location || !strings.HasSuffix(files[0], ".db.age") {
		t.Fatalf("files %v, want only the encrypted %s", files, a.Location)
	}
	stored, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(stored), "plaintext-marker-value") {
		t.Fatal("plaintext on disk")
	}
	r, err := seal.Decrypt(strings.NewReader(string(stored)), []age.Identity{id})
	if err != nil {
		t.Fatal(err)
	}
	plain := filepath.Join(t.TempDir(), "plain.db")
	f, err := os.OpenFile(plain, os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(f, r); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	if got := restoreAndGet(t, plain, "/talosbot/secret-marker"); got != "plaintext-marker-value" {
		t.Fatalf("restored %q", got)
	}
}
