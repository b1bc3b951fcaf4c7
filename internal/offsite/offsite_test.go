package offsite

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/talosbot/talosbot/internal/offsite/s3test"
	"github.com/talosbot/talosbot/internal/retention"
)

// fakeS3 starts gofakes3 (a real S3 server we did not write) with one
// bucket and a Config for it.
func fakeS3(t *testing.T) (*s3mem.Backend, Config) {
	t.Helper()
	endpoint, be := s3test.Start(t, "snaps")
	return be, Config{Endpoint: endpoint, Bucket: "snaps", Prefix: "talosbot/", Region: "us-east-1", Insecure: true,
		AccessKeyID: "test-key", SecretAccessKey: "test-secret", PartSize: 5 << 20}
}

func writeFile(t *testing.T, dir, name string, size int) (string, string) {
	t.Helper()
	b := make([]byte, size)
	for i := range b {
		b[i] = byte(i*31 + i/7)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return p, hex.EncodeToString(s[:])
}

func TestUploadAndReadBack(t *testing.T) {
	_, cfg := fakeS3(t)
	st, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		size int
	}{{"20260301T120000Z-cp-1.db", 100_000}, {"20260301T130000Z-cp-1.db.age", 12<<20 + 17}} { // one part; three parts
		p, sum := writeFile(t, dir, tc.name, tc.size)
		key := st.Key("staging", tc.name)
		if err := st.Put(ctx, key, p, sum); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var got bytes.Buffer
		if n, err := st.Get(ctx, key, &got); err != nil || n != int64(tc.size) {
			t.Fatalf("get %s: %d %v", key, n, err)
		}
		want, _ := os.ReadFile(p)
		if !bytes.Equal(got.Bytes(), want) {
			t.Fatal("downloaded bytes differ")
		}
	}
	objs, err := st.List(ctx, "staging")
	if err != nil || len(objs) != 2 || objs[0].ID != "staging/20260301T120000Z-cp-1" || objs[1].Encrypted != true ||
		objs[1].Key != "talosbot/staging/20260301T130000Z-cp-1.db.age" || objs[1].Size != 12<<20+17 {
		t.Fatalf("list = %+v, %v", objs, err)
	}
}

// corruptingTransport flips one byte of the body of the first PUT it sees.
type corruptingTransport struct{ done atomic.Bool }

func (c *corruptingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPut && r.Body != nil && !c.done.Swap(true) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			return nil, err
		}
		b[len(b)/2] ^= 0x01
		r = r.Clone(r.Context())
		r.Body = io.NopCloser(bytes.NewReader(b))
	}
	return http.DefaultTransport.RoundTrip(r)
}

func TestCorruptionInTransitIsRefusedByTheServer(t *testing.T) {
	_, cfg := fakeS3(t)
	cfg.Transport = &corruptingTransport{}
	st, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p, sum := writeFile(t, t.TempDir(), "20260301T120000Z-cp-1.db", 100_000)
	key := st.Key("staging", "20260301T120000Z-cp-1.db")
	err = st.Put(context.Background(), key, p, sum)
	// The server compared the Content-MD5 with the bytes it received.
	if err == nil || !strings.Contains(err.Error(), "BadDigest") {
		t.Fatalf("corrupted upload accepted: %v", err)
	}
	if objs, _ := st.List(context.Background(), "staging"); len(objs) != 0 {
		t.Fatalf("objects left after a refused upload: %+v", objs)
	}
}

func TestCorruptedObjectDetected(t *testing.T) {
	be, cfg := fakeS3(t)
	st, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	p, sum := writeFile(t, t.TempDir(), "20260301T120000Z-cp-1.db", 100_000)
	key := st.Key("staging", "20260301T120000Z-cp-1.db")
	if err := st.Put(ctx, key, p, sum); err != nil {
		t.Fatal(err)
	}
	// Bit rot at rest: same size, same metadata, one byte changed.
	b, _ := os.ReadFile(p)
	b[500] ^= 0xff
	if _, err := be.PutObject("snaps", key, map[string]string{"X-Amz-Meta-Sha256": sum}, bytes.NewReader(b), int64(len(b)), nil); err != nil {
		t.Fatal(err)
	}
	err = st.Verify(ctx, key)
	if err == nil || !strings.Contains(err.Error(), "is corrupted") || !strings.Contains(err.Error(), sum[:12]) {
		t.Fatalf("corrupted object not detected: %v", err)
	}
}

func TestRetentionAcrossGenerationsKeepsRecordNamed(t *testing.T) {
	_, cfg := fakeS3(t)
	st, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	dir := t.TempDir()
	// Every 6 hours for 20 days, and one object of another cluster.
	end := time.Date(2026, 3, 20, 18, 0, 0, 0, time.UTC)
	p, sum := writeFile(t, dir, "x", 1000)
	for i := range 20 * 4 {
		name := end.Add(-time.Duration(i)*6*time.Hour).Format("20060102T150405Z") + "-cp-1.db"
		if err := st.Put(ctx, st.Key("staging", name), p, sum); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Put(ctx, st.Key("production", "20260101T000000Z-cp-1.db"), p, sum); err != nil {
		t.Fatal(err)
	}
	named := "staging/20260305T060000Z-cp-1" // a record names it
	removed, err := st.ApplyRetention(ctx, "staging", retention.Policy{Hourly: 2, Daily: 3, Weekly: 2}, end, map[string]bool{named: true})
	if err != nil {
		t.Fatal(err)
	}
	objs, _ := st.List(ctx, "staging")
	var ids []string
	for _, o := range objs {
		ids = append(ids, strings.TrimPrefix(o.ID, "staging/"))
	}
	// hourly 2: 20th 18h, 12h; daily 3: 20th, 19th, 18th (18h each);
	// weekly 2: the week of Fri 20 March → 20th 18h, the week ending Sun
	// 15 March → 15th 18h; plus the record-named 5 March 06h.
	want := "20260305T060000Z-cp-1,20260315T180000Z-cp-1,20260318T180000Z-cp-1,20260319T180000Z-cp-1,20260320T120000Z-cp-1,20260320T180000Z-cp-1"
	if strings.Join(ids, ",") != want {
		t.Fatalf("kept %v\nwant %s", ids, want)
	}
	if len(removed) != 80-6 {
		t.Fatalf("removed %d", len(removed))
	}
	if other, _ := st.List(ctx, "production"); len(other) != 1 {
		t.Fatalf("retention of staging touched production: %v", other)
	}
}

func TestNewRefusesMissingCredentials(t *testing.T) {
	_, err := New(Config{Endpoint: "127.0.0.1:1", Bucket: "b"})
	if err == nil || !strings.Contains(err.Error(), "access_key_id") {
		t.Fatalf("err = %v", err)
	}
}

// Issue 29: an object already at a snapshot's key is never replaced (a PUT
// overwrites silently), and the refused upload leaves it as it was.
func TestPutNeverReplacesAnObject(t *testing.T) {
	_, cfg := fakeS3(t)
	st, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	dir := t.TempDir()
	first, sum1 := writeFile(t, dir, "first.db", 100_000)
	key := st.Key("staging", "20261202T143000.250Z-cp-1-0a1b2c3d.db")
	if err := st.Put(ctx, key, first, sum1); err != nil {
		t.Fatal(err)
	}
	second, sum2 := writeFile(t, dir, "second.db", 90_000)
	err = st.Put(ctx, key, second, sum2)
	if err == nil || !strings.Contains(err.Error(), "never replaced") {
		t.Fatalf("err = %v, want a refusal to replace the object", err)
	}
	var got bytes.Buffer
	if _, err := st.Get(ctx, key, &got); err != nil || got.Len() != 100_000 {
		t.Fatalf("the first object changed: %d bytes, %v", got.Len(), err)
	}
}
