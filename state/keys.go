package state

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"time"
)

// Bucket names of schema version 1. See doc.go for what each holds.
var (
	bMeta           = []byte("meta")
	bOperations     = []byte("operations")
	bOpsByCluster   = []byte("ops_by_cluster")
	bOpsByTime      = []byte("ops_by_time")
	bAudit          = []byte("audit")
	bAuditByCluster = []byte("audit_by_cluster")
	bAuditByActor   = []byte("audit_by_actor")
	bAuditByAction  = []byte("audit_by_action")
	bAuditByOp      = []byte("audit_by_op")
	bAuditByResult  = []byte("audit_by_result")
	bAuditByCommand = []byte("audit_by_command")
	bAuditByTime    = []byte("audit_by_time")
	bApprovals      = []byte("approvals")
	bLocks          = []byte("locks")
	bLogs           = []byte("logs")
	bKV             = []byte("kv")
)

// v1Buckets are the top-level buckets every v1 database has.
func v1Buckets() [][]byte {
	return [][]byte{
		bMeta, bOperations, bOpsByCluster, bOpsByTime,
		bAudit, bAuditByCluster, bAuditByActor, bAuditByAction, bAuditByOp, bAuditByResult, bAuditByCommand, bAuditByTime,
		bApprovals, bLocks, bLogs, bKV,
	}
}

// Keys in the meta bucket.
var (
	kSchemaVersion = []byte("schema_version") // decimal ASCII
	kAuditHead     = []byte("audit_head")     // seq(8) | time(8) | hash (hex)
	// kAuditUnordered holds the last seq (8 bytes) of a migrated record whose
	// time is earlier than a predecessor's; absent when times never went back.
	kAuditUnordered = []byte("audit_unordered_until")
)

// u64 encodes v big-endian so byte order equals numeric order.
func u64(v uint64) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, v)
	return b
}

func getU64(b []byte) uint64 { return binary.BigEndian.Uint64(b) }

// timeBytes encodes t as 8 bytes whose byte order equals time order: the
// Unix nanoseconds with the sign bit flipped. Times outside the int64
// nanosecond range (before 1678, after 2262) are clamped.
func timeBytes(t time.Time) []byte {
	return u64(timeOrd(t))
}

func timeOrd(t time.Time) uint64 {
	var ns int64
	switch {
	case t.Before(time.Unix(0, math.MinInt64)):
		ns = math.MinInt64
	case t.After(time.Unix(0, math.MaxInt64)):
		ns = math.MaxInt64
	default:
		ns = t.UnixNano()
	}
	return uint64(ns) ^ (1 << 63)
}

func ordTime(v uint64) time.Time {
	return time.Unix(0, int64(v^(1<<63))).UTC()
}

// prefix returns a length-prefixed copy of s (uint16 big-endian length, then
// the bytes). Length-prefixing makes "a" and "a\x00b" distinct prefixes, so an
// index scan for one cluster never runs into another, whatever bytes the
// names contain.
func prefix(s string) ([]byte, error) {
	if len(s) > math.MaxUint16 {
		return nil, fmt.Errorf("value of %d bytes is too long to index (max %d)", len(s), math.MaxUint16)
	}
	b := make([]byte, 2, 2+len(s)+16)
	binary.BigEndian.PutUint16(b, uint16(len(s)))
	return append(b, s...), nil
}

func join(parts ...[]byte) []byte {
	return bytes.Join(parts, nil)
}

// clone copies bbolt-owned memory, which is only valid inside its tx.
func clone(b []byte) []byte {
	if b == nil {
		return nil
	}
	out := make([]byte, len(b))
	copy(out, b)
	return out
}
