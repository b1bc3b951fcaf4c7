package state

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Regenerate testdata/v0.db with:
//
//	go test ./state -run TestRegenerateV0Fixture -update-v0
var updateV0 = flag.Bool("update-v0", false, "rewrite testdata/v0.db from writeV0Fixture")

const v0FixturePath = "testdata/v0.db"

// v0Operation is the operation record as the v0 code wrote it: fewer fields,
// and "pending_approval" for the approval wait.
type v0Operation struct {
	ID          string            `json:"id"`
	Cluster     string            `json:"cluster"`
	Environment string            `json:"environment"`
	Command     string            `json:"command"`
	Args        map[string]string `json:"args,omitempty"`
	Requester   string            `json:"requester"`
	State       string            `json:"state"`
	Digest      string            `json:"digest,omitempty"`
	Result      string            `json:"result,omitempty"`
	CreatedAt   time.Time         `json:"created_at"`
	UpdatedAt   time.Time         `json:"updated_at"`
}

var v0Base = time.Date(2025, 11, 2, 9, 0, 0, 0, time.UTC)

// writeV0Fixture writes a database in the v0 layout (see migrate.go).
func writeV0Fixture(path string) error {
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		return err
	}
	defer db.Close()
	return db.Update(func(tx *bolt.Tx) error {
		ops, err := tx.CreateBucket([]byte("operations"))
		if err != nil {
			return err
		}
		for _, op := range []v0Operation{
			{ID: "op-1", Cluster: "prod", Environment: "production", Command: "upgrade talos", Args: map[string]string{"to": "v1.13.9"}, Requester: "alice", State: "succeeded", Digest: "d-1", Result: "3 nodes at v1.13.9", CreatedAt: v0Base},
			{ID: "op-2", Cluster: "staging", Environment: "staging", Command: "upgrade kubernetes", Args: map[string]string{"to": "1.37.2"}, Requester: "bob", State: "pending_approval", Digest: "d-2", CreatedAt: v0Base.Add(time.Hour)},
			{ID: "op/3", Cluster: "prod", Environment: "production", Command: "health", Requester: "bob", State: "running", CreatedAt: v0Base.Add(2 * time.Hour)},
			{ID: "op-4", Cluster: "prod", Environment: "production", Command: "remove node", Args: map[string]string{"node": "cp-3"}, Requester: "carol", State: "denied", CreatedAt: v0Base.Add(3 * time.Hour)},
		} {
			op.UpdatedAt = op.CreatedAt.Add(time.Minute)
			raw, err := json.Marshal(op)
			if err != nil {
				return err
			}
			if err := ops.Put([]byte(op.ID), raw); err != nil {
				return err
			}
		}

		audit, err := tx.CreateBucket([]byte("audit"))
		if err != nil {
			return err
		}
		events := []AuditEvent{
			{Actor: "alice", Action: "op.plan", Cluster: "prod", OpID: "op-1", Command: "upgrade talos", Result: "ok"},
			{Actor: "bob", Action: "op.approve", Cluster: "prod", OpID: "op-1", Command: "upgrade talos", Result: "ok", Detail: map[string]string{"digest": "d-1"}},
			{Actor: "talosbot", Action: "lock.acquire", Cluster: "prod", OpID: "op-1", Result: "ok"},
			{Actor: "talosbot", Action: "op.run", Cluster: "prod", OpID: "op-1", Command: "upgrade talos", Result: "ok"},
			{Actor: "talosbot", Action: "op.finish", Cluster: "prod", OpID: "op-1", Command: "upgrade talos", Result: "succeeded", Detail: map[string]string{"snapshot": "snap-1"}},
			{Actor: "bob", Action: "op.plan", Cluster: "staging", OpID: "op-2", Command: "upgrade kubernetes", Result: "ok"},
			{Actor: "bob", Action: "op.plan", Cluster: "prod", OpID: "op/3", Command: "health", Result: "ok"},
			{Actor: "talosbot", Action: "op.run", Cluster: "prod", OpID: "op/3", Command: "health", Result: "ok"},
			{Actor: "carol", Action: "op.plan", Cluster: "prod", OpID: "op-4", Command: "remove node", Result: "ok"},
			{Actor: "dave", Action: "op.deny", Cluster: "prod", OpID: "op-4", Command: "remove node", Result: "denied", Detail: map[string]string{"reason": "quorum"}},
			{Actor: "alertmanager", Action: "alert.received", Cluster: "prod", Result: "ok", Detail: map[string]string{"fingerprint": "fp-aaa"}},
			{Actor: "alice", Action: "config.reload", Result: "ok"},
		}
		// v0 stamped records with the wall clock and did not keep times
		// monotonic: record 8 is ten minutes before record 7.
		offsets := []time.Duration{0, 5, 6, 7, 40, 60, 120, 110, 180, 185, 190, 200}
		prev := ""
		for i, ev := range events {
			ev.Time = v0Base.Add(offsets[i] * time.Minute)
			rec := AuditRecord{Seq: uint64(i + 1), AuditEvent: ev, PrevHash: prev}
			raw, err := encodeRecord(&rec)
			if err != nil {
				return err
			}
			if err := audit.Put(u64(rec.Seq), raw); err != nil {
				return err
			}
			prev = rec.Hash
		}

		approvals, err := tx.CreateBucket([]byte("approvals"))
		if err != nil {
			return err
		}
		for _, a := range []Approval{
			{OpID: "op-1", User: "bob", Digest: "d-1", At: v0Base.Add(5 * time.Minute)},
			{OpID: "op-2", User: "alice", Digest: "d-2", At: v0Base.Add(61 * time.Minute)},
			{OpID: "op/3", User: "bob", Digest: "", At: v0Base.Add(121 * time.Minute)},
		} {
			raw, err := json.Marshal(a)
			if err != nil {
				return err
			}
			if err := approvals.Put([]byte(a.OpID+"/"+a.User), raw); err != nil {
				return err
			}
		}

		locks, err := tx.CreateBucket([]byte("locks"))
		if err != nil {
			return err
		}
		raw, err := json.Marshal(Lock{Cluster: "prod", OpID: "op/3", Holder: "bob", Command: "health", Since: v0Base.Add(2 * time.Hour)})
		if err != nil {
			return err
		}
		if err := locks.Put([]byte("prod"), raw); err != nil {
			return err
		}

		alerts, err := tx.CreateBucket([]byte("alerts"))
		if err != nil {
			return err
		}
		if err := alerts.Put([]byte("fp-aaa"), []byte(`{"first_seen":"2025-11-02T12:10:00Z"}`)); err != nil {
			return err
		}
		return alerts.Put([]byte("fp-bbb"), []byte(`{"first_seen":"2025-11-02T12:20:00Z"}`))
	})
}

func TestRegenerateV0Fixture(t *testing.T) {
	if !*updateV0 {
		t.Skip("pass -update-v0 to rewrite " + v0FixturePath)
	}
	tmp := filepath.Join(t.TempDir(), "v0.db")
	if err := writeV0Fixture(tmp); err != nil {
		t.Fatal(err)
	}
	// Compact so the committed file is small.
	src, err := bolt.Open(tmp, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if err := os.Remove(v0FixturePath); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	dst, err := bolt.Open(v0FixturePath, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := bolt.Compact(dst, src, 0); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(v0FixturePath)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("wrote %s (%d bytes)\n", v0FixturePath, fi.Size())
}
