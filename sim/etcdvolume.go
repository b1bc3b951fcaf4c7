package sim

import (
	"errors"
	"fmt"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
)

// Talos v1.14 can put /var/lib/etcd on a dedicated ETCD volume (hack/release.toml
// notes.systemVolumes, v1.14.0-rc.1: a VolumeConfig named ETCD with provisioning; by default it
// stays a directory under EPHEMERAL). Reset then wipes volumes by the label of their
// VolumeStatus (v1alpha1_server.go Reset, v1.14.1): a volume with a block device of its own is
// wiped by itself, and one without (a directory under EPHEMERAL) only by wiping the volume it
// resides on, so `--system-labels-to-wipe=ETCD` alone is refused there, and
// `--system-labels-to-wipe=EPHEMERAL` no longer clears a dedicated ETCD volume.

const (
	labelEphemeral = "EPHEMERAL"
	labelEtcd      = "ETCD"
)

// hasEtcdVolume reports whether the node's etcd data is on a dedicated ETCD volume.
func (n *node) hasEtcdVolume() bool {
	return n.c.opts.EtcdVolume && n.info.Role == RoleControlPlane && atLeast(n.talosVersion(), 1, 14)
}

// etcdDataLabel is the volume label whose wipe clears the node's etcd data.
func (n *node) etcdDataLabel() string {
	if n.hasEtcdVolume() {
		return labelEtcd
	}

	return labelEphemeral
}

// etcdVolumeStatus is the ETCD VolumeStatus (block.VolumeManagerController) on v1.14+ nodes:
// a partition of its own with the option, else a directory under EPHEMERAL (no location).
// nil before v1.14, which has no such volume.
func (n *node) etcdVolumeStatus() *block.VolumeStatus {
	if !atLeast(n.talosVersion(), 1, 14) || n.info.Role != RoleControlPlane {
		return nil
	}

	r := block.NewVolumeStatus(block.NamespaceName, labelEtcd)

	if n.hasEtcdVolume() {
		*r.TypedSpec() = block.VolumeStatusSpec{
			Phase: block.VolumePhaseReady, Type: block.VolumeTypePartition,
			Location: "/dev/sda7", MountLocation: "/dev/sda7", PartitionIndex: 7, ParentLocation: "/dev/sda",
			Size: 2 << 30, PrettySize: "2.0 GiB", Filesystem: block.FilesystemTypeXFS,
		}
	} else {
		*r.TypedSpec() = block.VolumeStatusSpec{Phase: block.VolumePhaseReady, Type: block.VolumeTypeDirectory, ParentID: labelEphemeral}
	}

	return r
}

// checkWipeLabels is Reset's check of the labels to wipe (v1alpha1_server.go, v1.14.1): an
// ETCD label on a node without a dedicated ETCD volume needs EPHEMERAL wiped with it, and
// before v1.14 there is no ETCD volume at all.
func (n *node) checkWipeLabels(specs []*machineapi.ResetPartitionSpec) error {
	wipe := map[string]bool{}

	for _, p := range specs {
		if p.GetWipe() {
			wipe[p.GetLabel()] = true
		}
	}

	for _, p := range specs {
		if p.GetLabel() != labelEtcd {
			continue
		}

		switch {
		case n.etcdVolumeStatus() == nil:
			return fmt.Errorf("failed to get volume status with label %q: %w", labelEtcd,
				errors.New(`resource VolumeStatuses.block.talos.dev(runtime/ETCD@undefined) doesn't exist`))
		case !n.hasEtcdVolume() && !wipe[labelEphemeral]:
			return fmt.Errorf("failed to reset: volume %q resides on volume %q, and therefore %q cannot be wiped without wiping %q",
				labelEtcd, labelEphemeral, labelEtcd, labelEphemeral)
		}
	}

	return nil
}
