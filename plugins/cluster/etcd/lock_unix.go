//go:build unix

package etcd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"
)

// lockPoll is how often a queued snapshot run tries the lock again. flock
// has no timed or cancellable wait, and a blocked flock(2) cannot be
// interrupted by ctx, so a queued run polls.
const lockPoll = 250 * time.Millisecond

// lockCluster takes the cluster's snapshot lock, path, across processes
// (several plugin processes can snapshot one cluster at once: a standalone
// snapshot and an upgrade's pre-upgrade snapshot). While another run holds
// it, waiting is told once who that is (what the holder wrote into the
// file) as soon as the holder has written it, and the run queues until the lock is free or ctx ends. The holder
// writes holder into the file so that a queued run can name it. The lock is
// the open file description's, so two opens in one process exclude each
// other too; the kernel drops it if the process dies.
func lockCluster(ctx context.Context, path, holder string, waiting func(string)) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open the snapshot lock %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			_ = f.Close()
		}
	}()
	told := false
	var tick *time.Ticker
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if tick == nil {
			tick = time.NewTicker(lockPoll)
			defer tick.Stop()
		}
		// The holder writes its name just after it locks and clears it just
		// before it unlocks: until the name is there, try again.
		if !told {
			b, _ := os.ReadFile(path)
			if other := strings.TrimSpace(string(b)); other != "" {
				told = true
				waiting(other)
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for the snapshot in progress to finish: %w", ctx.Err())
		case <-tick.C:
		}
	}
	if err = f.Truncate(0); err == nil {
		_, err = f.WriteAt([]byte(holder+"\n"), 0)
	}
	if err != nil {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		return nil, fmt.Errorf("write the snapshot lock %s: %w", path, err)
	}
	return func() {
		// Cleared, not removed: removing a flock file lets a waiter lock an
		// unlinked inode while a newcomer locks a new file.
		_ = f.Truncate(0)
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		_ = f.Close()
	}, nil
}
