package etcd

import (
	"errors"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// writebackChunk is how much is written through the page cache before the
// kernel is asked to start writing it out.
const writebackChunk = 8 << 20

// directAlign is the alignment O_DIRECT needs of a write's buffer address,
// length and file offset: 4096 covers every logical block size in use.
const directAlign = 4096

// writeback writes a snapshot to f with as little CPU as it can, because on
// a small machine CPU, not the disk, is what a snapshot waits for (profile
// in docs/BENCHMARKS.md): sha256 already takes one core.
//
// While the writes are full, aligned copy buffers (every write of the
// plaintext path but the last) they go with O_DIRECT: straight from our
// buffer to the device, so there is no copy into the page cache, no dirty
// page accounting and no writeback to wait for at the fsync. The first
// write that cannot go direct (the stream's short tail, age's 64 KiB
// chunks, or a filesystem without O_DIRECT) turns O_DIRECT off for the
// rest of the file; from then on each finished chunk's writeback is
// started at once (sync_file_range SYNC_FILE_RANGE_WRITE, which does not
// wait) so the final fsync has little left to flush. Neither changes a
// durability guarantee: the fsync before the rename is still what makes
// the snapshot durable (O_DIRECT bypasses the page cache, not the disk's
// cache).
type writeback struct {
	f           *os.File
	direct      bool
	off, synced int64
}

// newWriteback wraps f, which must be open for writing at offset 0.
func newWriteback(f *os.File) *writeback {
	w := &writeback{f: f}
	if fl, err := unix.FcntlInt(f.Fd(), unix.F_GETFL, 0); err == nil {
		// EINVAL: the filesystem has no O_DIRECT; buffered writes then.
		_, err = unix.FcntlInt(f.Fd(), unix.F_SETFL, fl|unix.O_DIRECT)
		w.direct = err == nil
	}
	return w
}

func (w *writeback) Write(p []byte) (int, error) {
	if w.direct && !directOK(p, w.off) {
		w.leaveDirect()
	}
	n, err := w.f.Write(p)
	if w.direct && n == 0 && errors.Is(err, unix.EINVAL) {
		// A device with stricter alignment than ours: write buffered.
		w.leaveDirect()
		n, err = w.f.Write(p)
	}
	w.off += int64(n)
	if w.direct {
		w.synced = w.off // already on its way to the device
	} else if w.off-w.synced >= writebackChunk {
		// Best effort: an error here only loses the head start.
		_ = unix.SyncFileRange(int(w.f.Fd()), w.synced, w.off-w.synced, unix.SYNC_FILE_RANGE_WRITE)
		w.synced = w.off
	}
	return n, err
}

func (w *writeback) leaveDirect() {
	w.direct = false
	if fl, err := unix.FcntlInt(w.f.Fd(), unix.F_GETFL, 0); err == nil {
		_, _ = unix.FcntlInt(w.f.Fd(), unix.F_SETFL, fl&^unix.O_DIRECT)
	}
}

// directOK: p's address, its length and the file offset are all aligned.
func directOK(p []byte, off int64) bool {
	return len(p) > 0 && len(p)%directAlign == 0 && off%directAlign == 0 &&
		uintptr(unsafe.Pointer(unsafe.SliceData(p)))%directAlign == 0
}
