// Package snapname is the one place that makes and reads etcd snapshot
// names, locally and off-site, so that every reader (retention, listing,
// recover, drill, off-site keys) accepts exactly what the writer makes.
//
// A new name is "<UTC time to the millisecond>-<node>-<8 hex>", e.g.
// 20261202T143000.250Z-cp-1-9f86d081: the random suffix makes two snapshots
// taken in the same millisecond (or with a frozen clock) distinct, and the
// millisecond keeps names in time order within a second. Names written
// before (<UTC second>-<node>, e.g. 20261202T143000Z-cp-1) still parse.
// The file is the name plus ".db", or ".db.age" when age-encrypted.
package snapname

import (
	"crypto/rand"
	"encoding/hex"
	"regexp"
	"time"
)

// SecondLayout is the timestamp of names written before the unique suffix
// (and of the one-second names talosctl users are told to pick); time.Parse
// with it also reads the fractional seconds of new names.
const SecondLayout = "20060102T150405Z"

// layout is the timestamp of new names.
const layout = "20060102T150405.000Z"

// pattern matches both forms: group 1 is the name, 2 the timestamp, 3 the
// age extension. The node part is never parsed out: node names may hold
// '-', so a name is an opaque id once its time is read.
var pattern = regexp.MustCompile(`^((\d{8}T\d{6}(?:\.\d{1,9})?Z)-[A-Za-z0-9._-]+?)\.db(\.age)?$`)

// New returns a fresh name for a snapshot of node taken at now. It is unique
// with overwhelming probability; writers still create it exclusively (a
// name that exists is never replaced).
func New(now time.Time, node string) string {
	var b [4]byte
	// crypto/rand.Read never fails (it crashes the program instead).
	_, _ = rand.Read(b[:])
	return now.UTC().Format(layout) + "-" + node + "-" + hex.EncodeToString(b[:])
}

// Parse reads a snapshot file or object name (no directory): the name
// without extension, when it was taken, and whether it is age-encrypted.
// ok is false for anything else (part files, notes, lock files).
func Parse(file string) (name string, at time.Time, encrypted, ok bool) {
	m := pattern.FindStringSubmatch(file)
	if m == nil {
		return "", time.Time{}, false, false
	}
	at, err := time.Parse(SecondLayout, m[2])
	if err != nil {
		return "", time.Time{}, false, false
	}
	return m[1], at, m[3] != "", true
}
