package state

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
)

// DefaultAuditLimit is the page size of QueryAudit when AuditQuery.Limit <= 0.
const DefaultAuditLimit = 100

// AuditEvent is what happened; Append turns it into a chained AuditRecord.
type AuditEvent struct {
	Time    time.Time         // zero: the store's clock
	Actor   string            // user (or "talosbot" for the bot itself)
	Action  string            // e.g. "op.transition", "op.approve", "lock.acquire"
	Cluster string            // empty for events about no cluster
	OpID    string            // empty for events about no operation
	Command string            // e.g. "upgrade talos"
	Result  string            // e.g. "ok", "refused", "failed"
	Detail  map[string]string // free-form; keep it small and secret-free
}

// AuditRecord is one link of the audit chain.
type AuditRecord struct {
	Seq uint64
	AuditEvent
	PrevHash string // Hash of record Seq-1; "" for Seq 1
	Hash     string // hex sha256(canonical bytes || PrevHash)
}

// AuditQuery selects audit records. Zero fields do not filter.
type AuditQuery struct {
	Cluster, Actor, Action, Result string
	OpID                           string
	Command                        string    // operation type, e.g. "upgrade talos"
	Since, Until                   time.Time // inclusive bounds on Time
	Limit                          int       // <= 0: DefaultAuditLimit
	BeforeSeq                      uint64    // paging: only records with Seq < BeforeSeq
}

// VerifyReport summarises a verified chain.
type VerifyReport struct {
	Records int    // records verified
	HeadSeq uint64 // seq of the last record (0 when empty)
	Head    string // hash of the last record; pin it elsewhere to detect a rewritten chain
}

// canonRecord is the canonical form of a record without its hash. Its fields
// are declared in ascending order of their JSON names, encoding/json writes
// struct fields in declaration order and map keys sorted, and the time is a
// UTC RFC 3339 string with nanoseconds: json.Marshal of this struct is
// therefore deterministic, i.e. "JSON with sorted keys".
type canonRecord struct {
	Action   string            `json:"action"`
	Actor    string            `json:"actor"`
	Cluster  string            `json:"cluster"`
	Command  string            `json:"command"`
	Detail   map[string]string `json:"detail,omitempty"`
	OpID     string            `json:"op_id"`
	PrevHash string            `json:"prev_hash"`
	Result   string            `json:"result"`
	Seq      uint64            `json:"seq"`
	Time     string            `json:"time"`
}

// storedRecord is what the audit bucket holds: the canonical fields plus hash.
type storedRecord struct {
	canonRecord
	Hash string `json:"hash"`
}

func canonOf(r AuditRecord) canonRecord {
	return canonRecord{
		Action: r.Action, Actor: r.Actor, Cluster: r.Cluster, Command: r.Command,
		Detail: r.Detail, OpID: r.OpID, PrevHash: r.PrevHash, Result: r.Result,
		Seq: r.Seq, Time: r.Time.UTC().Format(time.RFC3339Nano),
	}
}

// canonicalBytes returns the bytes that are hashed for r (Hash excluded).
func canonicalBytes(r AuditRecord) ([]byte, error) {
	b, err := json.Marshal(canonOf(r))
	if err != nil {
		return nil, fmt.Errorf("encode audit record %d: %w", r.Seq, err)
	}
	return b, nil
}

// chainHash is hex(sha256(canonical || prevHash)).
func chainHash(canonical []byte, prevHash string) string {
	h := sha256.New()
	h.Write(canonical)
	h.Write([]byte(prevHash))
	return hex.EncodeToString(h.Sum(nil))
}

// encodeRecord computes r.Hash and returns the stored bytes. The stored JSON
// is the canonical JSON with "hash" appended, so it is marshalled once.
func encodeRecord(r *AuditRecord) ([]byte, error) {
	canon, err := canonicalBytes(*r)
	if err != nil {
		return nil, err
	}
	r.Hash = chainHash(canon, r.PrevHash)
	out := make([]byte, 0, len(canon)+80)
	out = append(out, canon[:len(canon)-1]...) // drop the closing brace
	out = append(out, `,"hash":"`...)
	out = append(out, r.Hash...)
	out = append(out, `"}`...)
	return out, nil
}

// decodeRecord decodes a stored record: the fast path for records as
// encodeRecord writes them, encoding/json for anything else.
func decodeRecord(raw []byte) (AuditRecord, error) {
	if r, ok := fastDecodeRecord(raw); ok {
		return r, nil
	}
	return decodeRecordJSON(raw)
}

func decodeRecordJSON(raw []byte) (AuditRecord, error) {
	var s storedRecord
	if err := json.Unmarshal(raw, &s); err != nil {
		return AuditRecord{}, err
	}
	t, err := time.Parse(time.RFC3339Nano, s.Time)
	if err != nil {
		return AuditRecord{}, fmt.Errorf("time %q: %w", s.Time, err)
	}
	return AuditRecord{
		Seq: s.Seq,
		AuditEvent: AuditEvent{
			Time: t.UTC(), Actor: s.Actor, Action: s.Action, Cluster: s.Cluster,
			OpID: s.OpID, Command: s.Command, Result: s.Result, Detail: s.Detail,
		},
		PrevHash: s.PrevHash,
		Hash:     s.Hash,
	}, nil
}

// normaliseEvent replaces invalid UTF-8 so that the canonical bytes survive a
// decode/encode round trip (encoding/json would otherwise write invalid bytes
// as \ufffd the first time and as the raw character the second time, and
// verification would fail).
func normaliseEvent(ev AuditEvent) AuditEvent {
	v := func(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }
	ev.Actor, ev.Action, ev.Cluster = v(ev.Actor), v(ev.Action), v(ev.Cluster)
	ev.OpID, ev.Command, ev.Result = v(ev.OpID), v(ev.Command), v(ev.Result)
	if len(ev.Detail) > 0 {
		d := make(map[string]string, len(ev.Detail))
		for k, val := range ev.Detail {
			d[v(k)] = v(val)
		}
		ev.Detail = d
	} else {
		ev.Detail = nil
	}
	return ev
}

// auditHead is the chain head kept in meta: it makes appends O(1) and lets
// VerifyAudit notice records removed from the end.
type auditHead struct {
	Seq  uint64
	Time time.Time
	Hash string
}

func readHead(tx *bolt.Tx) (auditHead, bool, error) {
	meta := tx.Bucket(bMeta)
	if meta == nil {
		return auditHead{}, false, nil
	}
	raw := meta.Get(kAuditHead)
	if raw == nil {
		return auditHead{}, false, nil
	}
	if len(raw) < 16 {
		return auditHead{}, false, fmt.Errorf("meta audit head is %d bytes, want at least 16", len(raw))
	}
	return auditHead{Seq: getU64(raw[:8]), Time: ordTime(getU64(raw[8:16])), Hash: string(raw[16:])}, true, nil
}

func writeHead(meta *bolt.Bucket, h auditHead) error {
	return meta.Put(kAuditHead, join(u64(h.Seq), timeBytes(h.Time), []byte(h.Hash)))
}

// Append adds ev to the audit chain inside this transaction, so the record
// commits (or not) together with the state change it describes. Time defaults
// to the store's clock and is kept monotonic along the chain: if the clock
// stepped back, the record gets its predecessor's time (that keeps time order
// equal to seq order, which QueryAudit relies on for Since/Until).
func (t *Tx) Append(ev AuditEvent) (AuditRecord, error) {
	if err := t.writable("audit append"); err != nil {
		return AuditRecord{}, err
	}
	audit, err := t.bucket(bAudit)
	if err != nil {
		return AuditRecord{}, err
	}
	meta, err := t.bucket(bMeta)
	if err != nil {
		return AuditRecord{}, err
	}
	// The head numbers the new record: a head that is missing or does not
	// name the last record would make this append overwrite a record (or
	// hide removed ones), so refuse, whoever the writer is.
	if err := checkHead(t.tx, t.path); err != nil {
		return AuditRecord{}, fmt.Errorf("audit append: %w", err)
	}
	head, _, err := readHead(t.tx)
	if err != nil {
		return AuditRecord{}, err
	}
	ev = normaliseEvent(ev)
	if ev.Time.IsZero() {
		ev.Time = t.now()
	}
	ev.Time = ev.Time.UTC()
	if ev.Time.Before(head.Time) {
		ev.Time = head.Time
	}
	if y := ev.Time.Year(); y < 1678 || y > 2261 {
		return AuditRecord{}, fmt.Errorf("audit append: time %s is out of range (years 1678–2261)", ev.Time)
	}
	rec := AuditRecord{Seq: head.Seq + 1, AuditEvent: ev, PrevHash: head.Hash}
	raw, err := encodeRecord(&rec)
	if err != nil {
		return AuditRecord{}, err
	}
	audit.FillPercent = 1 // append-only: pack pages full
	if err := putNewRecord(audit, rec.Seq, raw, t.path); err != nil {
		return AuditRecord{}, fmt.Errorf("audit append: %w", err)
	}
	if err := indexRecord(t.tx, rec, ev.Time); err != nil {
		return AuditRecord{}, err
	}
	// The head moves in the same transaction as the record: a crash
	// commits both or neither, so the chain always ends at its head.
	if err := writeHead(meta, auditHead{Seq: rec.Seq, Time: ev.Time, Hash: rec.Hash}); err != nil {
		return AuditRecord{}, fmt.Errorf("audit append: %w", err)
	}
	return rec, nil
}

// putNewRecord stores an audit record under a seq that must be free: the
// chain is append-only, so whatever the head said, an existing record is
// never overwritten.
func putNewRecord(audit *bolt.Bucket, seq uint64, raw []byte, path string) error {
	key := u64(seq)
	if audit.Get(key) != nil {
		return &HeadError{Path: path, Reason: fmt.Sprintf("audit record %d already exists and records are never overwritten", seq)}
	}
	return audit.Put(key, raw)
}

// auditIndexes maps index buckets to the record field they index.
// The order is the order QueryAudit intersects them in: most selective
// first, so the leapfrog takes long strides.
func auditIndexes(r AuditRecord) []indexedField {
	return []indexedField{
		{bAuditByOp, r.OpID},
		{bAuditByActor, r.Actor},
		{bAuditByCluster, r.Cluster},
		{bAuditByAction, r.Action},
		{bAuditByResult, r.Result},
		{bAuditByCommand, r.Command},
	}
}

type indexedField struct {
	bucket []byte
	value  string
}

// indexRecord writes the index entries of r: prefix(value)|seq for each
// non-empty indexed field, and indexTime|seq in the time index. indexTime is
// the record time, or for pre-v1 records (whose times may go backwards) the
// running maximum, so the time index is always in seq order.
func indexRecord(tx *bolt.Tx, r AuditRecord, indexTime time.Time) error {
	seqKey := u64(r.Seq)
	for _, ix := range auditIndexes(r) {
		if ix.value == "" {
			continue
		}
		p, err := prefix(ix.value)
		if err != nil {
			return fmt.Errorf("audit index %s: %w", ix.bucket, err)
		}
		b := tx.Bucket(ix.bucket)
		if b == nil {
			return fmt.Errorf("state database has no %q bucket", ix.bucket)
		}
		if err := b.Put(append(p, seqKey...), nil); err != nil {
			return fmt.Errorf("audit index %s: %w", ix.bucket, err)
		}
	}
	bt := tx.Bucket(bAuditByTime)
	if bt == nil {
		return fmt.Errorf("state database has no %q bucket", bAuditByTime)
	}
	bt.FillPercent = 1 // append-only
	if err := bt.Put(join(timeBytes(indexTime), seqKey), nil); err != nil {
		return fmt.Errorf("audit time index: %w", err)
	}
	return nil
}

// AppendAudit appends one event in its own transaction.
func (s *Store) AppendAudit(ctx context.Context, ev AuditEvent) (AuditRecord, error) {
	var rec AuditRecord
	err := s.Update(ctx, func(tx *Tx) error {
		var err error
		rec, err = tx.Append(ev)
		return err
	})
	return rec, err
}

// QueryAudit returns the records matching q, newest (highest Seq) first. See
// Tx.QueryAudit.
func (s *Store) QueryAudit(ctx context.Context, q AuditQuery) ([]AuditRecord, error) {
	var out []AuditRecord
	err := s.View(ctx, func(tx *Tx) error {
		var err error
		out, err = tx.QueryAudit(q)
		return err
	})
	return out, err
}

// seqSource is a descending stream of seqs: every key of an index bucket
// that starts with p, as p|seq (p empty for the audit bucket itself).
type seqSource struct {
	c    *bolt.Cursor
	p    []byte
	cur  uint64 // seq under the cursor, when ok
	ok   bool
	kbuf []byte
}

func (s *seqSource) decode(k []byte) bool {
	if k == nil || len(k) != len(s.p)+8 || !bytes.HasPrefix(k, s.p) {
		s.ok = false
		return false
	}
	s.cur, s.ok = getU64(k[len(s.p):]), true
	return true
}

// seekLE returns the largest seq <= want in the source.
func (s *seqSource) seekLE(want uint64) (uint64, bool) {
	if s.ok {
		if s.cur == want {
			return want, true
		}
		if s.cur > want {
			// Usually the next key down is the answer: one step instead of a
			// seek from the root.
			if k, _ := s.c.Prev(); s.decode(k) && s.cur <= want {
				return s.cur, true
			}
		}
	}
	s.kbuf = append(append(s.kbuf[:0], s.p...), u64(want)...)
	k, _ := s.c.Seek(s.kbuf)
	if k != nil && bytes.Equal(k, s.kbuf) {
		s.decode(k)
		return want, true
	}
	if k == nil {
		k, _ = s.c.Last()
	} else {
		k, _ = s.c.Prev()
	}
	if !s.decode(k) {
		return 0, false
	}
	return s.cur, true
}

// QueryAudit returns the records matching q, newest (highest Seq) first.
//
// Plan: Since/Until become a seq range through the time index (time order is
// seq order). Every non-empty indexed field (op id, actor, cluster, action,
// result) contributes its index as a descending seq stream, and the streams are
// intersected by leapfrogging (each seeks to the largest seq <= the current
// candidate), so a combined filter costs about as much as its most selective
// part. With no indexed field the audit bucket itself is walked. Every filter,
// including the exact times, is checked again on the decoded record, so a
// stale index entry can never yield a wrong record.
func (t *Tx) QueryAudit(q AuditQuery) ([]AuditRecord, error) {
	audit, err := t.bucket(bAudit)
	if err != nil {
		return nil, err
	}
	limit := q.Limit
	if limit <= 0 {
		limit = DefaultAuditLimit
	}
	lo, hi, ok, err := t.seqRange(audit, q)
	if err != nil || !ok {
		return nil, err
	}

	var srcs []*seqSource
	for _, f := range auditIndexes(AuditRecord{AuditEvent: AuditEvent{
		OpID: q.OpID, Actor: q.Actor, Cluster: q.Cluster, Action: q.Action, Result: q.Result, Command: q.Command,
	}}) {
		if f.value == "" {
			continue
		}
		b, err := t.bucket(f.bucket)
		if err != nil {
			return nil, err
		}
		p, err := prefix(f.value)
		if err != nil {
			return nil, err
		}
		srcs = append(srcs, &seqSource{c: b.Cursor(), p: p})
	}
	if len(srcs) == 0 {
		srcs = append(srcs, &seqSource{c: audit.Cursor()})
	}

	out := make([]AuditRecord, 0, min(limit, 64))
	cand := hi
	for cand >= lo && len(out) < limit {
		agreed := true
		for _, s := range srcs {
			v, ok := s.seekLE(cand)
			if !ok || v < lo {
				return out, nil
			}
			if v < cand {
				cand, agreed = v, false
				break
			}
		}
		if !agreed {
			continue
		}
		raw := audit.Get(u64(cand))
		if raw != nil {
			rec, err := decodeRecord(raw)
			if err != nil {
				return nil, fmt.Errorf("decode audit record %d: %w", cand, err)
			}
			if matches(rec, q) {
				out = append(out, rec)
			}
		}
		if cand == 0 {
			break
		}
		cand--
	}
	return out, nil
}

func matches(r AuditRecord, q AuditQuery) bool {
	switch {
	case q.Cluster != "" && r.Cluster != q.Cluster,
		q.Actor != "" && r.Actor != q.Actor,
		q.Action != "" && r.Action != q.Action,
		q.Result != "" && r.Result != q.Result,
		q.Command != "" && r.Command != q.Command,
		q.OpID != "" && r.OpID != q.OpID,
		!q.Since.IsZero() && r.Time.Before(q.Since),
		!q.Until.IsZero() && r.Time.After(q.Until),
		q.BeforeSeq > 0 && r.Seq >= q.BeforeSeq:
		return false
	}
	return true
}

// seqRange turns BeforeSeq, Since and Until into an inclusive seq range.
// ok is false when the range is empty.
func (t *Tx) seqRange(audit *bolt.Bucket, q AuditQuery) (lo, hi uint64, ok bool, err error) {
	k, _ := audit.Cursor().Last()
	if k == nil {
		return 0, 0, false, nil
	}
	lo, hi = 1, getU64(k)
	if q.BeforeSeq > 0 {
		if q.BeforeSeq <= 1 {
			return 0, 0, false, nil
		}
		hi = min(hi, q.BeforeSeq-1)
	}
	if q.Since.IsZero() && q.Until.IsZero() {
		return lo, hi, lo <= hi, nil
	}
	bt, err := t.bucket(bAuditByTime)
	if err != nil {
		return 0, 0, false, err
	}
	c := bt.Cursor()
	if !q.Since.IsZero() {
		k, _ := c.Seek(timeBytes(q.Since))
		if k == nil {
			return 0, 0, false, nil
		}
		lo = max(lo, getU64(k[8:]))
	}
	if !q.Until.IsZero() {
		end := timeOrd(q.Until)
		var k []byte
		if end == ^uint64(0) {
			k, _ = c.Last()
		} else if k, _ = c.Seek(u64(end + 1)); k == nil {
			k, _ = c.Last()
		} else {
			k, _ = c.Prev()
		}
		var last uint64 // last seq indexed at or before Until; 0: none
		if k != nil {
			last = getU64(k[8:])
		}
		// Migrated records up to this seq may lie earlier than their index
		// time (the running maximum): keep them in range, matches() decides.
		if meta := t.tx.Bucket(bMeta); meta != nil {
			if u := meta.Get(kAuditUnordered); len(u) == 8 {
				last = max(last, getU64(u))
			}
		}
		if last == 0 {
			return 0, 0, false, nil
		}
		hi = min(hi, last)
	}
	return lo, hi, lo <= hi, nil
}

// IterateAudit calls fn for every record, oldest first, in one read
// transaction. An error from fn stops the iteration and is returned.
func (s *Store) IterateAudit(ctx context.Context, fn func(AuditRecord) error) error {
	return s.View(ctx, func(tx *Tx) error {
		audit := tx.tx.Bucket(bAudit)
		if audit == nil {
			return nil
		}
		c := audit.Cursor()
		n := 0
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if n++; n%1024 == 0 {
				if err := ctx.Err(); err != nil {
					return fmt.Errorf("iterate audit: %w", err)
				}
			}
			rec, err := decodeRecord(v)
			if err != nil {
				return fmt.Errorf("decode audit record %x: %w", k, err)
			}
			if err := fn(rec); err != nil {
				return err
			}
		}
		return nil
	})
}
