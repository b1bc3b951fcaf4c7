package etcdsim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.etcd.io/etcd/server/v3/embed"
)

// This file is the disaster-recovery side of a member, following Talos
// v1.13.9's etcd service (internal/app/machined/pkg/system/services/etcd.go):
// a member whose data directory is gone (Wipe), the bootstrap of a new
// one-member cluster, optionally restored from an uploaded snapshot with
// etcd's own restore code (Bootstrap), and the join of an empty member into
// a running cluster (JoinCluster, Talos's addMember + promoteMember).

// ErrDataPresent: the member's data directory is not empty, so it can neither
// bootstrap nor join (Talos resumes from the data instead).
var ErrDataPresent = errors.New("etcdsim: etcd data directory is not empty")

// RecoverySnapshotPath is where a snapshot uploaded for recovery waits for
// Bootstrap: next to the data directory, as Talos keeps
// constants.EtcdRecoverySnapshotPath (/var/lib/etcd.snapshot) next to
// constants.EtcdDataPath (/var/lib/etcd).
func (m *Member) RecoverySnapshotPath() string { return m.dir + ".snapshot" }

// DataEmpty reports whether the member's data directory is missing or empty:
// Talos's IsDirEmpty(/var/lib/etcd), which decides between resuming from the
// data and bootstrapping or joining.
func (m *Member) DataEmpty() bool {
	f, err := os.Open(m.dir)
	if err != nil {
		return errors.Is(err, os.ErrNotExist)
	}
	defer f.Close() //nolint:errcheck
	_, err = f.Readdirnames(1)
	return errors.Is(err, io.EOF)
}

// Wipe stops the member like a power cut and deletes its data directory, as
// a lost disk, a corrupted database thrown away, or a reset that wiped the
// EPHEMERAL partition leaves it. The other members' membership still lists
// it; the member counts as removed here (it cannot come back with its old
// identity) until Bootstrap or JoinCluster gives it a new one.
func (m *Member) Wipe() error {
	m.opMu.Lock()
	defer m.opMu.Unlock()
	m.shutdown(true)
	if err := os.RemoveAll(m.dir); err != nil {
		return fmt.Errorf("etcdsim: member %s: wipe data dir: %w", m.spec.Name, err)
	}
	m.c.lg.Info("etcd member data wiped", "member", m.spec.Name)
	return nil
}

// SnapshotStatus is what etcdutl's snapshot status reads from a snapshot
// file: the numbers Talos logs before restoring it.
type SnapshotStatus = snapshot.Status

// Bootstrap starts this member as the only member of a new cluster, as Talos's
// etcd service does in bootstrap mode (argsForControlPlane with Bootstrap
// set: initial-cluster-state new, initial-cluster of this member alone).
//
// With restore, the data directory is first restored from
// RecoverySnapshotPath exactly as recoverFromSnapshot does: etcdutl's
// snapshot Status (failing with "error verifying snapshot"), then etcdutl's
// Restore with this member's name and peer URL as the whole initial cluster
// and skipHashCheck as given (failing with "error recovering from the
// snapshot"; etcdutl leaves what it had copied, so the data directory is
// then not empty, as on Talos), then the snapshot file is deleted. The returned status is the
// snapshot's (nil without restore).
//
// It refuses with ErrDataPresent when the data directory is not empty. Every
// other member is left as it is: a wiped one can then JoinCluster, one still
// running on its old data stays in the old cluster, which the new one never
// accepts (its cluster ID differs), until it is wiped too.
func (m *Member) Bootstrap(ctx context.Context, restore, skipHashCheck bool) (*SnapshotStatus, error) {
	m.opMu.Lock()
	defer m.opMu.Unlock()
	if m.Running() {
		return nil, fmt.Errorf("etcdsim: member %s: bootstrap: %w (the member is running)", m.spec.Name, ErrDataPresent)
	}
	if !m.DataEmpty() {
		return nil, fmt.Errorf("etcdsim: member %s: bootstrap: %w", m.spec.Name, ErrDataPresent)
	}
	m.shutdown(true)
	self := m.spec.Name + "=" + m.peerURL.String()

	var st *SnapshotStatus
	if restore {
		mgr := snapshot.NewV3(m.c.zlg.Named("restore"))
		s, err := mgr.Status(m.RecoverySnapshotPath())
		if err != nil {
			return nil, fmt.Errorf("error verifying snapshot: %w", err)
		}
		st = &s
		m.c.lg.Info("recovering etcd from snapshot", "member", m.spec.Name,
			"hash", fmt.Sprintf("%08x", s.Hash), "revision", s.Revision, "keys", s.TotalKey, "size", s.TotalSize)
		// No InitialClusterToken, as in Talos: the restored cluster gets a
		// new cluster ID in any case, since its membership differs.
		if err := mgr.Restore(snapshot.RestoreConfig{
			SnapshotPath:   m.RecoverySnapshotPath(),
			Name:           m.spec.Name,
			OutputDataDir:  m.dir,
			PeerURLs:       []string{m.peerURL.String()},
			InitialCluster: self,
			SkipHashCheck:  skipHashCheck,
		}); err != nil {
			return st, fmt.Errorf("error recovering from the snapshot: %w", err)
		}
		if err := os.Remove(m.RecoverySnapshotPath()); err != nil {
			return st, fmt.Errorf("error deleting snapshot: %w", err)
		}
	}

	ctx, cancel := withDefaultTimeout(ctx, defaultStartTimeout)
	defer cancel()
	if err := m.start(ctx, embed.ClusterStateFlagNew, self); err != nil {
		return st, err
	}
	m.mu.Lock()
	m.removed = false
	m.mu.Unlock()
	m.c.lg.Info("etcd bootstrapped a new cluster", "member", m.spec.Name, "restored", restore)
	return st, nil
}

// JoinCluster is one attempt of Talos's join of a member with an empty data
// directory (buildInitialCluster → addMember): through the other running
// members, with a leader required, it lists the membership, removes any
// member with this member's name (its own earlier incarnation), adds this
// member as a learner and starts it with the membership etcd returned. It
// returns once the learner serves; Promote makes it vote (Talos's
// promoteMember, which retries until the learner has caught up).
//
// It refuses with ErrDataPresent when the data directory is not empty (Talos
// only joins with an empty one) and fails while no running member has a
// leader: the caller retries, as Talos's join loop does.
func (m *Member) JoinCluster(ctx context.Context) error {
	m.opMu.Lock()
	defer m.opMu.Unlock()
	if !m.DataEmpty() {
		return fmt.Errorf("etcdsim: member %s: join: %w", m.spec.Name, ErrDataPresent)
	}
	var eps []string
	for _, o := range m.c.Members() {
		if o != m && o.Running() {
			eps = append(eps, o.ClientURL())
		}
	}
	if len(eps) == 0 {
		return fmt.Errorf("etcdsim: member %s: join: %w: no other member runs", m.spec.Name, ErrNotRunning)
	}
	cli, err := m.c.newClient(eps)
	if err != nil {
		return err
	}
	defer cli.Close() //nolint:errcheck

	lctx, cancel := context.WithTimeout(clientv3.WithRequireLeader(ctx), m.c.opts.CallTimeout)
	list, err := cli.MemberList(lctx)
	cancel()
	if err != nil {
		return fmt.Errorf("etcdsim: member %s: join: error getting etcd member list: %w", m.spec.Name, err)
	}
	for _, pm := range list.Members {
		if pm.Name != m.spec.Name {
			continue
		}
		rctx, cancel := context.WithTimeout(clientv3.WithRequireLeader(ctx), m.c.opts.CallTimeout)
		_, err := cli.MemberRemove(rctx, pm.ID)
		cancel()
		if err != nil {
			return fmt.Errorf("etcdsim: member %s: join: error removing self from the member list: %w", m.spec.Name, err)
		}
	}
	m.shutdown(true)
	return m.join(ctx)
}
