package sim

import (
	"context"
	"fmt"
	"strconv"

	"github.com/siderolabs/talos/pkg/machinery/resources/etcd"

	"github.com/talosbot/talosbot/sim/etcdsim"
)

// The etcdQuotaBytes fault (docs/SIMULATOR.md): the member runs with
// --quota-backend-bytes, as a control plane whose cluster.etcd.extraArgs set
// it. etcd itself (v3.7.3 server/storage/quota.go BackendQuota.Available,
// server/etcdserver/api/v3rpc/quota.go quotaKVServer.check) refuses a write
// that would take the database file past the quota and raises NOSPACE for
// the cluster; the sim makes one write through the member at once, as
// kube-apiserver's next write would, so the alarm is there when Inject
// returns when the database is over the quota.

func checkEtcdQuota(n *node, f Fault) error {
	switch {
	case f.EtcdQuotaBytes < 0:
		return fmt.Errorf("sim: etcdQuotaBytes %d is negative; use a size in bytes, or 0 for etcd's default", f.EtcdQuotaBytes)
	case f.EtcdQuotaBytes > 0 && n.info.Role != RoleControlPlane:
		return fmt.Errorf("sim: etcdQuotaBytes needs a control-plane node; %s is a worker", n.info.Name)
	}
	return nil
}

func (n *node) applyEtcdQuota(ctx context.Context, m *etcdsim.Member, old, f Fault) error {
	if f.EtcdQuotaBytes == old.EtcdQuotaBytes {
		return nil
	}
	if err := m.SetQuota(ctx, f.EtcdQuotaBytes); err != nil {
		return fmt.Errorf("etcd quota on %s: %w", n.info.Name, err)
	}
	if f.EtcdQuotaBytes > 0 && m.Running() {
		return m.ProbeWrite(ctx)
	}
	return nil
}

// probeQuotaWrites makes the next write through every member with a quota
// fault (after a disarm: etcd raises NOSPACE again there while the database
// is still over its quota).
func (c *Cluster) probeQuotaWrites(ctx context.Context) error {
	for _, o := range c.nodes {
		if o.currentFault().EtcdQuotaBytes > 0 {
			if m := o.member(); m != nil && m.Running() {
				if err := m.ProbeWrite(ctx); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// etcdSpec follows Talos's etcd.SpecController (EtcdSpecs.etcd.talos.dev,
// internal/app/machined/pkg/controllers/etcd/spec.go, v1.13.9): a control
// plane's etcd arguments, with the extra arguments of the machine config;
// here only the quota fault's quota-backend-bytes.
func (n *node) etcdSpec() *etcd.Spec {
	if n.info.Role != RoleControlPlane {
		return nil
	}
	s := etcd.NewSpec(etcd.NamespaceName, etcd.SpecID)
	s.TypedSpec().Name = n.info.EtcdMember
	s.TypedSpec().ExtraArgs = map[string]etcd.ArgValues{}
	if q := n.currentFault().EtcdQuotaBytes; q > 0 {
		s.TypedSpec().ExtraArgs["quota-backend-bytes"] = etcd.ArgValues{Values: []string{strconv.FormatInt(q, 10)}}
	}
	return s
}
