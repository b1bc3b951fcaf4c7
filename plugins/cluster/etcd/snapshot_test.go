package etcd

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"filippo.io/age"

	"github.com/talosbot/talosbot/internal/retention"
	"github.com/talosbot/talosbot/internal/seal"
)

func TestTrailerWriterAnyChunking(t *testing.T) {
	data := make([]byte, 10_000)
	for i := range data {
		data[i] = byte(i * 7)
	}
	wantPrefix := sha256.Sum256(data[:len(data)-32])
	wantWhole := sha256.Sum256(data)
	r := rand.New(rand.NewPCG(1, 2))
	for trial := range 200 {
		var out bytes.Buffer
		tw := &trailerWriter{w: &out, h: sha256.New()}
		for rest := data; len(rest) > 0; {
			n := min(len(rest), r.IntN(80)) // includes 0-byte and sub-32-byte writes
			if trial%2 == 0 {
				n = min(len(rest), 1+r.IntN(5000))
			}
			if _, err := tw.Write(rest[:n]); err != nil {
				t.Fatal(err)
			}
			rest = rest[n:]
		}
		prefix, whole := tw.sums()
		if !bytes.Equal(prefix, wantPrefix[:]) || !bytes.Equal(whole, wantWhole[:]) || !bytes.Equal(tw.tail[:], data[len(data)-32:]) {
			t.Fatalf("trial %d: digests differ", trial)
		}
		if !bytes.Equal(out.Bytes(), data) || tw.size != int64(len(data)) {
			t.Fatalf("trial %d: written bytes differ", trial)
		}
	}
}

func TestWriteVerified(t *testing.T) {
	src := filepath.Join(t.TempDir(), "fixture.db")
	writeSnapshotFixture(t, src, 100, 100)
	good, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("valid snapshot", func(t *testing.T) {
		dir := t.TempDir()
		s, err := WriteVerified(context.Background(), bytes.NewReader(good), dir, "20260101T000000Z-cp-1")
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(good)
		if s.Path != filepath.Join(dir, "20260101T000000Z-cp-1.db") || s.Size != int64(len(good)) ||
			s.SHA256 != hex.EncodeToString(sum[:]) || s.Encrypted || s.StoredSHA256 != s.SHA256 || s.StoredSize != s.Size {
			t.Fatalf("snapshot = %+v", s)
		}
		assertOnly(t, dir, "20260101T000000Z-cp-1.db")
	})

	bad := map[string]struct {
		data []byte
		want string
	}{
		"cut short":   {good[:len(good)-1000], "size % 512 must be 32"},
		"bit flipped": {flip(good, 5000), "trailer does not match"},
		"no trailer":  {good[:len(good)-32], "size % 512 must be 32"},
		// A valid trailer over bytes that are not a bolt database passes
		// here: the one-pass check proves the bytes arrived as etcd sent
		// them; that etcd opens them is the restore drill's check.
	}
	for name, tc := range bad {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			_, err := WriteVerified(context.Background(), bytes.NewReader(tc.data), dir, "x")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
			assertOnly(t, dir) // the part file is gone
		})
	}
}

func flip(b []byte, i int) []byte {
	c := bytes.Clone(b)
	c[i] ^= 0xff
	return c
}

func withTrailer(b []byte) []byte {
	s := sha256.Sum256(b)
	return append(bytes.Clone(b), s[:]...)
}

func assertOnly(t *testing.T, dir string, names ...string) {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range es {
		got = append(got, e.Name())
	}
	if strings.Join(got, ",") != strings.Join(names, ",") {
		t.Fatalf("dir holds %v, want %v", got, names)
	}
}

func TestApplyRetention(t *testing.T) {
	now := time.Date(2026, 3, 10, 0, 0, 0, 0, time.UTC)
	names := []string{"20260301T000000Z-cp-1.db", "20260305T000000Z-cp-2.db", "20260309T000000Z-cp-1.db",
		"20260309T120000Z-cp-3.db", "notes.txt", "20260309T130000Z-cp-1.db.part"}
	setup := func(t *testing.T) string {
		dir := t.TempDir()
		for _, n := range names {
			if err := os.WriteFile(filepath.Join(dir, n), nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	t.Run("keep newest 2", func(t *testing.T) {
		dir := setup(t)
		rm, err := ApplyRetention(dir, "c", retention.Policy{Keep: 2}, now, nil)
		if err != nil || len(rm) != 2 {
			t.Fatalf("removed %v, %v", rm, err)
		}
		assertOnly(t, dir, "20260309T000000Z-cp-1.db", "20260309T120000Z-cp-3.db", "20260309T130000Z-cp-1.db.part", "notes.txt")
	})
	t.Run("max age 7 days", func(t *testing.T) {
		dir := setup(t)
		if _, err := ApplyRetention(dir, "c", retention.Policy{MaxAge: 7 * 24 * time.Hour}, now, nil); err != nil {
			t.Fatal(err)
		}
		assertOnly(t, dir, "20260305T000000Z-cp-2.db", "20260309T000000Z-cp-1.db", "20260309T120000Z-cp-3.db", "20260309T130000Z-cp-1.db.part", "notes.txt")
	})
	t.Run("protected snapshot survives", func(t *testing.T) {
		dir := setup(t)
		protect := map[string]bool{"c/20260301T000000Z-cp-1": true}
		if _, err := ApplyRetention(dir, "c", retention.Policy{Keep: 1}, now, protect); err != nil {
			t.Fatal(err)
		}
		assertOnly(t, dir, "20260301T000000Z-cp-1.db", "20260309T120000Z-cp-3.db", "20260309T130000Z-cp-1.db.part", "notes.txt")
	})
	t.Run("no limits removes nothing", func(t *testing.T) {
		dir := setup(t)
		if rm, _ := ApplyRetention(dir, "c", retention.Policy{}, now, nil); len(rm) != 0 {
			t.Fatalf("removed %v", rm)
		}
	})
}

func TestCheckFreeSpace(t *testing.T) {
	free := func(string) (uint64, error) { return 100 << 20, nil }
	if _, err := CheckFreeSpace("/snap", 50<<20, free); err != nil {
		t.Fatal(err)
	}
	_, err := CheckFreeSpace("/snap", 95<<20, free) // 95 MiB + 10% > 100 MiB
	if err == nil || !strings.Contains(err.Error(), "need 104.5 MiB, available 100.0 MiB in /snap") ||
		!strings.Contains(err.Error(), "snapshot_dir") {
		t.Fatalf("err = %v", err)
	}
}

func TestWriteVerifiedAcceptsAnyTrailedStream(t *testing.T) {
	dir := t.TempDir()
	if _, err := WriteVerified(context.Background(), bytes.NewReader(withTrailer(bytes.Repeat([]byte{1}, 4096))), dir, "x"); err != nil {
		t.Fatalf("one-pass verification read more than the stream: %v", err)
	}
}

func TestWriteVerifiedEncrypted(t *testing.T) {
	src := filepath.Join(t.TempDir(), "fixture.db")
	writeSnapshotFixture(t, src, 100, 100)
	good, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	s, err := WriteVerified(context.Background(), bytes.NewReader(good), dir, "20260101T000000Z-cp-1", id.Recipient())
	if err != nil {
		t.Fatal(err)
	}
	// Only the encrypted file exists, and it holds no plaintext.
	assertOnly(t, dir, "20260101T000000Z-cp-1.db.age")
	stored, err := os.ReadFile(s.Path)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(stored, []byte("/fixture/00000042")) || bytes.Contains(stored, good[:4096]) {
		t.Fatal("the encrypted snapshot file contains plaintext")
	}
	sum := sha256.Sum256(good)
	storedSum := sha256.Sum256(stored)
	if !s.Encrypted || s.SHA256 != hex.EncodeToString(sum[:]) || s.StoredSHA256 != hex.EncodeToString(storedSum[:]) || s.StoredSize != int64(len(stored)) {
		t.Fatalf("snapshot = %+v", s)
	}

	t.Run("round trip", func(t *testing.T) {
		r, err := seal.Decrypt(bytes.NewReader(stored), []age.Identity{id})
		if err != nil {
			t.Fatal(err)
		}
		plain, err := io.ReadAll(r)
		if err != nil || !bytes.Equal(plain, good) {
			t.Fatalf("decrypted %d bytes (%v), want the original %d", len(plain), err, len(good))
		}
	})
	t.Run("wrong identity", func(t *testing.T) {
		other, _ := age.GenerateX25519Identity()
		_, err := seal.Decrypt(bytes.NewReader(stored), []age.Identity{other})
		if err == nil || !strings.Contains(err.Error(), "encrypted to other age recipients") ||
			!strings.Contains(err.Error(), other.Recipient().String()) || strings.Contains(err.Error(), other.String()) {
			t.Fatalf("err = %v, want a clear wrong-identity error naming the public key only", err)
		}
	})
	t.Run("bad stream leaves nothing", func(t *testing.T) {
		dir := t.TempDir()
		if _, err := WriteVerified(context.Background(), bytes.NewReader(flip(good, 5000)), dir, "x", id.Recipient()); err == nil {
			t.Fatal("corrupted stream accepted")
		}
		assertOnly(t, dir)
	})
}
