package conformance

import (
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"
)

// registryKeys counts the live keys under prefix in an etcd snapshot (a bbolt file). etcd's
// "key" bucket maps revisions to KeyValues in revision order; a revision key of 17 bytes
// ending in 't' is a tombstone (go.etcd.io/etcd/server/v3/storage/mvcc/revision.go).
func registryKeys(t *testing.T, path, prefix string) int {
	t.Helper()

	db, err := bolt.Open(path, 0o400, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("open snapshot %s: %v", path, err)
	}
	defer db.Close()

	live := map[string]bool{}

	err = db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("key"))
		if b == nil {
			return nil
		}

		return b.ForEach(func(rev, v []byte) error {
			var kv mvccpb.KeyValue
			if err := proto.Unmarshal(v, &kv); err != nil {
				return err
			}

			k := string(kv.Key)
			if !strings.HasPrefix(k, prefix) {
				return nil
			}

			if len(rev) == 17 && rev[16] == 't' {
				delete(live, k)
			} else {
				live[k] = true
			}

			return nil
		})
	})
	if err != nil {
		t.Fatalf("read snapshot %s: %v", path, err)
	}

	return len(live)
}
