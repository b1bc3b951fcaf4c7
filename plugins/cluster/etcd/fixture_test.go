package etcd

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"testing"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"
)

// writeSnapshotFixture writes an etcd-shaped bolt database (a "key" bucket of
// revision → mvccpb.KeyValue, as etcd stores it) with keys values of
// valueSize bytes, then appends the sha256 trailer that etcd's snapshot
// stream carries. etcdutl's Status and Restore accept it like a real one.
func writeSnapshotFixture(tb testing.TB, path string, keys, valueSize int) {
	tb.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{NoSync: true, NoFreelistSync: true})
	if err != nil {
		tb.Fatal(err)
	}
	val := make([]byte, valueSize)
	const batch = 256
	for start := 0; start < keys; start += batch {
		err = db.Update(func(tx *bolt.Tx) error {
			b, err := tx.CreateBucketIfNotExists([]byte("key"))
			if err != nil {
				return err
			}
			b.FillPercent = 1
			if _, err := tx.CreateBucketIfNotExists([]byte("meta")); err != nil {
				return err
			}
			for i := start; i < min(start+batch, keys); i++ {
				rev := int64(i + 1)
				k := make([]byte, 17)
				binary.BigEndian.PutUint64(k, uint64(rev))
				k[8] = '_'
				binary.BigEndian.PutUint64(k[9:], 0)
				val[0] = byte(i)
				v, err := proto.Marshal(&mvccpb.KeyValue{Key: fmt.Appendf(nil, "/fixture/%08d", i), Value: val,
					CreateRevision: rev, ModRevision: rev, Version: 1})
				if err != nil {
					return err
				}
				if err := b.Put(k, v); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			tb.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		tb.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		tb.Fatal(err)
	}
	if _, err := f.Write(h.Sum(nil)); err != nil {
		tb.Fatal(err)
	}
	// Flush now so benchmarks do not pay the fixture's writeback.
	if err := f.Sync(); err != nil {
		tb.Fatal(err)
	}
}
