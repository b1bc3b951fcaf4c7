package sim

import (
	"context"

	"github.com/distribution/reference"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// minorBehaviour is what a node does differently by the Talos minor it runs. The sim reads a
// node's running version on every call, so a cluster in the middle of a multi-hop roll serves
// each node by its own version. Each field names the Talos source (and tag) it was read from;
// docs/SIMULATOR.md has the same rows under "Versions".
type minorBehaviour struct {
	// minor is "v1.12", "v1.13", "v1.14"; "before v1.12" for older nodes.
	minor string
	// stateConfigFile: MachineService.Read serves /system/state/config.yaml. Talos v1.12 stopped
	// mounting STATE (commit 9db6dc06c "feat: stop mounting state partition", in v1.12.0).
	stateConfigFile bool
	// lifecycleAPI: ImageService and LifecycleService are served (internal/app/lifecycle and
	// internal/app/images first appear at v1.13.0; older apid answers Unimplemented "unknown
	// service").
	lifecycleAPI bool
	// applyRebootMode: ApplyConfiguration accepts mode REBOOT outside maintenance. v1.14 refuses
	// it (internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go, ApplyConfiguration,
	// v1.14.1: Unimplemented "the REBOOT mode is not supported, please use AUTO or NO_REBOOT
	// modes instead"; hack/release.toml notes.apply_config, v1.14.0-rc.1).
	applyRebootMode bool
	// etcdMetricsPort is where etcd serves /metrics and /health: the client port 2379 up to
	// v1.13, a dedicated listener on 2383 from v1.14 (hack/release.toml notes.etcd,
	// v1.14.0-rc.1; EtcdClientHTTPPort in pkg/machinery/constants/constants.go, v1.14.1).
	etcdMetricsPort int
	// apiPullRetries: a pull the API asks for (ImageService.Pull, MachineService.ImagePull) retries
	// an unreachable registry for up to 20 minutes (internal/pkg/containers/image/image.go Pull,
	// v1.13.9). From v1.14 it is one attempt bounded only by the caller (commit 6e3d0c55c "fix:
	// image pull via the API should not have timeout or retries", first in v1.14.0-rc.1;
	// internal/app/images/images.go and v1alpha1_images.go call image.Pull, v1.14.1). The legacy
	// Upgrade's own pull keeps retrying on every version (PullWithRetriesAndTimeout).
	apiPullRetries bool
}

// minorTable is the per-minor behaviour, oldest first. A version newer than the last row
// behaves as the last row; one older than the first as the first.
var minorTable = []struct {
	major, minor int
	b            minorBehaviour
}{
	{1, 11, minorBehaviour{minor: "before v1.12", stateConfigFile: true, applyRebootMode: true, etcdMetricsPort: 2379, apiPullRetries: true}},
	{1, 12, minorBehaviour{minor: "v1.12", applyRebootMode: true, etcdMetricsPort: 2379, apiPullRetries: true}},
	{1, 13, minorBehaviour{minor: "v1.13", lifecycleAPI: true, applyRebootMode: true, etcdMetricsPort: 2379, apiPullRetries: true}},
	{1, 14, minorBehaviour{minor: "v1.14", lifecycleAPI: true, etcdMetricsPort: 2383}},
}

// behaviourOf returns the behaviour of a node running version v ("v1.13.9").
func behaviourOf(v string) minorBehaviour {
	b := minorTable[0].b

	for _, row := range minorTable {
		if atLeast(v, row.major, row.minor) {
			b = row.b
		}
	}

	return b
}

// behaviour is the node's behaviour at the version it runs now.
func (n *node) behaviour() minorBehaviour { return behaviourOf(n.talosVersion()) }

// applyModeRefusal is the refusal of an ApplyConfiguration mode the node's version removed, nil
// if the version has it (the sim then applies or refuses it as any other mode).
func (n *node) applyModeRefusal(mode machineapi.ApplyConfigurationRequest_Mode) error {
	if mode == machineapi.ApplyConfigurationRequest_REBOOT && !n.behaviour().applyRebootMode { //nolint:staticcheck // the mode older nodes still accept
		return status.Error(codes.Unimplemented, "the REBOOT mode is not supported, please use AUTO or NO_REBOOT modes instead")
	}

	return nil
}

// etcdVersion is the etcd version the node reports in EtcdStatus: the default etcd of the
// release it runs (the catalogue's Etcd, DefaultEtcdVersion at the tag), as a node running
// Talos's default etcd image reports that image's server version; real is the embedded
// member's own version, used for a release the catalogue does not know.
func (n *node) etcdVersion(real string) string {
	if r, ok := LookupRelease(n.talosVersion()); ok {
		return r.Etcd
	}

	return real
}

// EtcdMetricsPort is the port a control plane running version serves etcd's /metrics and
// /health on (2379 up to v1.13, 2383 from v1.14). The sim does not serve them; callers that
// check where metrics are scraped read it.
func EtcdMetricsPort(version string) int { return behaviourOf(version).etcdMetricsPort }

// apiPull is a pull the API asked for (ImageService.Pull, MachineService.ImagePull). Up to v1.13
// it is the node's pull with its retries (registry.go); from v1.14 an unreachable registry fails
// the one attempt at once with that attempt's error, as image.Pull does without a retry loop.
func (n *node) apiPull(ctx context.Context, ns, ref string) (image, error) {
	if !n.behaviour().apiPullRetries && n.currentFault().RegistryUnreachable && !n.havePulled(ns, ref) {
		if named, err := reference.ParseDockerRef(ref); err == nil {
			return image{}, unreachableError(named)
		}
	}

	return n.pull(ctx, ns, ref)
}
