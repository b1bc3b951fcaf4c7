package state

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// CurrentSchema is the schema version this binary reads and writes.
const CurrentSchema = 1

// DefaultTimeout is how long Open waits for another process to release the
// database file lock when Options.Timeout is zero.
const DefaultTimeout = 5 * time.Second

// Options configure Open.
type Options struct {
	// Clock stamps records whose time is zero. Defaults to time.Now.
	Clock func() time.Time
	// ReadOnly opens the file with a shared lock; every Update fails with
	// ErrReadOnly and an old schema is not migrated (Open fails instead).
	ReadOnly bool
	// Timeout bounds the wait for the file lock (bbolt allows one writer
	// process). Zero means DefaultTimeout; negative means wait forever.
	Timeout time.Duration

	// Test-only knobs (unexported so production code cannot set them).
	noSync   bool // skip fsync: a crash may lose committed transactions
	mmapSize int  // initial mmap size: avoids remaps that make writers wait for readers

	// headUnchecked lets a read-write Open proceed with a broken audit head:
	// only for RepairHeadFile, which verifies the chain before it writes
	// (Append still refuses until the head is repaired).
	headUnchecked bool
}

// Store is the bbolt-backed state of talosbot. It is safe for concurrent use:
// any number of View transactions run alongside one Update.
type Store struct {
	db       *bolt.DB
	path     string
	clock    func() time.Time
	readOnly bool
	schema   int
}

// Open opens (creating if needed) the database at path, migrating an older
// schema to CurrentSchema in one transaction. The file is created 0600 and an
// existing file readable by others is tightened to 0600. A database written by
// a newer talosbot is refused with ErrSchemaTooNew.
func Open(path string, opts Options) (*Store, error) {
	var s *Store
	// A damaged file can make bbolt panic while it reads the meta and
	// freelist pages: an error naming the file instead.
	err := guard(path, func() error {
		var err error
		s, err = open(path, opts, false)
		return err
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// open does the work of Open. allowOld lets a read-only open proceed on an
// unmigrated database (VerifyFile only reads the audit bucket, whose format
// has not changed since v0).
func open(path string, opts Options, allowOld bool) (*Store, error) {
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	timeout := opts.Timeout
	switch {
	case timeout == 0:
		timeout = DefaultTimeout
	case timeout < 0:
		timeout = 0 // bbolt: wait forever
	}
	if opts.ReadOnly {
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("open state database %s read-only: %w", path, err)
		}
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{
		Timeout:         timeout,
		ReadOnly:        opts.ReadOnly,
		NoSync:          opts.noSync,
		InitialMmapSize: opts.mmapSize,
		FreelistType:    bolt.FreelistMapType,
	})
	if err != nil {
		if errors.Is(err, bolterrors.ErrTimeout) {
			return nil, fmt.Errorf("open state database %s: still locked by another process after %s (is another talosbot running? stop it or point --db elsewhere): %w", path, timeout, err)
		}
		return nil, fmt.Errorf("open state database %s: %w", path, err)
	}
	s := &Store{db: db, path: path, clock: opts.Clock, readOnly: opts.ReadOnly}
	if !opts.ReadOnly {
		if err := tightenMode(path); err != nil {
			_ = db.Close()
			return nil, err
		}
	}
	if err := s.prepare(allowOld); err != nil {
		_ = db.Close()
		return nil, err
	}
	// A writer refuses a database whose audit head does not match its
	// chain here, at start, rather than at its first append (serve would
	// otherwise start and then fail every audited action). Readers (verify,
	// export) must still open it to show what is wrong.
	if !opts.ReadOnly && !opts.headUnchecked {
		if err := db.View(func(tx *bolt.Tx) error { return checkHead(tx, path) }); err != nil {
			_ = db.Close()
			return nil, err
		}
	}
	return s, nil
}

func tightenMode(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("stat state database %s: %w", path, err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		if err := os.Chmod(path, 0o600); err != nil {
			return fmt.Errorf("state database %s is readable by other users and cannot be restricted to 0600 (fix with chmod 600): %w", path, err)
		}
	}
	return nil
}

// prepare checks the schema version and migrates.
func (s *Store) prepare(allowOld bool) error {
	var version int
	if err := s.db.View(func(tx *bolt.Tx) error {
		v, err := schemaVersion(tx)
		version = v
		return err
	}); err != nil {
		return fmt.Errorf("state database %s: %w", s.path, err)
	}
	if version > CurrentSchema {
		return fmt.Errorf("%w: %s has schema version %d, this talosbot supports up to %d; run the newer talosbot or restore a backup taken before the upgrade",
			ErrSchemaTooNew, s.path, version, CurrentSchema)
	}
	if version == CurrentSchema {
		s.schema = version
		if !s.readOnly {
			// Databases created before the head was written at creation
			// have none until their first record: give them one.
			var missing bool
			_ = s.db.View(func(tx *bolt.Tx) error {
				_, ok, _ := readHead(tx)
				missing = !ok
				return nil
			})
			if missing {
				if err := s.db.Update(ensureHead); err != nil {
					return fmt.Errorf("state database %s: %w", s.path, err)
				}
			}
		}
		return nil
	}
	if s.readOnly {
		if allowOld {
			s.schema = max(version, 0)
			return nil
		}
		if version < 0 {
			return fmt.Errorf("state database %s is empty; open it read-write once (e.g. `talosbot serve`) to initialise it", s.path)
		}
		return fmt.Errorf("state database %s has schema version %d and needs migration to %d; open it read-write once (e.g. `talosbot serve`, after taking a backup) to migrate it", s.path, version, CurrentSchema)
	}
	if err := s.db.Update(func(tx *bolt.Tx) error { return migrate(tx, version) }); err != nil {
		return fmt.Errorf("migrate state database %s from schema %d to %d (nothing was changed): %w", s.path, max(version, 0), CurrentSchema, err)
	}
	s.schema = CurrentSchema
	return nil
}

// schemaVersion reads the schema version: -1 for an empty file, 0 for the
// pre-meta layout, otherwise the meta value.
func schemaVersion(tx *bolt.Tx) (int, error) {
	meta := tx.Bucket(bMeta)
	if meta == nil {
		empty := true
		_ = tx.ForEach(func([]byte, *bolt.Bucket) error {
			empty = false
			return errStop
		})
		if empty {
			return -1, nil
		}
		return 0, nil
	}
	raw := meta.Get(kSchemaVersion)
	v, err := strconv.Atoi(string(raw))
	if err != nil {
		return 0, fmt.Errorf("meta bucket has an unreadable schema version %q: %w", raw, err)
	}
	return v, nil
}

var errStop = errors.New("stop iteration")

// Close closes the database. It waits for open transactions to finish.
func (s *Store) Close() error {
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("close state database %s: %w", s.path, err)
	}
	return nil
}

// ensureHead gives a database that has no audit head and no records one at
// seq 0 (databases created before the head was written at creation). A
// database with records but no head is left alone: verify reports it.
func ensureHead(tx *bolt.Tx) error {
	if _, ok, err := readHead(tx); err != nil || ok {
		return err
	}
	if a := tx.Bucket(bAudit); a != nil {
		if k, _ := a.Cursor().First(); k != nil {
			return nil
		}
	}
	meta := tx.Bucket(bMeta)
	if meta == nil {
		return nil
	}
	return writeHead(meta, auditHead{})
}

// Backup writes a consistent copy of the database to path (created 0600,
// must not exist) while the store stays in use, e.g. to run VerifyFile on it.
func (s *Store) Backup(ctx context.Context, path string) error {
	return s.View(ctx, func(tx *Tx) error {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return fmt.Errorf("backup state database: %w", err)
		}
		if _, err := tx.tx.WriteTo(f); err != nil {
			_ = f.Close()
			_ = os.Remove(path)
			return fmt.Errorf("backup state database to %s: %w", path, err)
		}
		if err := f.Sync(); err != nil {
			_ = f.Close()
			return fmt.Errorf("backup state database to %s: %w", path, err)
		}
		if err := f.Close(); err != nil {
			return fmt.Errorf("backup state database to %s: %w", path, err)
		}
		return nil
	})
}

// Path returns the file the store was opened from.
func (s *Store) Path() string { return s.path }

// SchemaVersion returns the schema version of the open database.
func (s *Store) SchemaVersion() int { return s.schema }

// Update runs fn in one read-write transaction: everything fn wrote commits
// together if fn returns nil, and nothing does if it returns an error or
// panics. bbolt runs one Update at a time; keep fn short. ctx is checked
// before the transaction starts (a started bbolt transaction cannot be
// interrupted).
func (s *Store) Update(ctx context.Context, fn func(tx *Tx) error) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("state update: %w", err)
	}
	if s.readOnly {
		return ErrReadOnly
	}
	return s.db.Update(func(btx *bolt.Tx) error {
		return fn(&Tx{tx: btx, clock: s.clock, path: s.path})
	})
}

// View runs fn in a read-only transaction that sees one consistent snapshot,
// unaffected by Updates that commit while it runs.
func (s *Store) View(ctx context.Context, fn func(tx *Tx) error) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("state view: %w", err)
	}
	return s.db.View(func(btx *bolt.Tx) error {
		return fn(&Tx{tx: btx, clock: s.clock, path: s.path})
	})
}

// Tx is a transaction handed to Update or View. It must not be used after
// fn returns. Write methods on a View transaction fail.
type Tx struct {
	tx    *bolt.Tx
	clock func() time.Time
	path  string // the database file, for errors that tell how to fix it
}

// Writable reports whether this is an Update transaction.
func (t *Tx) Writable() bool { return t.tx.Writable() }

func (t *Tx) now() time.Time { return t.clock().UTC() }

// bucket returns a top-level bucket, with an error that says how to fix a
// database that lacks it.
func (t *Tx) bucket(name []byte) (*bolt.Bucket, error) {
	b := t.tx.Bucket(name)
	if b == nil {
		return nil, fmt.Errorf("state database has no %q bucket (not migrated to schema %d? open it read-write once)", name, CurrentSchema)
	}
	return b, nil
}

func (t *Tx) writable(what string) error {
	if !t.tx.Writable() {
		return fmt.Errorf("%s: %w", what, bolterrors.ErrTxNotWritable)
	}
	return nil
}
