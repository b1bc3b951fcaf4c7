package etcd

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"
	"unsafe"

	"filippo.io/age"
	"github.com/siderolabs/talos/pkg/machinery/api/common"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/talosbot/talosbot/internal/offsite"
	"github.com/talosbot/talosbot/internal/retention"
	"github.com/talosbot/talosbot/internal/seal"
	"github.com/talosbot/talosbot/internal/snapname"
	"github.com/talosbot/talosbot/plugins/cluster"
	"github.com/talosbot/talosbot/plugins/sdk"
)

// Snapshot step ids, reported through SnapshotOptions.Step.
const (
	StepSnapshotSource    = "snapshot-source"
	StepSnapshotSpace     = "snapshot-space"
	StepSnapshotWrite     = "snapshot-write"
	StepSnapshotOffsite   = "snapshot-offsite"
	StepSnapshotRetention = "snapshot-retention"
)

// ErrStepSkipped is the error SnapshotOptions.Step hears for a step that did
// not run: the off-site copy without off-site storage. It is not a failure,
// and not a pass either.
var ErrStepSkipped = errors.New("step skipped")

// NoOffsite is the off-site step's detail without off-site storage. It
// starts with ⚠️, so the thread shows it: the only copy is on the bot's disk.
const NoOffsite = "⚠️ no off-site storage configured (snapshots.offsite): the only copy is on the bot's disk"

// ReportStep reports a snapshot step as SnapshotOptions.Step hears it:
// failed with err's text, skipped (ErrStepSkipped) with detail, else done.
// Every plugin that takes a snapshot reports through it, so the off-site
// step without storage is never "✅ done".
func ReportStep(r sdk.Reporter, id, detail string, err error) {
	switch {
	case errors.Is(err, ErrStepSkipped):
		_ = r.StepSkipped(id, detail)
	case err != nil:
		_ = r.StepFailed(id, err.Error())
	default:
		_ = r.StepOK(id, detail)
	}
}

// SnapshotSteps lists the steps of TakeSnapshot in order, with titles.
func SnapshotSteps() [][2]string {
	return [][2]string{
		{StepSnapshotSource, "pick a healthy control plane"},
		{StepSnapshotSpace, "check free space"},
		{StepSnapshotWrite, "stream, hash, fsync and verify the snapshot"},
		{StepSnapshotOffsite, "copy off-site and read its checksum back"},
		{StepSnapshotRetention, "apply retention"},
	}
}

// TimestampLayout is the one-second UTC timestamp of the snapshot names
// written before the unique suffix (internal/snapname), which are still
// read; new names come from snapname.New.
const TimestampLayout = snapname.SecondLayout

// SettleGrace is how long after a snapshot run ends its snapshot is kept
// from any other run's retention. The host computes the protected ids (the
// artifacts that operation records name) when it builds a request; an
// upgrade's pre-upgrade snapshot written by a concurrent run may be named
// by its record only after that, so a run also keeps every snapshot whose
// run ended less than SettleGrace before this run began, or since. It
// bounds the time from the host's computation to the start of
// TakeSnapshot (plugin start, cluster connection) with a wide margin.
const SettleGrace = 15 * time.Minute

// snapshotTrailer is the sha256 etcd appends to a snapshot.
const snapshotTrailer = sha256.Size

// SnapshotOptions configure TakeSnapshot.
type SnapshotOptions struct {
	// Dir is settings.snapshot_dir; snapshots go to Dir/<cluster>/.
	Dir string
	// Retention is the local retention policy (zero: keep everything).
	Retention retention.Policy
	// Recipients (age public keys), when set, encrypt the snapshot at rest.
	Recipients []string
	// Offsite, when set, is where every snapshot is copied (R12's
	// "copied off-cluster"); OffsiteRetention applies there separately.
	Offsite          *offsite.Config
	OffsiteRetention retention.Policy
	// Protected holds snapshot ids that an operation record names within the
	// soak period: retention never deletes them (the host computes them;
	// plugins never read the store).
	Protected map[string]bool
	// Now is the clock for names and retention (default time.Now).
	Now func() time.Time
	// FreeSpace reports the bytes available in a directory (default statfs).
	FreeSpace func(dir string) (uint64, error)
	// Step, when set, hears the end of each step (err nil: it succeeded).
	// ErrStepSkipped as err: the step did not run (ReportStep sends it
	// SKIPPED, never OK).
	Step func(id, detail string, err error)
	// SourceTimeout bounds the pick of the source member (default
	// DefaultSourceTimeout).
	SourceTimeout time.Duration
	// Operation is the id of the operation taking the snapshot; a run
	// queued behind this one is told it.
	Operation string
	// Waiting, when set, hears once that the run queues behind another
	// snapshot run of the cluster, and who holds it.
	Waiting func(holder string)
}

// SnapshotOptionsFrom reads the host's backup evidence (Evidence.Backups:
// snapshot_dir, the local retention, the protected snapshots).
func SnapshotOptionsFrom(ev sdk.Evidence) SnapshotOptions {
	b := ev.Backups
	o := SnapshotOptions{Dir: b.GetDir(), Retention: PolicyFrom(b.GetLocal()), Protected: map[string]bool{}}
	for _, id := range b.GetProtectedSnapshots() {
		o.Protected[id] = true
	}
	o.Recipients = b.GetAgeRecipients()
	return o
}

// SnapshotOptionsFor reads the host settings and, for the off-site copy,
// the S3 credentials the host resolved for this call.
func SnapshotOptionsFor(req *sdk.OperationRequest) SnapshotOptions {
	o := SnapshotOptionsFrom(req.Evidence)
	o.Operation = req.OperationID
	b := req.Evidence.Backups
	if t := b.GetOffsite(); t != nil {
		c := &req.Credentials
		o.Offsite = &offsite.Config{Endpoint: t.Endpoint, Bucket: t.GetBucket(), Prefix: t.Prefix, Region: t.Region,
			Insecure: t.Insecure, AccessKeyID: string(c.OffsiteAccessKeyID), SecretAccessKey: string(c.OffsiteSecretAccessKey)}
		o.OffsiteRetention = PolicyFrom(b.GetOffsiteRetention())
	}
	return o
}

// PolicyFrom converts the host's retention; nil (unset) keeps everything.
func PolicyFrom(r *sdk.Retention) retention.Policy {
	if r == nil {
		return retention.Policy{}
	}
	return retention.Policy{Keep: int(r.Keep), MaxAge: time.Duration(r.MaxAgeSeconds) * time.Second,
		Hourly: int(r.Hourly), Daily: int(r.Daily), Weekly: int(r.Weekly), Monthly: int(r.Monthly)}
}

func (o SnapshotOptions) withDefaults() SnapshotOptions {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.FreeSpace == nil {
		o.FreeSpace = freeSpace
	}
	if o.Step == nil {
		o.Step = func(string, string, error) {}
	}
	if o.SourceTimeout <= 0 {
		o.SourceTimeout = DefaultSourceTimeout
	}
	if o.Waiting == nil {
		o.Waiting = func(string) {}
	}
	return o
}

// Snapshot is a verified etcd snapshot on disk.
type Snapshot struct {
	// ID is "<cluster>/<name>" (internal/snapname), the name in
	// maintenance records.
	ID   string
	Path string
	Node string
	// Size and SHA256 are those of the etcd snapshot itself (what
	// `etcdutl snapshot restore` reads), whether or not it is encrypted.
	Size   int64
	SHA256 string
	// Encrypted: the file is age-encrypted; StoredSize and StoredSHA256 are
	// the file's own (equal to Size and SHA256 when not encrypted).
	Encrypted    bool
	StoredSize   int64
	StoredSHA256 string
	// Removed lists files deleted by retention.
	Removed []string
	// Offsite is the off-site copy, when one was made and read back.
	Offsite *OffsiteCopy
}

// OffsiteCopy is an object whose checksum the server reported back equal
// to the local file's.
type OffsiteCopy struct {
	URL     string
	Removed []string
}

// Artifact is the snapshot as a progress artifact.
func (s *Snapshot) Artifact() *sdk.Artifact {
	return &sdk.Artifact{ID: s.ID, Name: "etcd snapshot", Sha256: s.SHA256, Size: s.Size, Location: s.Path}
}

var safeName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// TakeSnapshot is the "verified snapshot" of R12, which the upgrade plugins
// run as their first step: take the cluster's snapshot lock (runs of one
// cluster queue, across processes), pick a healthy control plane (among
// the R4 targets), check free space, stream its etcd snapshot to
// Dir/<cluster>/<snapname.New>.db.part while verifying it in one pass
// (optionally age-encrypted), fsync, move it into place without replacing
// anything, copy it off-site when configured (a failed copy fails the
// whole step), then apply retention locally and off-site. Memory stays
// flat whatever the size.
func TakeSnapshot(ctx context.Context, c *cluster.Clients, inv cluster.Inventory, opts SnapshotOptions) (*Snapshot, error) {
	opts = opts.withDefaults()
	if opts.Dir == "" {
		return nil, errors.New("no snapshot directory: set snapshot_dir in the bot configuration (a disk outside the cluster)")
	}
	if !safeName.MatchString(inv.Name) {
		return nil, fmt.Errorf("cluster name %q cannot be used as a directory name; use letters, digits, '.', '_' or '-'", inv.Name)
	}
	dir := filepath.Join(opts.Dir, inv.Name)
	recipients, err := seal.Recipients(opts.Recipients)
	if err != nil {
		return nil, err
	}
	// began is before any wait: snapshots finished since may be named by
	// records the host had not seen when it built this request.
	began := opts.Now()

	if err = os.MkdirAll(dir, 0o700); err != nil {
		err = fmt.Errorf("create snapshot directory: %w", err)
		opts.Step(StepSnapshotSource, "", err)
		return nil, err
	}
	// One run per cluster at a time. The lock file sits beside the
	// cluster's directory, not in it, so listings of the directory hold
	// snapshots only.
	holder := "the snapshot of operation " + opts.Operation
	if opts.Operation == "" {
		holder = "a snapshot"
	}
	unlock, err := lockCluster(ctx, filepath.Join(opts.Dir, "."+inv.Name+".lock"),
		fmt.Sprintf("%s (started %s, pid %d)", holder, began.UTC().Format(time.RFC3339), os.Getpid()), opts.Waiting)
	if err != nil {
		opts.Step(StepSnapshotSource, "", err)
		return nil, err
	}
	defer unlock()

	src, dbSize, err := PickSnapshotSource(ctx, c, inv, opts.SourceTimeout)
	opts.Step(StepSnapshotSource, fmt.Sprintf("%s (etcd db %s)", src.Name, humanBytes(uint64(dbSize))), err)
	if err != nil {
		return nil, err
	}

	detail, err := CheckFreeSpace(dir, uint64(dbSize), opts.FreeSpace)
	opts.Step(StepSnapshotSpace, detail, err)
	if err != nil {
		return nil, err
	}

	stream, err := c.Machine.EtcdSnapshot(client.WithNode(ctx, src.Address), &machineapi.EtcdSnapshotRequest{})
	if err != nil {
		err = fmt.Errorf("start etcd snapshot on %s: %w", src.Name, err)
		opts.Step(StepSnapshotWrite, "", err)
		return nil, err
	}
	base := snapname.New(opts.Now(), src.Name)
	snap, err := WriteVerified(ctx, &streamReader{s: stream}, dir, base, recipients...)
	if err != nil {
		err = fmt.Errorf("snapshot from %s: %w", src.Name, err)
		opts.Step(StepSnapshotWrite, "", err)
		return nil, err
	}
	snap.ID, snap.Node = inv.Name+"/"+base, src.Name
	opts.Step(StepSnapshotWrite, fmt.Sprintf("%s, %s, sha256 %s, trailer verified%s", snap.Path, humanBytes(uint64(snap.Size)),
		snap.SHA256[:12], map[bool]string{true: ", age-encrypted", false: ""}[snap.Encrypted]), nil)

	var store *offsite.Store
	if opts.Offsite == nil {
		opts.Step(StepSnapshotOffsite, NoOffsite, ErrStepSkipped)
	} else {
		store, err = offsite.New(*opts.Offsite)
		var key string
		if err == nil {
			key = store.Key(inv.Name, filepath.Base(snap.Path))
			err = store.Put(ctx, key, snap.Path, snap.StoredSHA256)
		}
		if err != nil {
			// R12 is not met: fail, keep the verified local copy, and skip
			// retention so nothing older goes either.
			err = fmt.Errorf("off-site copy failed, so the snapshot is not off-cluster (R12): %w. The verified local copy is kept at %s; "+
				"fix snapshots.offsite (endpoint, bucket, credentials) or the storage, then run the command again", err, snap.Path)
			opts.Step(StepSnapshotOffsite, "", err)
			return nil, err
		}
		snap.Offsite = &OffsiteCopy{URL: store.URL(key)}
		opts.Step(StepSnapshotOffsite, store.URL(key)+": the server's checksum read back and matched", nil)
	}

	// The snapshot just verified is kept whatever its name sorts as (a
	// clock set back would make it look older than the newest), and so is
	// every snapshot whose run ended within SettleGrace of this one's start
	// (the host's list may predate its record).
	protected, err := settling(dir, inv.Name, began.Add(-SettleGrace))
	if err != nil {
		opts.Step(StepSnapshotRetention, "", err)
		return snap, fmt.Errorf("retention: %w", err)
	}
	protected[snap.ID] = true
	for id := range opts.Protected {
		protected[id] = true
	}
	// Stamp this run's end on its snapshot, for the runs after it.
	defer func() { _ = os.Chtimes(snap.Path, time.Time{}, opts.Now()) }()
	var errs []error
	snap.Removed, err = ApplyRetention(dir, inv.Name, opts.Retention, opts.Now(), protected)
	if err != nil {
		errs = append(errs, fmt.Errorf("local retention: %w", err))
	}
	detail = fmt.Sprintf("removed %d old local snapshot(s), keeping %s", len(snap.Removed), opts.Retention)
	if store != nil {
		snap.Offsite.Removed, err = store.ApplyRetention(ctx, inv.Name, opts.OffsiteRetention, opts.Now(), protected)
		if err != nil {
			errs = append(errs, fmt.Errorf("off-site retention: %w", err))
		}
		detail += fmt.Sprintf("; %d off-site, keeping %s", len(snap.Offsite.Removed), opts.OffsiteRetention)
	}
	err = errors.Join(errs...)
	opts.Step(StepSnapshotRetention, detail, err)
	if err != nil {
		// The new snapshot is good; a failed clean-up must not hide it.
		return snap, fmt.Errorf("retention: %w", err)
	}
	return snap, nil
}

// DefaultSourceTimeout bounds the snapshot source pick when
// SnapshotOptions.SourceTimeout is unset: a member whose etcd is stopped
// answers etcd status only at the deadline, so without one the pick would
// wait for it forever.
const DefaultSourceTimeout = 15 * time.Second

// PickSnapshotSource asks every control plane (R4) for its etcd status, one
// call per member (cluster.PerNode) bounded by within, and picks a healthy
// member, a follower when there is one so the leader is not loaded. A member
// that does not answer within the bound is left out, not waited for. It
// returns the member's database size for the space check.
func PickSnapshotSource(ctx context.Context, c *cluster.Clients, inv cluster.Inventory, within time.Duration) (cluster.Node, int64, error) {
	targets := cluster.EtcdTargets(inv)
	sctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	ok, fails := cluster.PerNode(sctx, inv, targets, func(nctx context.Context) ([]*machineapi.EtcdStatus, error) {
		resp, err := c.Machine.EtcdStatus(nctx, &emptypb.Empty{})
		return resp.GetMessages(), err
	})
	var why []string
	if d, _ := cluster.DescribeFailures(fails); d != "" {
		why = append(why, d)
	}
	var leader *cluster.Node
	var leaderSize int64
	for _, cp := range inv.ControlPlanes() {
		m, answered := ok[cp.Name]
		if !answered {
			continue
		}
		st := m.GetMemberStatus()
		switch {
		case st.GetLeader() == 0:
			why = append(why, cp.Name+": no leader")
		case len(st.GetErrors()) > 0:
			why = append(why, cp.Name+": "+strings.Join(st.GetErrors(), ", "))
		case st.GetIsLearner():
			why = append(why, cp.Name+": learner")
		case st.GetLeader() == st.GetMemberId():
			if leader == nil {
				leader, leaderSize = &cp, st.GetDbSize()
			}
		default:
			return cp, st.GetDbSize(), nil
		}
	}
	if leader != nil {
		return *leader, leaderSize, nil
	}
	return cluster.Node{}, 0, fmt.Errorf("no healthy control plane to take the etcd snapshot from (%s); run /talos health and fix etcd first", strings.Join(why, "; "))
}

// CheckFreeSpace refuses when dir cannot hold a snapshot of a dbSize
// database with a 10% margin.
func CheckFreeSpace(dir string, dbSize uint64, free func(string) (uint64, error)) (string, error) {
	if free == nil {
		free = freeSpace
	}
	avail, err := free(dir)
	if err != nil {
		return "", fmt.Errorf("cannot read free space of %s: %w", dir, err)
	}
	need := dbSize + dbSize/10 + snapshotTrailer
	detail := fmt.Sprintf("need %s, available %s in %s", humanBytes(need), humanBytes(avail), dir)
	if avail < need {
		return detail, fmt.Errorf("not enough free space for the etcd snapshot: %s; free some space or point snapshot_dir at a larger disk", detail)
	}
	return detail, nil
}

// streamReader turns the EtcdSnapshot stream into an io.Reader without
// buffering more than one message.
type streamReader struct {
	s   grpc.ServerStreamingClient[common.Data]
	buf []byte
}

func (r *streamReader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		msg, err := r.s.Recv()
		if err != nil {
			return 0, err // io.EOF at the end
		}
		if e := msg.GetMetadata().GetError(); e != "" {
			return 0, errors.New(e)
		}
		r.buf = msg.GetBytes()
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

// copyBufferSize is the streaming buffer; memory use does not depend on the
// snapshot size.
const copyBufferSize = 1 << 20

// WriteVerified streams src to dir/base.db.part in one pass: it hashes the
// stream while writing it, checks that the stream ends in the 32-byte
// sha256 trailer etcd appends (size % 512 == 32 and the trailer equals the
// hash of everything before it), fsyncs, moves the part file to
// dir/base.db without ever replacing a file of that name (publish) and
// fsyncs dir. The file is never read back: that a real etcd
// opens it is the restore drill's check. With recipients the bytes are
// age-encrypted on the way to disk (dir/base.db.age): no plaintext byte is
// written. On any failure the part file is removed; when dir/base.db
// already exists the error wraps fs.ErrExist and that file is untouched.
func WriteVerified(ctx context.Context, src io.Reader, dir, base string, recipients ...age.Recipient) (_ *Snapshot, err error) {
	final := filepath.Join(dir, base+".db")
	if len(recipients) > 0 {
		final += seal.Ext
	}
	part := final + ".part"
	f, err := os.OpenFile(part, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", part, err)
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(part)
		}
	}()

	var dst io.Writer = newWriteback(f)
	var stored *countingHash // ciphertext digest, when it differs from the stream's
	var enc io.WriteCloser
	if len(recipients) > 0 {
		stored = &countingHash{h: sha256.New()}
		if enc, err = seal.Encrypt(io.MultiWriter(dst, stored), recipients); err != nil {
			return nil, err
		}
		dst = enc
	}
	tw := &trailerWriter{h: sha256.New()}
	if err = pipelinedCopy(&ctxReader{ctx: ctx, r: src}, dst, tw); err != nil {
		return nil, fmt.Errorf("write %s: %w", part, err)
	}
	prefixSum, fileSum := tw.sums()
	if tw.size%512 != snapshotTrailer {
		return nil, fmt.Errorf("snapshot is %d bytes: not a complete etcd snapshot (size %% 512 must be 32, the sha256 trailer); it was probably cut short, take it again", tw.size)
	}
	if !bytes.Equal(prefixSum, tw.tail[:]) {
		return nil, errors.New("snapshot sha256 trailer does not match its contents: the data was corrupted in transit, take it again")
	}
	if enc != nil {
		if err = enc.Close(); err != nil {
			return nil, fmt.Errorf("finish age encryption of %s: %w", part, err)
		}
	}
	if err = f.Sync(); err != nil {
		return nil, fmt.Errorf("fsync %s: %w", part, err)
	}
	if err = f.Close(); err != nil {
		return nil, fmt.Errorf("close %s: %w", part, err)
	}
	if err = publish(part, final); err != nil {
		return nil, err
	}
	if err = syncDir(dir); err != nil {
		return nil, err
	}
	snap := &Snapshot{Path: final, Size: tw.size, SHA256: hex.EncodeToString(fileSum), StoredSize: tw.size}
	snap.StoredSHA256 = snap.SHA256
	if stored != nil {
		snap.Encrypted, snap.StoredSize, snap.StoredSHA256 = true, stored.n, hex.EncodeToString(stored.h.Sum(nil))
	}
	return snap, nil
}

// CheckStream reads a plaintext etcd snapshot to its end and applies the
// same one-pass check as WriteVerified (size % 512 == 32, the sha256
// trailer) without writing anything. It returns the size and the sha256 of
// the whole stream. Check before opening a file with bbolt: bbolt panics on
// a truncated database instead of returning an error.
func CheckStream(ctx context.Context, src io.Reader) (int64, string, error) {
	tw := &trailerWriter{h: sha256.New()}
	if err := pipelinedCopy(&ctxReader{ctx: ctx, r: src}, io.Discard, tw); err != nil {
		return 0, "", err
	}
	prefixSum, fileSum := tw.sums()
	if tw.size%512 != snapshotTrailer {
		return tw.size, "", fmt.Errorf("snapshot is %d bytes: not a complete etcd snapshot (size %% 512 must be 32, the sha256 trailer); it was cut short", tw.size)
	}
	if !bytes.Equal(prefixSum, tw.tail[:]) {
		return tw.size, "", errors.New("snapshot sha256 trailer does not match its contents: the snapshot is corrupted")
	}
	return tw.size, hex.EncodeToString(fileSum), nil
}

// countingHash hashes and counts what is written to it.
type countingHash struct {
	h hash.Hash
	n int64
}

func (c *countingHash) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	return c.h.Write(p)
}

// publish moves the finished part file to final without ever replacing a
// file already named final (os.Rename would, silently: that is how a
// verified snapshot was lost to another taken in the same second). It is
// renameat2(RENAME_NOREPLACE) where the file system offers it, else a hard
// link, which fails when final exists, and the part file's removal.
func publish(part, final string) error {
	supported, err := renameNoReplace(part, final)
	if !supported {
		if err = os.Link(part, final); err == nil {
			// Published; a part file left behind is ignored by every reader.
			_ = os.Remove(part)
		}
	}
	switch {
	case errors.Is(err, fs.ErrExist):
		return fmt.Errorf("%s already exists and a snapshot is never replaced; it was left as it was: take the snapshot again (it gets a new name): %w", final, err)
	case err != nil:
		return fmt.Errorf("move %s into place without replacing anything (snapshot_dir must be on a file system with hard links or RENAME_NOREPLACE): %w", part, err)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", dir, err)
	}
	return nil
}

// pipelineBuffers is how many copy buffers are in flight: the hash of one
// buffer overlaps the read and write of the next ones.
const pipelineBuffers = 4

// pipelinedCopy copies src to dst in copyBufferSize chunks while another
// goroutine feeds the same chunks to tw's hash, so sha256 costs no wall
// time on a machine with a spare core. Memory: pipelineBuffers buffers.
func pipelinedCopy(src io.Reader, dst io.Writer, tw *trailerWriter) error {
	free := make(chan []byte, pipelineBuffers)
	for range pipelineBuffers {
		free <- alignedBuffer(copyBufferSize)
	}
	work := make(chan []byte, pipelineBuffers)
	hashed := make(chan struct{})
	go func() {
		defer close(hashed)
		for b := range work {
			tw.absorb(b)
			free <- b[:cap(b)]
		}
	}()
	defer func() {
		close(work)
		<-hashed
	}()
	for {
		buf := <-free
		// ReadFull batches small stream messages into large writes.
		n, rerr := io.ReadFull(src, buf)
		if n > 0 {
			if _, err := dst.Write(buf[:n]); err != nil {
				return err
			}
			tw.size += int64(n)
			work <- buf[:n]
		} else {
			free <- buf
		}
		switch {
		case rerr == nil:
		case errors.Is(rerr, io.EOF), errors.Is(rerr, io.ErrUnexpectedEOF):
			return nil
		default:
			return rerr
		}
	}
}

// trailerWriter writes through to w and hashes everything but the last 32
// bytes seen so far, which it holds back as the candidate trailer. One
// sha256 pass yields both digests: the prefix digest (to compare with the
// trailer) and, by adding the trailer, the digest of the whole file.
type trailerWriter struct {
	w     io.Writer
	h     hash.Hash
	tail  [snapshotTrailer]byte
	tailN int
	size  int64
}

// Write writes through to w and hashes (the sequential form of pipelinedCopy).
func (t *trailerWriter) Write(p []byte) (int, error) {
	n, err := t.w.Write(p)
	t.size += int64(n)
	t.absorb(p[:n])
	return n, err
}

func (t *trailerWriter) absorb(p []byte) {
	total := t.tailN + len(p)
	if total <= snapshotTrailer {
		copy(t.tail[t.tailN:], p)
		t.tailN = total
		return
	}
	hashN := total - snapshotTrailer // bytes that are certainly not the trailer
	if hashN <= t.tailN {
		t.h.Write(t.tail[:hashN])
		var nt [snapshotTrailer]byte
		k := copy(nt[:], t.tail[hashN:t.tailN])
		copy(nt[k:], p)
		t.tail = nt
	} else {
		t.h.Write(t.tail[:t.tailN])
		t.h.Write(p[:hashN-t.tailN])
		copy(t.tail[:], p[hashN-t.tailN:])
	}
	t.tailN = snapshotTrailer
}

// sums returns the digest of everything but the trailer, then of the whole file.
func (t *trailerWriter) sums() (prefix, whole []byte) {
	prefix = t.h.Sum(nil)
	t.h.Write(t.tail[:t.tailN])
	return prefix, t.h.Sum(nil)
}

// alignedBuffer returns n bytes starting at a directAlign boundary, so that
// full buffers can be written with O_DIRECT (writeback_linux.go).
func alignedBuffer(n int) []byte {
	b := make([]byte, n+directAlign)
	off := int(uintptr(unsafe.Pointer(unsafe.SliceData(b))) % directAlign)
	if off != 0 {
		off = directAlign - off
	}
	return b[off : off+n : off+n]
}

// ctxReader stops a copy when ctx is cancelled.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// LocalSnapshots lists the finished snapshots in dir (the snapshots of
// cluster) as retention items; part files and other files are ignored.
func LocalSnapshots(dir, cluster string) (map[string]string, []retention.Item, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", dir, err)
	}
	paths := map[string]string{}
	var items []retention.Item
	for _, e := range entries {
		name, at, _, ok := snapname.Parse(e.Name())
		if !ok || !e.Type().IsRegular() {
			continue
		}
		id := cluster + "/" + name
		paths[id] = filepath.Join(dir, e.Name())
		items = append(items, retention.Item{ID: id, At: at})
	}
	return paths, items, nil
}

// settling returns the ids of the snapshots of cluster in dir whose run
// ended at or after since: TakeSnapshot stamps a snapshot's end as its
// modification time.
func settling(dir, cluster string, since time.Time) (map[string]bool, error) {
	paths, _, err := LocalSnapshots(dir, cluster)
	if err != nil {
		return nil, err
	}
	ids := map[string]bool{}
	for id, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return nil, err
		}
		if !fi.ModTime().Before(since) {
			ids[id] = true
		}
	}
	return ids, nil
}

// ApplyRetention deletes the snapshots of cluster in dir that policy does
// not keep, judged by the timestamps in their names. It never deletes the
// newest snapshot (the one just verified) nor a protected id. Other files
// are left alone.
func ApplyRetention(dir, cluster string, policy retention.Policy, now time.Time, protected map[string]bool) ([]string, error) {
	if policy.Empty() {
		return nil, nil
	}
	paths, items, err := LocalSnapshots(dir, cluster)
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for _, d := range retention.Select(items, policy, now, protected) {
		if !d.Delete {
			continue
		}
		if err := os.Remove(paths[d.ID]); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, paths[d.ID])
	}
	return removed, errors.Join(errs...)
}

func humanBytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
