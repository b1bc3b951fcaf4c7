package host

import (
	"sync"
	"time"
)

// A launch hashes the plugin's executable once (verifyChecksum, through the
// descriptor it then executes). talosbot-plugins is about 90 MB, so that
// hash is most of a built-in's start; every built-in is a process of that
// same binary, and each would hash it again, as would every restart. The
// Manager therefore remembers which files it verified, by what the kernel
// says of the open file: device, inode, size, mtime and ctime (fileID).
//
// Why that is sound: the descriptor pins the inode, so a file renamed over
// the path is another inode and is hashed. Changing the bytes of the same
// inode through write(2), truncate or a newly made writable mapping sets its
// ctime to the current time, and ctime cannot be set back from user space
// (utimes sets mtime and atime; setting ctime needs the clock). Two limits,
// and how they are handled:
//   - Timestamps are coarse (a clock tick, up to a second or two on some
//     filesystems): a write in the same tick as the file's last change can
//     leave ctime as it was. A file is remembered only if its ctime was
//     already settleTime old when it was hashed, so a later write moves it.
//   - A writable shared mapping made before the check can change pages
//     without touching ctime again. While such a mapping exists, exec fails
//     (ETXTBSY), so it is gone once the plugin runs, and a new one sets ctime
//     on its first write. A file is therefore remembered only after its
//     plugin started, from the same descriptor, and only if nothing changed
//     between the check and then (which also refuses a file written during
//     the launch, a check the second hash by go-plugin's SecureConfig made
//     only for the time between the two hashes).
//
// Neither this nor the second hash it replaces stops bytes written in the
// instant between the check and the exec from running (the post-start check
// then kills that process and refuses the launch, which the second hash did
// not): keep plugin executables writable only by whoever installs them.
//
// The cache lives in the Manager (one bot, one set of verified files); a new
// Manager hashes again.

// settleTime is how old a file's ctime must be before its verification is
// remembered: longer than the timestamp granularity of common filesystems.
const settleTime = 2 * time.Second

// fileID is what identifies an open file's content to the cache; ok is
// false where the platform gives no ctime (then nothing is remembered).
type fileID struct {
	dev, ino     uint64
	size         int64
	mtime, ctime int64 // ns since the epoch
}

// verifiedFiles maps a verified file to the sum it was verified against.
type verifiedFiles struct {
	settle time.Duration // settleTime; tests shorten it
	mu     sync.Mutex
	sum    map[fileID]string
}

// has reports whether id was verified against sum. A file never verified
// is not, whatever sum is (the empty one included: a missing entry reads as
// "", so comparing the lookup alone would pass an empty sum unhashed).
func (v *verifiedFiles) has(id fileID, sum string) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	got, ok := v.sum[id]
	return ok && got == sum
}

// add remembers id as verified against sum if its ctime was settled at
// hashedAt (see settleTime).
func (v *verifiedFiles) add(id fileID, sum string, hashedAt time.Time) {
	if hashedAt.Sub(time.Unix(0, id.ctime)) < v.settle {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.sum == nil {
		v.sum = map[fileID]string{}
	}
	v.sum[id] = sum
}
