package etcd

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// TestWritebackDirectThenBuffered writes full aligned buffers (O_DIRECT),
// then a short tail and an unaligned write (buffered from then on, also for
// an aligned write after them), and checks the file holds exactly the
// bytes written in order.
func TestWritebackDirectThenBuffered(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "w"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := newWriteback(f)
	if !w.direct {
		t.Skip("the test directory's filesystem has no O_DIRECT")
	}
	var want bytes.Buffer
	write := func(p []byte, direct bool) {
		t.Helper()
		if n, err := w.Write(p); err != nil || n != len(p) {
			t.Fatalf("Write(%d bytes) = %d, %v", len(p), n, err)
		}
		want.Write(p)
		if w.direct != direct {
			t.Fatalf("after a %d-byte write at %d: direct = %v, want %v", len(p), want.Len()-len(p), w.direct, direct)
		}
	}
	buf := alignedBuffer(copyBufferSize)
	for range 2 {
		_, _ = rand.Read(buf)
		write(buf, true)
	}
	write(buf[:100], false)            // the stream's tail
	write(buf[1:directAlign+1], false) // unaligned address and offset
	write(buf, false)                  // aligned again, but it stays buffered
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("file differs from what was written (%d vs %d bytes)", len(got), want.Len())
	}
}

// TestWriteVerifiedLargeStream goes through the O_DIRECT path (several
// full copy buffers) and the buffered tail: the file is byte-for-byte the
// stream, whatever sizes the source's reads return; a bit flipped in a
// direct-written buffer is still refused.
func TestWriteVerifiedLargeStream(t *testing.T) {
	body := make([]byte, 3*copyBufferSize+512*7)
	_, _ = rand.Read(body)
	sum := sha256.Sum256(body)
	good := append(body, sum[:]...)
	for _, chunk := range []int{32 << 10, copyBufferSize, 1000} {
		dir := t.TempDir()
		s, err := WriteVerified(context.Background(), &chunkReader{b: good, n: chunk}, dir, "big")
		if err != nil {
			t.Fatalf("chunk %d: %v", chunk, err)
		}
		got, err := os.ReadFile(s.Path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, good) {
			t.Fatalf("chunk %d: file differs from the stream", chunk)
		}
	}
	dir := t.TempDir()
	if _, err := WriteVerified(context.Background(), bytes.NewReader(flip(good, copyBufferSize+5)), dir, "big"); err == nil {
		t.Fatal("a corrupted large stream was accepted")
	}
	assertOnly(t, dir)
}

// chunkReader returns at most n bytes per Read, like a gRPC stream's messages.
type chunkReader struct {
	b []byte
	n int
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	k := copy(p[:min(len(p), r.n)], r.b)
	r.b = r.b[k:]
	return k, nil
}
