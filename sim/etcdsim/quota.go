package etcdsim

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
)

// SetQuota restarts the member with etcd's --quota-backend-bytes set to
// bytes (0: etcd's default, 2 GiB), as a changed cluster.etcd.extraArgs
// does on a Talos node. etcd checks the quota on the member a write goes
// through (BackendQuota.Available: the database file's size plus the
// write's cost must stay under it, server/storage/quota.go) and raises
// NOSPACE for the whole cluster when it does not (quotaKVServer.check,
// server/etcdserver/api/v3rpc/quota.go).
func (m *Member) SetQuota(ctx context.Context, bytes int64) error {
	m.opMu.Lock()
	defer m.opMu.Unlock()
	if m.isRemoved() {
		return fmt.Errorf("etcdsim: member %s: set quota: %w", m.spec.Name, ErrRemoved)
	}
	running := m.Running()
	m.mu.Lock()
	m.quota = bytes
	m.mu.Unlock()
	if !running {
		return nil // the next start reads it
	}
	m.shutdown(false)
	ctx, cancel := withDefaultTimeout(ctx, defaultStartTimeout)
	defer cancel()
	return m.start(ctx, embed.ClusterStateFlagExisting, m.c.initialCluster())
}

// Quota is the member's --quota-backend-bytes (0: etcd's default).
func (m *Member) Quota() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.quota
}

// ProbeWrite writes one small key through this member, as kube-apiserver's
// next write would: over the quota it is refused with "database space
// exceeded" and etcd raises NOSPACE itself. That refusal is the point and
// not an error here.
func (m *Member) ProbeWrite(ctx context.Context) error {
	return m.call(ctx, "probe write", func(ctx context.Context, cli *clientv3.Client) error {
		_, err := cli.Put(ctx, "/talosbot-sim/quota-probe", "x")
		if errors.Is(err, rpctypes.ErrNoSpace) || (err != nil && err.Error() == rpctypes.ErrNoSpace.Error()) {
			return nil
		}
		return err
	})
}
