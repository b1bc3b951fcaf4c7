package state

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"runtime/debug"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// VerifyOptions tune VerifyAuditWith and VerifyFileWith.
type VerifyOptions struct {
	// ExpectHead is a head hash recorded outside the database (posted by
	// `/talos audit head`, or kept by a log shipper). The chain must contain
	// a record with this hash: a chain that was rewritten or cut back below
	// it fails, even if it was rewritten consistently, head included.
	ExpectHead string
	// Timeout bounds the wait for the file lock in VerifyFileWith (a running
	// bot holds it). Zero means DefaultVerifyTimeout.
	Timeout time.Duration
}

// DefaultVerifyTimeout is how long VerifyFile waits for the file lock before
// it says that a running bot holds it.
const DefaultVerifyTimeout = 2 * time.Second

// ErrLockedByBot is returned by VerifyFileWith and OpenReadOnly when another
// process (a running talosbot) holds the database's lock.
var ErrLockedByBot = errors.New("state database is locked by a running talosbot")

var headRE = regexp.MustCompile(`^[0-9a-f]{64}$`)

// CheckHead validates the form of a head hash given by a user.
func CheckHead(h string) error {
	if !headRE.MatchString(h) {
		return fmt.Errorf("head %q is not a 64-hex-digit sha256 (copy it from `/talos audit head` or a previous verify)", h)
	}
	return nil
}

// VerifyAudit walks the whole chain in one read transaction; see
// VerifyAuditWith.
func (s *Store) VerifyAudit(ctx context.Context) (VerifyReport, error) {
	return s.VerifyAuditWith(ctx, VerifyOptions{})
}

// VerifyAuditWith walks the whole chain in one read transaction and checks,
// for every record: its key is the next seq (none deleted), the record's own
// seq equals its key (none moved or reordered), its prev_hash equals the
// previous record's hash, and its hash recomputes from its canonical bytes
// (none edited). Then the end of the chain: the audit bucket and the head
// kept in meta must exist (a v1 database has both from its creation), the
// last record must match the head (none removed from the end), the time index
// must name no record past the end, and a pinned head (opts.ExpectHead) must
// be in the chain. The first failure is returned as a *ChainError with the
// report of what verified before it.
func (s *Store) VerifyAuditWith(ctx context.Context, opts VerifyOptions) (VerifyReport, error) {
	if opts.ExpectHead != "" {
		if err := CheckHead(opts.ExpectHead); err != nil {
			return VerifyReport{}, err
		}
	}
	var rep VerifyReport
	err := s.View(ctx, func(tx *Tx) error {
		var err error
		rep, err = verifyChain(ctx, tx.tx, s.schema, opts.ExpectHead, false)
		return err
	})
	return rep, err
}

// Head returns the chain head recorded in meta: seq 0 and "" for an empty
// chain.
func (s *Store) Head(ctx context.Context) (seq uint64, hash string, err error) {
	err = s.View(ctx, func(tx *Tx) error {
		h, ok, err := readHead(tx.tx)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("the audit head is missing from the state database %s: %w; inspect it with `talosbot audit verify --db %s` and repair it with `talosbot audit repair-head --db %s` (bot stopped)", s.path, ErrAuditHeadBroken, s.path, s.path)
		}
		seq, hash = h.Seq, h.Hash
		return nil
	})
	return seq, hash, err
}

// v1OnlyBuckets exist in v1 databases and never in v0 ones: a database that
// has one but no meta bucket lost its meta (and with it the head).
func v1OnlyBuckets() [][]byte {
	return [][]byte{bOpsByCluster, bOpsByTime, bAuditByTime, bAuditByActor, bKV}
}

// verifyChain does the work of VerifyAuditWith. skipHead leaves out the
// comparison with the head in meta, for RepairHead, which must know whether
// the records themselves are intact when only the head is wrong.
func verifyChain(ctx context.Context, tx *bolt.Tx, schema int, expect string, skipHead bool) (VerifyReport, error) {
	var rep VerifyReport
	v1 := schema >= 1
	if !v1 && tx.Bucket(bMeta) == nil {
		for _, b := range v1OnlyBuckets() {
			if tx.Bucket(b) != nil {
				return rep, &ChainError{Seq: 1, Reason: fmt.Sprintf("the meta bucket (schema version and audit head) is missing but bucket %q of schema 1 exists: meta was deleted", b)}
			}
		}
	}
	audit := tx.Bucket(bAudit)
	if audit == nil {
		if v1 {
			return rep, &ChainError{Seq: 1, Reason: "the audit bucket is missing: it was deleted"}
		}
		return rep, nil
	}
	found := expect == ""
	c := audit.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		want := rep.HeadSeq + 1
		if rep.Records%1024 == 1023 {
			if err := ctx.Err(); err != nil {
				return rep, fmt.Errorf("verify audit: %w", err)
			}
		}
		if len(k) != 8 {
			return rep, &ChainError{Seq: want, Reason: fmt.Sprintf("malformed key %x after record %d", k, rep.HeadSeq)}
		}
		if ks := getU64(k); ks != want {
			return rep, &ChainError{Seq: want, Reason: fmt.Sprintf("record %d is missing (the next key is %d): a record was deleted", want, ks)}
		}
		rec, err := decodeRecord(v)
		if err != nil {
			return rep, &ChainError{Seq: want, Reason: fmt.Sprintf("record cannot be decoded (%v): it was edited", err)}
		}
		if rec.Seq != want {
			return rep, &ChainError{Seq: want, Reason: fmt.Sprintf("key %d holds record %d: records were reordered or moved", want, rec.Seq)}
		}
		if rec.PrevHash != rep.Head {
			return rep, &ChainError{Seq: want, Reason: fmt.Sprintf("prev_hash %s does not match hash %s of record %d: a record was edited, removed or reordered", short(rec.PrevHash), short(rep.Head), rep.HeadSeq)}
		}
		canon, err := canonicalBytes(rec)
		if err != nil {
			return rep, &ChainError{Seq: want, Reason: err.Error()}
		}
		if got := chainHash(canon, rec.PrevHash); got != rec.Hash {
			return rep, &ChainError{Seq: want, Reason: fmt.Sprintf("hash %s does not match the content (recomputed %s): the record was edited", short(rec.Hash), short(got))}
		}
		rep.Records++
		rep.HeadSeq = rec.Seq
		rep.Head = rec.Hash
		if rec.Hash == expect {
			found = true
		}
	}
	head, ok, err := readHead(tx)
	if err != nil && !skipHead {
		return rep, &ChainError{Seq: rep.HeadSeq, Reason: err.Error()}
	}
	switch {
	case skipHead:
	case !ok && v1:
		return rep, &ChainError{Seq: rep.HeadSeq + 1, Reason: fmt.Sprintf("the audit head (seq and hash of the last record) is missing from meta after record %d: it was deleted, and records may have been removed from the end with it", rep.HeadSeq)}
	case ok && (head.Seq != rep.HeadSeq || head.Hash != rep.Head):
		return rep, &ChainError{Seq: rep.HeadSeq + 1, Reason: fmt.Sprintf("chain ends at record %d (%s) but meta records head %d (%s): records were removed from the end or the head was edited", rep.HeadSeq, short(rep.Head), head.Seq, short(head.Hash))}
	}
	if bt := tx.Bucket(bAuditByTime); v1 && bt != nil {
		if k, _ := bt.Cursor().Last(); len(k) == 16 {
			// The time index is in seq order, so its last entry names the
			// newest record ever indexed.
			if seq := getU64(k[8:]); seq > rep.HeadSeq {
				return rep, &ChainError{Seq: rep.HeadSeq + 1, Reason: fmt.Sprintf("the time index names record %d but the chain ends at record %d: records were removed from the end", seq, rep.HeadSeq)}
			}
		}
	}
	if !found {
		return rep, &ChainError{Seq: rep.HeadSeq + 1, Reason: fmt.Sprintf("the pinned head %s is not in the chain (%d records, head %s): the chain was rewritten or cut back since the head was recorded", short(expect), rep.Records, short(rep.Head))}
	}
	return rep, nil
}

func short(h string) string {
	if h == "" {
		return `""`
	}
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

// VerifyFile opens the database at path read-only and verifies its audit
// chain; see VerifyFileWith.
func VerifyFile(ctx context.Context, path string) (VerifyReport, error) {
	return VerifyFileWith(ctx, path, VerifyOptions{})
}

// VerifyFileWith opens the database at path read-only and verifies its audit
// chain (for `talosbot audit verify --db FILE`). It works on schema versions
// up to CurrentSchema, without migrating. A running talosbot holds the file
// lock: after opts.Timeout the error wraps ErrLockedByBot (verify through the
// bot's audit API, or a copy made with Store.Backup). A damaged file (cut
// short, pages overwritten) gives an error naming the file, never a panic.
func VerifyFileWith(ctx context.Context, path string, opts VerifyOptions) (rep VerifyReport, err error) {
	if opts.ExpectHead != "" {
		if err := CheckHead(opts.ExpectHead); err != nil {
			return rep, err
		}
	}
	s, err := openReadOnly(path, opts.Timeout, true)
	if err != nil {
		return rep, err
	}
	defer func() {
		if cerr := s.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	err = guard(path, func() error {
		var verr error
		rep, verr = s.VerifyAuditWith(ctx, opts)
		return verr
	})
	return rep, err
}

// OpenReadOnly opens the database read-only for the CLI (audit export): it
// waits at most timeout (zero: DefaultVerifyTimeout) for a running bot's lock
// and turns a damaged file into an error naming it. Reads through the store
// may still meet damaged pages: wrap them in Guard.
func OpenReadOnly(path string, timeout time.Duration) (*Store, error) {
	return openReadOnly(path, timeout, false)
}

func openReadOnly(path string, timeout time.Duration, allowOld bool) (s *Store, err error) {
	if timeout <= 0 {
		timeout = DefaultVerifyTimeout
	}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("open state database %s read-only: %w", path, err)
	}
	// bbolt needs at least its two meta pages (4 KiB each on common
	// systems); a shorter file is damaged.
	if fi.Size() < int64(2*min(os.Getpagesize(), 4096)) {
		return nil, fmt.Errorf("state database %s is damaged: %d bytes is too short for a bbolt file (truncated?); restore it from a backup", path, fi.Size())
	}
	err = guard(path, func() error {
		var oerr error
		s, oerr = open(path, Options{ReadOnly: true, Timeout: timeout}, allowOld)
		return oerr
	})
	if errors.Is(err, bolterrors.ErrTimeout) {
		return nil, fmt.Errorf("%w: %s is held by another process for more than %s; while the bot runs, use --url to go through its audit API (or verify a copy)", ErrLockedByBot, path, timeout)
	}
	if err != nil {
		return nil, err
	}
	// The meta page says how many pages the file has: fewer on disk means
	// it was cut short, even if the pages lost held nothing we read.
	var size int64
	_ = s.db.View(func(tx *bolt.Tx) error { size = tx.Size(); return nil })
	if size > fi.Size() {
		_ = s.Close()
		return nil, fmt.Errorf("state database %s is damaged: it is %d bytes but its meta page records %d (truncated?); restore it from a backup", path, fi.Size(), size)
	}
	return s, nil
}

// Guard runs fn and turns a panic or a memory fault inside bbolt (which
// trusts the file's page structure, so a truncated or overwritten file can
// make it index out of range or read past the end of its mapping) into an
// error naming the file.
func Guard(path string, fn func() error) error { return guard(path, fn) }

func guard(path string, fn func() error) (err error) {
	old := debug.SetPanicOnFault(true)
	defer debug.SetPanicOnFault(old)
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("state database %s is damaged (%v): restore it from a backup; nothing was changed", path, r)
		}
	}()
	return fn()
}
