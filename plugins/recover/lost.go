package recover

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/server/v3/storage/mvcc"
	"go.etcd.io/etcd/server/v3/storage/schema"
	"google.golang.org/protobuf/proto"
)

// Lost is what a stale member's data holds beyond the snapshot's revision:
// the objects the restore throws away, by name. Only keys are read, never a
// value, so a Secret is named and nothing of it is shown.
type Lost struct {
	// Gone are the objects created or changed after the snapshot: after the
	// recovery they are missing or back at their snapshot version.
	Gone []string
	// Back are the objects deleted after the snapshot: the recovery brings
	// them back.
	Back []string
	// Churn counts the writes to leases and events (the apiserver and the
	// controllers write them all the time): counted, not named.
	Churn int
}

// churn are the resources whose writes are counted, not named.
var churn = map[string]bool{"leases": true, "events": true, "masterleases": true}

// lostSince lists the keys a snapshot file (bbolt, etcd's backend) changed
// after revision rev: etcd's key bucket is ordered by revision, so it is
// read from rev+1 on, each key's first record telling whether it existed at
// rev and its last what the member holds now.
func lostSince(path string, rev int64) (Lost, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: 5 * time.Second})
	if err != nil {
		return Lost{}, fmt.Errorf("open the member's data: %w", err)
	}
	defer db.Close() //nolint:errcheck
	type seen struct {
		existed, deleted bool
	}
	keys := map[string]*seen{}
	var order []string
	err = db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(schema.Key.Name())
		if b == nil {
			return fmt.Errorf("no %q bucket: not an etcd v3 backend", schema.Key.Name())
		}
		cur := b.Cursor()
		from := mvcc.RevToBytes(mvcc.Revision{Main: rev + 1}, mvcc.NewRevBytes())
		for k, v := cur.Seek(from); k != nil; k, v = cur.Next() {
			if len(k) < 17 || k[8] != '_' {
				continue
			}
			var kv mvccpb.KeyValue
			if err := proto.Unmarshal(v, &kv); err != nil {
				return fmt.Errorf("record at revision %x: %w", k[:8], err)
			}
			tomb := mvcc.IsTombstone(k)
			name := string(kv.Key)
			s := keys[name]
			if s == nil {
				// The first record after rev: a tombstone or an update
				// of a key created at or before rev means it existed then.
				s = &seen{existed: tomb || (kv.CreateRevision > 0 && kv.CreateRevision <= rev)}
				keys[name] = s
				order = append(order, name)
			}
			s.deleted = tomb
		}
		return nil
	})
	if err != nil {
		return Lost{}, err
	}
	var out Lost
	for _, k := range order {
		s := keys[k]
		obj, isChurn, ok := objectName(k)
		switch {
		case !ok:
		case isChurn:
			out.Churn++
		case s.deleted && s.existed:
			out.Back = append(out.Back, obj)
		case !s.deleted:
			out.Gone = append(out.Gone, obj)
		}
	}
	sort.Strings(out.Gone)
	sort.Strings(out.Back)
	return out, nil
}

// objectName maps a Kubernetes storage key to "<resource> <namespace>/<name>"
// (or "<resource> <name>" when cluster-scoped). Keys are
// /registry/<resource>/[<namespace>/]<name>, or for a custom resource
// /registry/<group>/<resource>/[<namespace>/]<name> (a group has a dot); a
// few core resources keep historical prefixes. ok is false for etcd's own
// bookkeeping (compact_rev_key).
func objectName(key string) (name string, isChurn, ok bool) {
	rest, reg := strings.CutPrefix(key, "/registry/")
	if !reg {
		if key == "compact_rev_key" {
			return "", false, false
		}
		return "key " + key, false, true
	}
	parts := strings.Split(rest, "/")
	res := parts[0]
	switch {
	case len(parts) >= 3 && strings.Contains(parts[0], "."):
		res, parts = parts[1]+"."+parts[0], parts[2:]
	case res == "services" && len(parts) >= 3 && (parts[1] == "specs" || parts[1] == "endpoints"):
		res, parts = map[string]string{"specs": "services", "endpoints": "endpoints"}[parts[1]], parts[2:]
	case res == "minions":
		res, parts = "nodes", parts[1:]
	default:
		parts = parts[1:]
	}
	if churn[res] {
		return "", true, true
	}
	if len(parts) == 0 {
		return res, false, true
	}
	return res + " " + strings.Join(parts, "/"), false, true
}

// maxNamed caps the objects a report or a plan names.
const maxNamed = 10

// Words renders the lost objects for chat: named up to maxNamed each, then
// "and N more".
func (l Lost) Words() string {
	capped := func(xs []string) string {
		if len(xs) <= maxNamed {
			return strings.Join(xs, ", ")
		}
		return strings.Join(xs[:maxNamed], ", ") + fmt.Sprintf(" and %d more", len(xs)-maxNamed)
	}
	var parts []string
	if len(l.Gone) > 0 {
		parts = append(parts, fmt.Sprintf("%d object(s) created or changed after the snapshot are gone or back at their snapshot version: %s", len(l.Gone), capped(l.Gone)))
	}
	if len(l.Back) > 0 {
		parts = append(parts, fmt.Sprintf("%d object(s) deleted after the snapshot are back: %s", len(l.Back), capped(l.Back)))
	}
	if l.Churn > 0 {
		parts = append(parts, fmt.Sprintf("%d lease/event write(s)", l.Churn))
	}
	if len(parts) == 0 {
		return "no object changed after the snapshot"
	}
	return strings.Join(parts, "; ")
}

// merge adds o's objects (another stale member's) to l, without repeats.
func (l Lost) merge(o Lost) Lost {
	uniq := func(a, b []string) []string {
		out := append(append([]string(nil), a...), b...)
		sort.Strings(out)
		return slices.Compact(out)
	}
	return Lost{Gone: uniq(l.Gone, o.Gone), Back: uniq(l.Back, o.Back), Churn: max(l.Churn, o.Churn)}
}
