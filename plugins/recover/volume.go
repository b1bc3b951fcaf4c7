package recover

import (
	"context"
	"strings"

	"github.com/cosi-project/runtime/pkg/safe"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"

	"github.com/talosbot/talosbot/plugins/cluster"
)

// etcdWipeLabels are the volumes a reset wipes so that a control plane's etcd starts with an
// empty data dir. etcd's data is /var/lib/etcd: a directory on EPHEMERAL, or, on Talos v1.14
// with a VolumeConfig named ETCD that provisions it, a volume of its own, which wiping
// EPHEMERAL no longer clears (hack/release.toml notes.systemVolumes, v1.14.0-rc.1; Reset wipes
// by VolumeStatus label, v1alpha1_server.go at v1.14.1). The node's ETCD VolumeStatus tells
// which: one with a location (a partition) is wiped with EPHEMERAL, as wiping EPHEMERAL alone
// did before. A node that has no such resource (before v1.14) or whose ETCD is a directory
// gets EPHEMERAL only (Talos refuses ETCD alone there).
func etcdWipeLabels(ctx context.Context, s *cluster.Session, address string) []string {
	v, err := safe.StateGetByID[*block.VolumeStatus](client.WithNode(ctx, address), s.COSI, "ETCD")
	if err != nil || v.TypedSpec().Location == "" {
		return []string{"EPHEMERAL"}
	}
	return []string{"EPHEMERAL", "ETCD"}
}

// wipeSpecs is the ResetRequest form of labels.
func wipeSpecs(labels []string) []*machineapi.ResetPartitionSpec {
	out := make([]*machineapi.ResetPartitionSpec, 0, len(labels))
	for _, l := range labels {
		out = append(out, &machineapi.ResetPartitionSpec{Label: l, Wipe: true})
	}
	return out
}

// wipeFlag is talosctl's --system-labels-to-wipe for labels.
func wipeFlag(labels []string) string { return strings.Join(labels, ",") }
