package state

import (
	"encoding/json"
	"fmt"
	"strconv"

	bolt "go.etcd.io/bbolt"
)

// Schema history.
//
// v0 (talosbot before the state package had a schema number) — no meta
// bucket and no indexes:
//
//	operations  id → operation JSON; the approval-wait state was spelled
//	            "pending_approval"
//	audit       seq(8, big-endian) → record JSON (same canonical form and hash
//	            chain as v1, so migration never rewrites audit records)
//	approvals   "<opID>/<user>" → approval JSON
//	locks       cluster → lock JSON
//	alerts      fingerprint → value (top-level)
//
// v1 — see doc.go. v0→v1 creates meta and every v1 bucket, renames the state
// "pending_approval" to "awaiting_approval", builds the ops and audit indexes
// and the audit head, re-keys approvals as prefix(opID)|user (a "/" in an op
// id made v0 keys ambiguous), and moves alerts into kv/alerts.

// v0 names that v1 no longer uses.
var (
	bV0Alerts              = []byte("alerts")
	v0StatePendingApproval = OpState("pending_approval")
)

type migration struct {
	from, to int
	run      func(tx *bolt.Tx) error
}

func migrations() []migration {
	return []migration{
		{from: 0, to: 1, run: migrateV0toV1},
	}
}

// migrate brings tx from version (-1 = empty file) to CurrentSchema. It runs
// inside one Update, so a failed migration leaves the file untouched.
func migrate(tx *bolt.Tx, version int) error {
	if version < 0 {
		if err := createV1Buckets(tx); err != nil {
			return err
		}
		if err := setSchema(tx, CurrentSchema); err != nil {
			return err
		}
		// The head exists from the start (seq 0), so that a missing head
		// always means it was deleted.
		return writeHead(tx.Bucket(bMeta), auditHead{})
	}
	for _, m := range migrations() {
		if m.from != version {
			continue
		}
		if err := m.run(tx); err != nil {
			return fmt.Errorf("migration v%d→v%d: %w", m.from, m.to, err)
		}
		version = m.to
	}
	if version != CurrentSchema {
		return fmt.Errorf("no migration path from schema %d to %d", version, CurrentSchema)
	}
	return setSchema(tx, CurrentSchema)
}

func createV1Buckets(tx *bolt.Tx) error {
	for _, name := range v1Buckets() {
		if _, err := tx.CreateBucketIfNotExists(name); err != nil {
			return fmt.Errorf("create bucket %s: %w", name, err)
		}
	}
	return nil
}

func setSchema(tx *bolt.Tx, v int) error {
	meta, err := tx.CreateBucketIfNotExists(bMeta)
	if err != nil {
		return fmt.Errorf("create meta bucket: %w", err)
	}
	return meta.Put(kSchemaVersion, []byte(strconv.Itoa(v)))
}

func migrateV0toV1(tx *bolt.Tx) error {
	if err := createV1Buckets(tx); err != nil {
		return err
	}
	if err := migrateV0Operations(tx); err != nil {
		return err
	}
	if err := migrateV0Audit(tx); err != nil {
		return err
	}
	if err := migrateV0Approvals(tx); err != nil {
		return err
	}
	return migrateV0Alerts(tx)
}

func migrateV0Operations(tx *bolt.Tx) error {
	ops := tx.Bucket(bOperations)
	byCluster, byTime := tx.Bucket(bOpsByCluster), tx.Bucket(bOpsByTime)
	type kv struct{ k, v []byte }
	var rewrites []kv
	err := ops.ForEach(func(k, v []byte) error {
		var op Operation
		if err := json.Unmarshal(v, &op); err != nil {
			return fmt.Errorf("decode operation %q: %w", k, err)
		}
		if op.State == v0StatePendingApproval {
			op.State = StateAwaitingApproval
			raw, err := json.Marshal(&op)
			if err != nil {
				return fmt.Errorf("encode operation %q: %w", k, err)
			}
			rewrites = append(rewrites, kv{clone(k), raw})
		}
		if !op.State.Valid() {
			return fmt.Errorf("operation %q has unknown state %q", k, op.State)
		}
		ck, tk, err := opIndexKeys(&op)
		if err != nil {
			return fmt.Errorf("operation %q: %w", k, err)
		}
		if err := byCluster.Put(ck, nil); err != nil {
			return err
		}
		return byTime.Put(tk, nil)
	})
	if err != nil {
		return fmt.Errorf("operations: %w", err)
	}
	for _, r := range rewrites { // not inside ForEach: bbolt forbids writes there
		if err := ops.Put(r.k, r.v); err != nil {
			return fmt.Errorf("operations: %w", err)
		}
	}
	return nil
}

func migrateV0Audit(tx *bolt.Tx) error {
	audit := tx.Bucket(bAudit)
	var head auditHead
	var unordered uint64
	err := audit.ForEach(func(k, v []byte) error {
		rec, err := decodeRecord(v)
		if err != nil {
			return fmt.Errorf("decode audit record %x: %w", k, err)
		}
		// v0 did not keep times monotonic; index by the running maximum so
		// the time index stays in seq order, and remember the last record
		// that is out of order so Until queries still find it.
		if rec.Time.After(head.Time) {
			head.Time = rec.Time
		} else if rec.Time.Before(head.Time) {
			unordered = rec.Seq
		}
		if err := indexRecord(tx, rec, head.Time); err != nil {
			return err
		}
		head.Seq, head.Hash = rec.Seq, rec.Hash
		return nil
	})
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	if head.Seq == 0 {
		return nil
	}
	if unordered > 0 {
		if err := tx.Bucket(bMeta).Put(kAuditUnordered, u64(unordered)); err != nil {
			return err
		}
	}
	return writeHead(tx.Bucket(bMeta), head)
}

func migrateV0Approvals(tx *bolt.Tx) error {
	b := tx.Bucket(bApprovals)
	var old [][]byte
	var approvals []Approval
	err := b.ForEach(func(k, v []byte) error {
		var a Approval
		if err := json.Unmarshal(v, &a); err != nil {
			return fmt.Errorf("decode approval %q: %w", k, err)
		}
		old = append(old, clone(k))
		approvals = append(approvals, a)
		return nil
	})
	if err != nil {
		return fmt.Errorf("approvals: %w", err)
	}
	for _, k := range old {
		if err := b.Delete(k); err != nil {
			return fmt.Errorf("approvals: %w", err)
		}
	}
	for _, a := range approvals {
		k, err := approvalKey(a.OpID, a.User)
		if err != nil {
			return fmt.Errorf("approvals: %w", err)
		}
		raw, err := json.Marshal(a)
		if err != nil {
			return fmt.Errorf("approvals: %w", err)
		}
		if err := b.Put(k, raw); err != nil {
			return fmt.Errorf("approvals: %w", err)
		}
	}
	return nil
}

func migrateV0Alerts(tx *bolt.Tx) error {
	old := tx.Bucket(bV0Alerts)
	if old == nil {
		return nil
	}
	dst, err := tx.Bucket(bKV).CreateBucketIfNotExists([]byte("alerts"))
	if err != nil {
		return fmt.Errorf("alerts: %w", err)
	}
	if err := old.ForEach(func(k, v []byte) error { return dst.Put(clone(k), clone(v)) }); err != nil {
		return fmt.Errorf("alerts: %w", err)
	}
	if err := tx.DeleteBucket(bV0Alerts); err != nil {
		return fmt.Errorf("alerts: %w", err)
	}
	return nil
}
