// Package compat is the Talos support matrix for package releases, read
// from machinery's compatibility package (pinned with machinery, v1.13.9):
// upgrade-from rules (TalosVersion.UpgradeableFrom) and the Kubernetes
// versions each Talos minor supports (KubernetesVersion.SupportedWith).
//
// It links machinery: plugins use it; the bot process must not (see
// cmd/talosbot TestServeBinaryLinksNoClusterLibraries).
package compat

import (
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/compatibility"

	"github.com/talosbot/talosbot/internal/releases"
)

// Machinery implements releases.Matrix.
type Machinery struct{}

var _ releases.Matrix = Machinery{}

func talos(v releases.Version) (*compatibility.TalosVersion, error) {
	return compatibility.ParseTalosVersion(&machineapi.VersionInfo{Tag: v.Tag()})
}

// UpgradeableFrom is TalosVersion.UpgradeableFrom.
func (Machinery) UpgradeableFrom(host, target releases.Version) error {
	t, err := talos(target)
	if err != nil {
		return err
	}
	h, err := talos(host)
	if err != nil {
		return err
	}
	return t.UpgradeableFrom(h)
}

// SupportsKubernetes is KubernetesVersion.SupportedWith.
func (Machinery) SupportsKubernetes(tv, k8s releases.Version) error {
	t, err := talos(tv)
	if err != nil {
		return err
	}
	k, err := compatibility.ParseKubernetesVersion(k8s.Plain())
	if err != nil {
		return err
	}
	return k.SupportedWith(t)
}
