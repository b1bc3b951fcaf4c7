// Package state is talosbot's bbolt store: operations and their state
// machine, cluster locks, approvals, the hash-chained audit trail, verbose
// operation logs and small key/value buckets.
//
// # Transactions
//
// Store.Update runs one bbolt write transaction: a state change and the audit
// record describing it are written together or not at all:
//
//	err := st.Update(ctx, func(tx *state.Tx) error {
//		op, err := tx.Transition(id, state.StateRunning, nil)
//		if err != nil {
//			return err
//		}
//		_, err = tx.Append(state.AuditEvent{Actor: user, Action: "op.run", Cluster: op.Cluster, OpID: id})
//		return err
//	})
//
// Store.View transactions see one consistent snapshot and run alongside the
// single writer. The transition table lives in CanTransition; Transition is
// the only way to change an operation's State.
//
// # Buckets (schema version 1)
//
// Multi-part keys use big-endian integers so byte order is numeric order, and
// prefix(s) = uint16 big-endian length | bytes of s, so one name's keys never
// run into another's. time(t) = Unix nanoseconds with the sign bit flipped.
//
//	meta              schema_version → "1"; audit_head → seq | time | hash;
//	                  audit_unordered_until → seq (only after migrating
//	                  v0 records whose times went backwards)
//	operations        id → Operation JSON
//	ops_by_cluster    prefix(cluster) | time(created) | id → ∅
//	ops_by_time       time(created) | id → ∅
//	audit             seq → record JSON (canonical JSON plus "hash")
//	audit_by_cluster  prefix(cluster) | seq → ∅   (and likewise:)
//	audit_by_actor    prefix(actor) | seq → ∅
//	audit_by_action   prefix(action) | seq → ∅
//	audit_by_op       prefix(op id) | seq → ∅
//	audit_by_result   prefix(result) | seq → ∅
//	audit_by_command  prefix(command) | seq → ∅
//	audit_by_time     time | seq → ∅
//	approvals         prefix(op id) | user → Approval JSON
//	locks             cluster → Lock JSON
//	logs              op id (nested bucket) → seq → {"t","l"} JSON
//	kv                name (nested bucket, e.g. "alerts") → key → bytes;
//	                  kv/replay and kv/replay_by_time hold the replay
//	                  window's seen request ids (dedupe.go);
//	                  kv/"\x00written" (nested) → name (nested) → key →
//	                  time of the last PutKV, for PruneKV; created on first
//	                  use, so older files need no migration
//
// Open creates these in an empty file, migrates older layouts (see
// migrate.go; v0 had no meta bucket and no indexes) in one transaction, and
// refuses a file whose schema is newer than CurrentSchema.
//
// # Audit chain
//
// Records are numbered 1, 2, 3, … The canonical bytes of a record are
// json.Marshal of canonRecord: the fields action, actor, cluster, command,
// detail (omitted when empty; map keys sorted by encoding/json), op_id,
// prev_hash, result, seq, time — in that (sorted) order — with time as a UTC
// RFC 3339 string with nanoseconds and invalid UTF-8 replaced by U+FFFD
// beforehand so the bytes survive a decode/encode round trip.
//
//	hash = hex(sha256(canonical bytes || prev_hash))
//
// where prev_hash is the previous record's hash ("" for record 1). Because
// seq and prev_hash are inside the hashed bytes, VerifyAudit detects an edited
// record (hash mismatch), a deleted one (seq gap or prev_hash mismatch), a
// reordered pair (key and seq disagree) and a truncated tail (meta head). It
// cannot detect a chain rewritten from some point on with all hashes
// recomputed: pin VerifyReport.Head outside the database for that.
//
// The head in meta numbers the next record, so Append (and a read-write Open)
// refuses a chain whose head is missing or does not name its last record, and
// the put refuses an existing seq: a record is never overwritten.
// RepairHeadFile resets the head from a chain whose records all verify, and
// audits the repair. Record, indexes and head commit in one transaction.
//
// Record times never go backwards along the chain (Append clamps to the
// predecessor's time), so time order is seq order and QueryAudit turns
// Since/Until into a seq range; indexed filters are intersected in seq order.
package state
