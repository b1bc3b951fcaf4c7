package cluster

import (
	"os"

	"golang.org/x/sys/unix"
)

// writebackChunk is how much is written before the kernel is asked to start
// writing it out.
const writebackChunk = 8 << 20

// writeback writes to f and starts the kernel's writeback of each finished
// chunk right away (sync_file_range SYNC_FILE_RANGE_WRITE, which does not
// wait), so the disk works while the stream still arrives and the final
// fsync has little left to flush. It changes no durability guarantee: the
// fsync before the rename is still what makes the snapshot durable.
type writeback struct {
	f           *os.File
	off, synced int64
}

func newWriteback(f *os.File) *writeback { return &writeback{f: f} }

func (w *writeback) Write(p []byte) (int, error) {
	n, err := w.f.Write(p)
	w.off += int64(n)
	if w.off-w.synced >= writebackChunk {
		// Best effort: an error here only loses the head start.
		_ = unix.SyncFileRange(int(w.f.Fd()), w.synced, w.off-w.synced, unix.SYNC_FILE_RANGE_WRITE)
		w.synced = w.off
	}
	return n, err
}
