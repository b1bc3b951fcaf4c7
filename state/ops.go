package state

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"sort"

	bolt "go.etcd.io/bbolt"
)

// Operation returns the operation with the given id, or an error matching
// ErrNotFound.
func (t *Tx) Operation(id string) (*Operation, error) {
	b, err := t.bucket(bOperations)
	if err != nil {
		return nil, err
	}
	return getOp(b, id)
}

func getOp(b *bolt.Bucket, id string) (*Operation, error) {
	raw := b.Get([]byte(id))
	if raw == nil {
		return nil, fmt.Errorf("operation %q: %w", id, ErrNotFound)
	}
	var op Operation
	if err := json.Unmarshal(raw, &op); err != nil {
		return nil, fmt.Errorf("decode operation %q: %w", id, err)
	}
	return &op, nil
}

// PutOperation creates or updates an operation and keeps the ops-by-cluster
// and ops-by-time indexes in step. It sets CreatedAt (when zero) and
// UpdatedAt on op. A new operation must be in state planned (an empty State
// means planned); an update must not change State — state changes go through
// Transition so the transition table is enforced in one place.
func (t *Tx) PutOperation(op *Operation) error {
	if err := t.writable("put operation"); err != nil {
		return err
	}
	if op == nil || op.ID == "" {
		return fmt.Errorf("put operation: operation needs an ID")
	}
	b, err := t.bucket(bOperations)
	if err != nil {
		return err
	}
	var old *Operation
	if b.Get([]byte(op.ID)) != nil {
		if old, err = getOp(b, op.ID); err != nil {
			return err
		}
	}
	if op.State == "" {
		op.State = StatePlanned
	}
	if !op.State.Valid() {
		return fmt.Errorf("put operation %s: unknown state %q", op.ID, op.State)
	}
	if old == nil && op.State != StatePlanned {
		return fmt.Errorf("put operation %s: a new operation starts in %s, not %s; create it planned and move it with Transition", op.ID, StatePlanned, op.State)
	}
	if old != nil && op.State != old.State {
		return fmt.Errorf("put operation %s: state change %s → %s must go through Transition", op.ID, old.State, op.State)
	}
	if op.CreatedAt.IsZero() {
		if old != nil {
			op.CreatedAt = old.CreatedAt
		} else {
			op.CreatedAt = t.now()
		}
	}
	op.UpdatedAt = t.now()
	return t.writeOp(b, old, op)
}

// writeOp stores op and moves its index entries if the indexed fields changed.
func (t *Tx) writeOp(b *bolt.Bucket, old, op *Operation) error {
	byCluster, err := t.bucket(bOpsByCluster)
	if err != nil {
		return err
	}
	byTime, err := t.bucket(bOpsByTime)
	if err != nil {
		return err
	}
	newC, newT, err := opIndexKeys(op)
	if err != nil {
		return fmt.Errorf("put operation %s: %w", op.ID, err)
	}
	if old != nil {
		oldC, oldT, err := opIndexKeys(old)
		if err != nil {
			return fmt.Errorf("put operation %s: %w", op.ID, err)
		}
		if !bytes.Equal(oldC, newC) {
			if err := byCluster.Delete(oldC); err != nil {
				return fmt.Errorf("put operation %s: %w", op.ID, err)
			}
		}
		if !bytes.Equal(oldT, newT) {
			if err := byTime.Delete(oldT); err != nil {
				return fmt.Errorf("put operation %s: %w", op.ID, err)
			}
		}
	}
	raw, err := json.Marshal(op)
	if err != nil {
		return fmt.Errorf("encode operation %s: %w", op.ID, err)
	}
	if err := b.Put([]byte(op.ID), raw); err != nil {
		return fmt.Errorf("put operation %s: %w", op.ID, err)
	}
	if err := byCluster.Put(newC, nil); err != nil {
		return fmt.Errorf("index operation %s: %w", op.ID, err)
	}
	if err := byTime.Put(newT, nil); err != nil {
		return fmt.Errorf("index operation %s: %w", op.ID, err)
	}
	return nil
}

// opIndexKeys: ops_by_cluster = prefix(cluster) | time(created) | id;
// ops_by_time = time(created) | id.
func opIndexKeys(op *Operation) (byCluster, byTime []byte, err error) {
	p, err := prefix(op.Cluster)
	if err != nil {
		return nil, nil, fmt.Errorf("cluster name: %w", err)
	}
	ts := timeBytes(op.CreatedAt)
	return join(p, ts, []byte(op.ID)), join(ts, []byte(op.ID)), nil
}

// Transition moves operation id to state to, if the transition table allows
// it; otherwise it returns a *TransitionError and changes nothing. mutate (may
// be nil) edits other fields in the same write; it must not change ID or
// State. Side effects, all in this transaction:
//   - UpdatedAt is set; entering running increments Attempts and sets
//     StartedAt (first time only); entering a terminal state sets EndedAt.
//   - approved → awaiting_approval deletes the operation's approvals (the plan
//     digest changed, so they no longer apply).
//   - entering a terminal state releases the cluster lock if this operation
//     holds it, so a finished operation can never leave its cluster locked.
func (t *Tx) Transition(id string, to OpState, mutate func(*Operation)) (*Operation, error) {
	if err := t.writable("transition operation"); err != nil {
		return nil, err
	}
	b, err := t.bucket(bOperations)
	if err != nil {
		return nil, err
	}
	old, err := getOp(b, id)
	if err != nil {
		return nil, err
	}
	from := old.State
	if !CanTransition(from, to) {
		return nil, &TransitionError{ID: id, From: from, To: to}
	}
	op, err := getOp(b, id) // a second copy, so mutate cannot alter old
	if err != nil {
		return nil, err
	}
	if mutate != nil {
		mutate(op)
		if op.ID != id || op.State != from {
			return nil, fmt.Errorf("transition operation %s: mutate must not change ID or State (use the to argument)", id)
		}
	}
	now := t.now()
	op.State = to
	op.UpdatedAt = now
	if to == StateRunning {
		op.Attempts++
		if op.StartedAt.IsZero() {
			op.StartedAt = now
		}
	}
	if to.Terminal() && op.EndedAt.IsZero() {
		op.EndedAt = now
	}
	// Back to awaiting approval (a re-plan, before a run or on a resume):
	// the approvals were for the old digest.
	if (from == StateApproved || from == StateInterrupted) && to == StateAwaitingApproval {
		if err := t.DeleteApprovals(id); err != nil {
			return nil, err
		}
	}
	if to.Terminal() {
		if l, err := t.Lock(old.Cluster); err != nil {
			return nil, err
		} else if l != nil && l.OpID == id {
			if err := t.ReleaseLock(old.Cluster, id); err != nil {
				return nil, err
			}
		}
	}
	if err := t.writeOp(b, old, op); err != nil {
		return nil, err
	}
	return op, nil
}

// Operations returns the operations matching f, newest (CreatedAt) first.
func (t *Tx) Operations(f OpFilter) ([]*Operation, error) {
	ops, err := t.bucket(bOperations)
	if err != nil {
		return nil, err
	}
	var idx *bolt.Bucket
	var p []byte // key prefix in idx; the created time follows it
	if f.Cluster != "" {
		if idx, err = t.bucket(bOpsByCluster); err != nil {
			return nil, err
		}
		if p, err = prefix(f.Cluster); err != nil {
			return nil, err
		}
	} else if idx, err = t.bucket(bOpsByTime); err != nil {
		return nil, err
	}
	var since uint64
	if !f.Since.IsZero() {
		since = timeOrd(f.Since)
	}
	var out []*Operation
	c := idx.Cursor()
	for k, _ := lastWithPrefix(c, p); k != nil && bytes.HasPrefix(k, p); k, _ = c.Prev() {
		rest := k[len(p):]
		if len(rest) < 8 {
			return nil, fmt.Errorf("corrupt operations index key %x", k)
		}
		if getU64(rest[:8]) < since {
			break // index is time-ordered: everything further back is older
		}
		op, err := getOp(ops, string(rest[8:]))
		if err != nil {
			return nil, fmt.Errorf("operations index: %w", err)
		}
		if f.Command != "" && op.Command != f.Command {
			continue
		}
		if len(f.States) > 0 && !slices.Contains(f.States, op.State) {
			continue
		}
		out = append(out, op)
		if f.Limit > 0 && len(out) >= f.Limit {
			break
		}
	}
	return out, nil
}

// lastWithPrefix positions c on the last key starting with p (or on some key
// before it, which the caller's HasPrefix check rejects).
func lastWithPrefix(c *bolt.Cursor, p []byte) ([]byte, []byte) {
	if end := prefixEnd(p); end != nil {
		if k, _ := c.Seek(end); k != nil {
			return c.Prev()
		}
	}
	return c.Last()
}

// prefixEnd returns the smallest key greater than every key with prefix p,
// or nil if there is none (p empty or all 0xff).
func prefixEnd(p []byte) []byte {
	end := clone(p)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// Lock returns the lock on cluster, or nil, nil when the cluster is free.
func (t *Tx) Lock(cluster string) (*Lock, error) {
	b, err := t.bucket(bLocks)
	if err != nil {
		return nil, err
	}
	raw := b.Get([]byte(cluster))
	if raw == nil {
		return nil, nil
	}
	var l Lock
	if err := json.Unmarshal(raw, &l); err != nil {
		return nil, fmt.Errorf("decode lock of cluster %q: %w", cluster, err)
	}
	return &l, nil
}

// AcquireLock takes the cluster lock for l.OpID. If the same operation already
// holds it, nothing changes. If another operation holds it, the result is a
// *LockedError naming the holder. l.Since defaults to now.
func (t *Tx) AcquireLock(l Lock) error {
	if err := t.writable("acquire lock"); err != nil {
		return err
	}
	if l.Cluster == "" || l.OpID == "" {
		return fmt.Errorf("acquire lock: cluster and operation id are required (got cluster %q, op %q)", l.Cluster, l.OpID)
	}
	cur, err := t.Lock(l.Cluster)
	if err != nil {
		return err
	}
	if cur != nil {
		if cur.OpID == l.OpID {
			return nil
		}
		return &LockedError{Holder: *cur}
	}
	if l.Since.IsZero() {
		l.Since = t.now()
	}
	raw, err := json.Marshal(l)
	if err != nil {
		return fmt.Errorf("encode lock: %w", err)
	}
	b, err := t.bucket(bLocks)
	if err != nil {
		return err
	}
	if err := b.Put([]byte(l.Cluster), raw); err != nil {
		return fmt.Errorf("acquire lock on %s: %w", l.Cluster, err)
	}
	return nil
}

// ReleaseLock frees the cluster lock held by opID. Releasing a free lock is a
// no-op; releasing a lock held by another operation is an error.
func (t *Tx) ReleaseLock(cluster, opID string) error {
	if err := t.writable("release lock"); err != nil {
		return err
	}
	cur, err := t.Lock(cluster)
	if err != nil || cur == nil {
		return err
	}
	if cur.OpID != opID {
		return fmt.Errorf("release lock on %s: it is held by operation %s, not %s; only the holder may release it", cluster, cur.OpID, opID)
	}
	b, err := t.bucket(bLocks)
	if err != nil {
		return err
	}
	if err := b.Delete([]byte(cluster)); err != nil {
		return fmt.Errorf("release lock on %s: %w", cluster, err)
	}
	return nil
}

func approvalKey(opID, user string) ([]byte, error) {
	p, err := prefix(opID)
	if err != nil {
		return nil, err
	}
	return append(p, user...), nil
}

// PutApproval records (or replaces) a user's approval of an operation.
// a.At defaults to now.
func (t *Tx) PutApproval(a Approval) error {
	if err := t.writable("put approval"); err != nil {
		return err
	}
	if a.OpID == "" || a.User == "" {
		return fmt.Errorf("put approval: operation id and user are required (got op %q, user %q)", a.OpID, a.User)
	}
	if a.At.IsZero() {
		a.At = t.now()
	}
	k, err := approvalKey(a.OpID, a.User)
	if err != nil {
		return fmt.Errorf("put approval: %w", err)
	}
	raw, err := json.Marshal(a)
	if err != nil {
		return fmt.Errorf("encode approval: %w", err)
	}
	b, err := t.bucket(bApprovals)
	if err != nil {
		return err
	}
	if err := b.Put(k, raw); err != nil {
		return fmt.Errorf("put approval: %w", err)
	}
	return nil
}

// Approvals returns the approvals of an operation, oldest first.
func (t *Tx) Approvals(opID string) ([]Approval, error) {
	b, err := t.bucket(bApprovals)
	if err != nil {
		return nil, err
	}
	p, err := prefix(opID)
	if err != nil {
		return nil, err
	}
	var out []Approval
	c := b.Cursor()
	for k, v := c.Seek(p); k != nil && bytes.HasPrefix(k, p); k, v = c.Next() {
		var a Approval
		if err := json.Unmarshal(v, &a); err != nil {
			return nil, fmt.Errorf("decode approval %x: %w", k, err)
		}
		out = append(out, a)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if !out[i].At.Equal(out[j].At) {
			return out[i].At.Before(out[j].At)
		}
		return out[i].User < out[j].User
	})
	return out, nil
}

// DeleteApprovals removes every approval of an operation.
func (t *Tx) DeleteApprovals(opID string) error {
	if err := t.writable("delete approvals"); err != nil {
		return err
	}
	b, err := t.bucket(bApprovals)
	if err != nil {
		return err
	}
	p, err := prefix(opID)
	if err != nil {
		return err
	}
	// Collect first: deleting under a moving cursor can skip keys.
	var keys [][]byte
	c := b.Cursor()
	for k, _ := c.Seek(p); k != nil && bytes.HasPrefix(k, p); k, _ = c.Next() {
		keys = append(keys, clone(k))
	}
	for _, k := range keys {
		if err := b.Delete(k); err != nil {
			return fmt.Errorf("delete approvals of %s: %w", opID, err)
		}
	}
	return nil
}

// PutKV stores val under key in the small generic bucket named bucket (e.g.
// "alerts" for alert fingerprints), creating the bucket if needed.
func (t *Tx) PutKV(bucket, key string, val []byte) error {
	if err := t.writable("put kv"); err != nil {
		return err
	}
	if bucket == "" || key == "" {
		return fmt.Errorf("put kv: bucket and key are required (got %q, %q)", bucket, key)
	}
	if bucket == string(kvWritten) {
		return fmt.Errorf("put kv: bucket name %q is reserved", bucket)
	}
	kv, err := t.bucket(bKV)
	if err != nil {
		return err
	}
	b, err := kv.CreateBucketIfNotExists([]byte(bucket))
	if err != nil {
		return fmt.Errorf("put kv %s: %w", bucket, err)
	}
	if val == nil {
		val = []byte{} // bbolt stores nil and empty alike; make Get return non-nil
	}
	if err := b.Put([]byte(key), val); err != nil {
		return fmt.Errorf("put kv %s/%s: %w", bucket, key, err)
	}
	w, err := written(kv, bucket)
	if err != nil {
		return err
	}
	if err := w.Put([]byte(key), timeBytes(t.now())); err != nil {
		return fmt.Errorf("put kv %s/%s: record the write time: %w", bucket, key, err)
	}
	return nil
}

// GetKV returns a copy of the value, or an error matching ErrNotFound.
func (t *Tx) GetKV(bucket, key string) ([]byte, error) {
	kv, err := t.bucket(bKV)
	if err != nil {
		return nil, err
	}
	if b := kv.Bucket([]byte(bucket)); b != nil {
		if v := b.Get([]byte(key)); v != nil {
			return clone(v), nil
		}
	}
	return nil, fmt.Errorf("kv %s/%s: %w", bucket, key, ErrNotFound)
}

// DeleteKV removes a key; a missing key is not an error.
func (t *Tx) DeleteKV(bucket, key string) error {
	if err := t.writable("delete kv"); err != nil {
		return err
	}
	kv, err := t.bucket(bKV)
	if err != nil {
		return err
	}
	if b := kv.Bucket([]byte(bucket)); b != nil {
		if err := b.Delete([]byte(key)); err != nil {
			return fmt.Errorf("delete kv %s/%s: %w", bucket, key, err)
		}
	}
	if all := kv.Bucket(kvWritten); all != nil {
		if w := all.Bucket([]byte(bucket)); w != nil {
			if err := w.Delete([]byte(key)); err != nil {
				return fmt.Errorf("delete kv %s/%s: %w", bucket, key, err)
			}
		}
	}
	return nil
}

// ForEachKV calls fn for every key of bucket in key order. val is only valid
// during the call. fn must not modify the bucket.
func (t *Tx) ForEachKV(bucket string, fn func(key string, val []byte) error) error {
	kv, err := t.bucket(bKV)
	if err != nil {
		return err
	}
	b := kv.Bucket([]byte(bucket))
	if b == nil {
		return nil
	}
	return b.ForEach(func(k, v []byte) error { return fn(string(k), v) })
}
