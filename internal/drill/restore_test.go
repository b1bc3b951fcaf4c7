package drill

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// snapshotOf writes n keys (and deletes one, so revisions outnumber live
// keys) into a throwaway etcd and saves its snapshot, sha256 trailer
// included, as the Snapshot RPC streams it. It returns the path and the
// store revision.
func snapshotOf(t *testing.T, n int) (string, int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	local := url.URL{Scheme: "http", Host: "127.0.0.1:0"}
	cfg := embed.NewConfig()
	cfg.Name, cfg.Dir = "src", filepath.Join(dir, "data")
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{local}, []url.URL{local}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{local}, []url.URL{local}
	cfg.InitialCluster = "src=" + local.String()
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cfg.UnsafeNoFsync = true
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	<-e.Server.ReadyNotify()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + e.Clients[0].Addr().String()}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	for i := range n + 1 {
		if _, err := cli.Put(ctx, fmt.Sprintf("/registry/namespaces/ns-%d", i), "x"); err != nil {
			t.Fatal(err)
		}
	}
	del, err := cli.Delete(ctx, fmt.Sprintf("/registry/namespaces/ns-%d", n))
	if err != nil {
		t.Fatal(err)
	}
	rc, err := cli.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	path := filepath.Join(dir, "snap.db")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(f, rc); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path, del.Header.Revision
}

// Restore reports the snapshot's revision and its live keys as the
// restored etcd serves them (no separate status pass over the file), and a
// snapshot whose bytes do not match its sha256 trailer does not restore.
func TestRestoreReportsRevisionAndLiveKeys(t *testing.T) {
	path, rev := snapshotOf(t, 20)
	r, err := Restore(t.Context(), path, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.Revision != rev || r.TotalKeys != 20 {
		t.Fatalf("revision %d, %d keys; want %d and 20", r.Revision, r.TotalKeys, rev)
	}
	if n, err := r.Count(t.Context(), "/registry/namespaces/"); err != nil || n != 20 {
		t.Fatalf("count %d %v", n, err)
	}

	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xff
	bad := filepath.Join(t.TempDir(), "bad.db")
	if err := os.WriteFile(bad, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Restore(t.Context(), bad, t.TempDir()); err == nil || !strings.Contains(err.Error(), "does not restore") {
		t.Fatalf("a corrupted snapshot: %v", err)
	}
}
