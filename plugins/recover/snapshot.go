package recover

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"

	"github.com/talosbot/talosbot/internal/offsite"
	"github.com/talosbot/talosbot/internal/retention"
	"github.com/talosbot/talosbot/internal/seal"
	"github.com/talosbot/talosbot/plugins/cluster/etcd"
	"github.com/talosbot/talosbot/plugins/sdk"
)

// Snap is the snapshot a recovery restores, opened and verified: Plain is
// the etcd snapshot in clear in a private work dir (0700, file 0600), removed
// by Close whatever happens; one that a killed process left is removed by
// the next OpenSnapshot of that cluster (sweepWorkDirs).
type Snap struct {
	ID     string
	At     time.Time
	Stored string // the file read: the local copy, or a download from off-site that Close removes
	// Remote is the off-site URL (s3://bucket/key) when no local copy
	// exists and Stored is a download; RemoteAPI is its S3 endpoint.
	Remote    string
	RemoteAPI string
	Encrypted bool
	Plain     string
	SHA256    string // of the plain etcd snapshot
	Size      int64
	Revision  int64
	TotalKeys int
	// Offsite describes the off-site copy: "verified <url>", or why not.
	Offsite string
	work    string
	held    *workDir
}

// Close removes the clear copy.
func (s *Snap) Close() {
	if s != nil {
		s.held.release()
	}
}

// matchID reports whether snapshot id matches what the user asked for
// ("" = any): the id, or its name with or without the cluster, .db, .age.
func matchID(clusterName, want, id string) bool {
	if want == "" {
		return true
	}
	w := strings.TrimSuffix(strings.TrimSuffix(strings.TrimPrefix(want, clusterName+"/"), seal.Ext), ".db")
	return id == clusterName+"/"+w
}

func newest(items []retention.Item, match func(string) bool) (retention.Item, bool) {
	var best retention.Item
	found := false
	for _, it := range items {
		if match(it.ID) && (!found || it.At.After(best.At) || (it.At.Equal(best.At) && it.ID > best.ID)) {
			best, found = it, true
		}
	}
	return best, found
}

// OpenSnapshot finds the snapshot (want, or the newest) in the local
// snapshot dir, else off-site; checks its off-site copy when off-site
// storage is configured; decrypts it with the age identity when it is
// encrypted; and verifies it with etcd's own code (the sha256 trailer, then
// etcdutl's snapshot status for the revision). Any failure is a refusal
// "snapshot not verified": a recovery never restores what it cannot check.
// Without clear (the read-only guide, which never gets the age identity) an
// encrypted snapshot is only located and its off-site copy checked: the
// person following the guide decrypts it.
func OpenSnapshot(ctx context.Context, req *sdk.OperationRequest, clusterName, want string, clear bool) (_ *Snap, err error) {
	opts := etcd.SnapshotOptionsFor(req)
	notVerified := func(err error, fix string) error {
		return &sdk.Refusal{Rule: "R12", Reason: "snapshot not verified: " + err.Error(), Fix: fix}
	}
	if opts.Dir == "" {
		return nil, &sdk.Refusal{Rule: "R12", Reason: "no snapshot directory is configured, so there is no snapshot to restore", Fix: "set snapshot_dir (a disk outside the cluster) and /talos recover --guide " + clusterName + " for the manual path"}
	}
	base := filepath.Join(opts.Dir, clusterName)
	if err := os.MkdirAll(base, 0o700); err != nil {
		return nil, err
	}
	// A call killed before its cleanup (SIGKILL, a crash) left its work dir
	// with the clear snapshot in it: gone before anything else happens. The
	// dirs of calls still running are locked and kept.
	if err := sweepWorkDirs(base); err != nil {
		return nil, fmt.Errorf("remove the work dirs an earlier recovery call left in %s (they hold clear etcd data; remove them by hand): %w", base, err)
	}
	wd, err := newWorkDir(base)
	if err != nil {
		return nil, fmt.Errorf("create the recovery's work dir: %w", err)
	}
	work := wd.path
	s := &Snap{work: work, held: wd}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	match := func(id string) bool { return matchID(clusterName, want, id) }

	var store *offsite.Store
	var objs map[string]offsite.Object
	if opts.Offsite != nil {
		if store, err = offsite.New(*opts.Offsite); err != nil {
			return nil, notVerified(err, "fix snapshots.offsite")
		}
		list, err := store.List(ctx, clusterName)
		if err != nil {
			return nil, notVerified(fmt.Errorf("list the off-site copies: %w", err), "check snapshots.offsite and its credentials")
		}
		objs = map[string]offsite.Object{}
		for _, o := range list {
			objs[o.ID] = o
		}
	}

	paths, items, lerr := etcd.LocalSnapshots(base, clusterName)
	if lerr != nil && !errors.Is(lerr, fs.ErrNotExist) {
		return nil, lerr
	}
	it, local := newest(items, match)
	switch {
	case local:
		s.ID, s.At, s.Stored = it.ID, it.At, paths[it.ID]
	case objs != nil:
		var oi []retention.Item
		for _, o := range objs {
			oi = append(oi, retention.Item{ID: o.ID, At: o.At})
		}
		oit, ok := newest(oi, match)
		if !ok {
			return nil, noSnapshot(clusterName, want)
		}
		o := objs[oit.ID]
		dst := filepath.Join(work, filepath.Base(o.Key))
		f, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err != nil {
			return nil, err
		}
		_, err = store.Get(ctx, o.Key, f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, notVerified(fmt.Errorf("download %s: %w", store.URL(o.Key), err), "check the off-site storage")
		}
		s.ID, s.At, s.Stored = oit.ID, oit.At, dst
		s.Remote, s.RemoteAPI = store.URL(o.Key), store.API()
		s.Offsite = "verified " + store.URL(o.Key) + " (downloaded, sha256 checked)"
	default:
		return nil, noSnapshot(clusterName, want)
	}
	if objs != nil && s.Offsite == "" {
		o, ok := objs[s.ID]
		if !ok {
			return nil, notVerified(fmt.Errorf("%s has no off-site copy", s.ID), "pick a snapshot that was copied off-site (/talos snapshots "+clusterName+"), or take one")
		}
		if err := store.Verify(ctx, o.Key); err != nil {
			return nil, notVerified(fmt.Errorf("the off-site copy %s: %w", store.URL(o.Key), err), "pick another snapshot (/talos snapshots "+clusterName+")")
		}
		s.Offsite = "verified " + store.URL(o.Key)
	}
	if objs == nil {
		s.Offsite = "not configured (snapshots.offsite)"
	}

	// Clear copy, trailer checked while it is written.
	f, err := os.Open(s.Stored)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var src io.Reader = f
	if strings.HasSuffix(s.Stored, seal.Ext) {
		s.Encrypted = true
		if !clear {
			return s, nil
		}
		key := req.Credentials.AgeIdentity
		if len(key) == 0 {
			return nil, notVerified(fmt.Errorf("%s is encrypted and no age identity was given", s.ID), "set snapshots.encryption.identity (file: or env:)")
		}
		ids, err := seal.Identities(key)
		if err != nil {
			return nil, notVerified(err, "check snapshots.encryption.identity")
		}
		if src, err = seal.Decrypt(f, ids); err != nil {
			return nil, notVerified(err, "check snapshots.encryption.identity: it must match the recipients the snapshot was encrypted to")
		}
	}
	plain, err := etcd.WriteVerified(ctx, src, work, "plain")
	if err != nil {
		return nil, notVerified(fmt.Errorf("%s: %w", s.ID, err), "pick another snapshot (/talos snapshots "+clusterName+"); this one does not restore")
	}
	s.Plain, s.Size, s.SHA256 = plain.Path, plain.Size, plain.SHA256
	st, err := snapshot.NewV3(zap.NewNop()).Status(s.Plain)
	if err != nil {
		return nil, notVerified(fmt.Errorf("etcdutl snapshot status of %s: %w", s.ID, err), "pick another snapshot (/talos snapshots "+clusterName+")")
	}
	s.Revision, s.TotalKeys = st.Revision, st.TotalKey
	if s.SHA256 == "" {
		s.SHA256 = fileSHA(s.Plain)
	}
	return s, nil
}

func fileSHA(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return ""
	}
	return hex.EncodeToString(h.Sum(nil))
}

func noSnapshot(clusterName, want string) error {
	if want != "" {
		return &sdk.Refusal{Rule: "R12", Reason: fmt.Sprintf("no snapshot %q of %s", want, clusterName), Fix: "/talos snapshots " + clusterName + " lists them"}
	}
	return &sdk.Refusal{Rule: "R12", Reason: "no snapshot of " + clusterName + " to restore", Fix: "copy one into the snapshot dir, or follow /talos recover --guide " + clusterName}
}
