package state

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	bolt "go.etcd.io/bbolt"
)

// ErrAuditHeadBroken is wrapped by every refusal to write because the audit
// head kept in meta is missing or does not match the last record.
var ErrAuditHeadBroken = errors.New("the audit head does not match the audit chain")

// HeadError says why the store refuses to append to the audit chain (and a
// read-write Open refuses the database): Append numbers a record after the
// head, so with the head missing or behind the chain it would write over
// existing records, and with the head ahead of the chain it would hide that
// records were removed.
type HeadError struct {
	Path   string // the database file
	Reason string // what is wrong with the head
}

func (e *HeadError) Error() string {
	return fmt.Sprintf("state database %s: %s, so nothing is written to it. "+
		"With the bot stopped, inspect the chain with `talosbot audit verify --db %s`; "+
		"if every record verifies, `talosbot audit repair-head --db %s` sets the head to the last record "+
		"and records the repair in the audit trail (if records are missing, restore the file from a backup)",
		e.Path, e.Reason, e.Path, e.Path)
}

func (e *HeadError) Unwrap() error { return ErrAuditHeadBroken }

// headProblem compares the head in meta with the end of the audit bucket and
// says what is wrong, or "" when the head names the last record exactly. A
// chain with no records and no head is a fresh start, not a problem. It reads
// two keys and decodes one record, so every Append can afford it.
func headProblem(tx *bolt.Tx) string {
	var last []byte // key of the last record; nil: no records
	var lastRaw []byte
	if a := tx.Bucket(bAudit); a != nil {
		last, lastRaw = a.Cursor().Last()
	}
	head, ok, err := readHead(tx)
	switch {
	case err != nil:
		return fmt.Sprintf("the audit head (meta/audit_head) is unreadable (%v)", err)
	case !ok && last == nil:
		return ""
	case len(last) != 8 && last != nil:
		return fmt.Sprintf("the last audit key %x is malformed", last)
	case !ok:
		return fmt.Sprintf("the audit head (meta/audit_head) is missing but the chain has records up to %d: the next record would be numbered 1 and overwrite the oldest", getU64(last))
	case last == nil && head.Seq == 0:
		return ""
	case last == nil:
		return fmt.Sprintf("the audit head names record %d but the audit chain has no records: records were removed", head.Seq)
	}
	end := getU64(last)
	switch {
	case head.Seq < end:
		return fmt.Sprintf("the audit head names record %d but the chain goes on to record %d: the next record would overwrite record %d", head.Seq, end, head.Seq+1)
	case head.Seq > end:
		return fmt.Sprintf("the audit head names record %d but the chain ends at record %d: records were removed from the end", head.Seq, end)
	}
	rec, err := decodeRecord(lastRaw)
	if err != nil {
		return fmt.Sprintf("the last audit record %d cannot be decoded (%v)", end, err)
	}
	if rec.Hash != head.Hash {
		return fmt.Sprintf("the audit head's hash %s does not match hash %s of the last record %d: the head or the record was edited", short(head.Hash), short(rec.Hash), end)
	}
	return ""
}

// checkHead is headProblem as an error.
func checkHead(tx *bolt.Tx, path string) error {
	if p := headProblem(tx); p != "" {
		return &HeadError{Path: path, Reason: p}
	}
	return nil
}

// HeadRepair reports what RepairHeadFile found and changed.
type HeadRepair struct {
	// Repaired is false when the head already matched the chain: then
	// nothing was written and Record is zero.
	Repaired bool
	// Was describes the head before the repair (the HeadError reason).
	Was string
	// FromSeq and FromHash are the head before the repair ("" and 0 when it
	// was missing or unreadable).
	FromSeq  uint64
	FromHash string
	// ToSeq and ToHash are the last record of the verified chain, which the
	// head was set to before the repair record was appended.
	ToSeq  uint64
	ToHash string
	// Record is the audit record of the repair; its hash is the new head.
	Record AuditRecord
}

// RepairHeadFile sets the audit head of the database at path to the chain's
// last record, for a head that was deleted or edited: `talosbot audit
// repair-head`. It opens the file read-write, so the bot must be stopped (it
// holds the lock). It refuses, changing nothing, when the records themselves
// do not verify, or when the head names a record past the end of the chain
// (records were removed: that is for a backup to fix, not for the head). In
// the same transaction as the new head it appends an "audit head repaired"
// record by actor (the OS user who ran it) naming the old and the new head,
// so the repair itself is in the trail. A head that already matches is left
// alone and nothing is appended.
func RepairHeadFile(ctx context.Context, path, actor string, opts Options) (rep HeadRepair, err error) {
	if actor == "" {
		return rep, errors.New("repair the audit head: the actor (who repairs it) is empty")
	}
	if opts.ReadOnly {
		return rep, errors.New("repair the audit head: the store must be opened read-write")
	}
	opts.headUnchecked = true
	s, err := Open(path, opts)
	if err != nil {
		return rep, err
	}
	defer func() {
		if cerr := s.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	err = guard(path, func() error {
		return s.Update(ctx, func(tx *Tx) error {
			rep = HeadRepair{Was: headProblem(tx.tx)}
			if rep.Was == "" {
				return nil
			}
			chain, err := verifyChain(ctx, tx.tx, s.schema, "", true)
			if err != nil {
				return fmt.Errorf("refusing to repair the audit head of %s: the audit chain itself is broken (%w); nothing was changed: restore the file from a backup", path, err)
			}
			head, ok, herr := readHead(tx.tx)
			if ok && herr == nil {
				rep.FromSeq, rep.FromHash = head.Seq, head.Hash
				if head.Seq > chain.HeadSeq {
					return fmt.Errorf("refusing to repair the audit head of %s: %s; nothing was changed: restore the file from a backup", path, rep.Was)
				}
			}
			var last AuditRecord
			if chain.HeadSeq > 0 {
				if last, err = decodeRecord(tx.tx.Bucket(bAudit).Get(u64(chain.HeadSeq))); err != nil {
					return fmt.Errorf("repair the audit head: decode record %d: %w", chain.HeadSeq, err)
				}
			}
			rep.ToSeq, rep.ToHash = chain.HeadSeq, chain.Head
			if err := writeHead(tx.tx.Bucket(bMeta), auditHead{Seq: last.Seq, Time: last.Time, Hash: last.Hash}); err != nil {
				return fmt.Errorf("repair the audit head: %w", err)
			}
			from := "missing"
			if herr != nil {
				from = "unreadable"
			} else if ok {
				from = strconv.FormatUint(head.Seq, 10) + " " + head.Hash
			}
			rep.Record, err = tx.Append(AuditEvent{
				Actor: actor, Action: "audit head repaired", Result: "ok",
				Detail: map[string]string{
					"problem": rep.Was,
					"from":    from,
					"to":      strconv.FormatUint(chain.HeadSeq, 10) + " " + chain.Head,
				},
			})
			if err != nil {
				return err
			}
			rep.Repaired = true
			return nil
		})
	})
	return rep, err
}
