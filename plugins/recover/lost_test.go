package recover

import (
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/server/v3/storage/mvcc"
	"go.etcd.io/etcd/server/v3/storage/schema"
	"google.golang.org/protobuf/proto"
)

func TestObjectName(t *testing.T) {
	t.Parallel()
	for key, want := range map[string]string{
		"/registry/configmaps/default/after":                         "configmaps default/after",
		"/registry/secrets/kube-system/token":                        "secrets kube-system/token",
		"/registry/namespaces/team-a":                                "namespaces team-a",
		"/registry/minions/worker-1":                                 "nodes worker-1",
		"/registry/services/specs/default/kubernetes":                "services default/kubernetes",
		"/registry/services/endpoints/default/kubernetes":            "endpoints default/kubernetes",
		"/registry/deployments/apps/web":                             "deployments apps/web",
		"/registry/cert-manager.io/certificates/default/web":         "certificates.cert-manager.io default/web",
		"/registry/apiextensions.k8s.io/customresourcedefinitions/x": "customresourcedefinitions.apiextensions.k8s.io x",
		"/talos/other": "key /talos/other",
	} {
		if got, churn, ok := objectName(key); !ok || churn || got != want {
			t.Errorf("objectName(%q) = %q, %v, %v; want %q", key, got, churn, ok, want)
		}
	}
	for _, key := range []string{"/registry/leases/kube-system/kube-scheduler", "/registry/events/default/x.1", "/registry/masterleases/10.5.0.2"} {
		if _, churn, ok := objectName(key); !ok || !churn {
			t.Errorf("objectName(%q): churn %v, ok %v; want a counted churn write", key, churn, ok)
		}
	}
	if _, _, ok := objectName("compact_rev_key"); ok {
		t.Error("compact_rev_key is etcd's bookkeeping, not an object")
	}
}

// TestLostSince writes etcd's key bucket as the backend lays it out (etcd's
// own revision encoding) and reads what changed after revision 10.
func TestLostSince(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "db")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	put := func(b *bolt.Bucket, main int64, key string, create int64, tomb bool) {
		rb := mvcc.RevToBytes(mvcc.Revision{Main: main}, mvcc.NewRevBytes())
		if tomb {
			rb = append(rb, 't')
		}
		v, err := proto.Marshal(&mvccpb.KeyValue{Key: []byte(key), CreateRevision: create, ModRevision: main, Value: []byte("s3cr3t-value")})
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Put(rb, v); err != nil {
			t.Fatal(err)
		}
	}
	err = db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket(schema.Key.Name())
		if err != nil {
			return err
		}
		put(b, 5, "/registry/configmaps/default/before", 5, false)
		put(b, 8, "/registry/secrets/default/old", 8, false)
		put(b, 9, "/registry/configmaps/default/edited", 9, false)
		// After the snapshot (revision 10):
		put(b, 11, "/registry/configmaps/default/after", 11, false)
		put(b, 12, "/registry/configmaps/default/edited", 9, false)
		put(b, 13, "/registry/secrets/default/old", 0, true)
		put(b, 14, "/registry/leases/kube-system/kube-scheduler", 3, false)
		put(b, 15, "/registry/configmaps/default/brief", 15, false)
		put(b, 16, "/registry/configmaps/default/brief", 0, true)
		for i := int64(0); i < 12; i++ {
			put(b, 20+i, "/registry/secrets/ns/s"+string(rune('a'+i)), 20+i, false)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	l, err := lostSince(path, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Gone) != 14 || l.Gone[0] != "configmaps default/after" || l.Gone[1] != "configmaps default/edited" {
		t.Fatalf("gone %v: want the created and the edited configmap and 12 secrets (not the one created and deleted since)", l.Gone)
	}
	if len(l.Back) != 1 || l.Back[0] != "secrets default/old" || l.Churn != 1 {
		t.Fatalf("back %v, churn %d: want the deleted secret back and one lease write", l.Back, l.Churn)
	}
	w := l.Words()
	for _, s := range []string{"14 object(s) created or changed", "configmaps default/after", "and 4 more", "1 object(s) deleted after the snapshot are back: secrets default/old", "1 lease/event write(s)"} {
		if !strings.Contains(w, s) {
			t.Fatalf("words lack %q: %s", s, w)
		}
	}
	if strings.Contains(w, "s3cr3t") || strings.Contains(w, "before") {
		t.Fatalf("words show a value or an object from before the snapshot: %s", w)
	}
}
