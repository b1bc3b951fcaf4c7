package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"

	lifecyclev1 "github.com/talosbot/talosbot/plugins/proto/lifecycle/v1"
	"github.com/talosbot/talosbot/plugins/sdk"
)

// DefaultNodeTimeout bounds one node's upgrade or rollback (reboot included)
// when settings.node_timeout_ms is unset.
const DefaultNodeTimeout = 10 * time.Minute

// NodeTimeout reads settings.node_timeout_ms (default DefaultNodeTimeout).
func NodeTimeout(s *lifecyclev1.Settings) time.Duration {
	if ms := s.GetNodeTimeoutMs(); ms > 0 {
		return time.Duration(ms) * time.Millisecond
	}
	return DefaultNodeTimeout
}

// GateTimeout reads settings.gate_timeout_ms (default DefaultGateTimeout).
func GateTimeout(s *lifecyclev1.Settings) time.Duration {
	if ms := s.GetGateTimeoutMs(); ms > 0 {
		return time.Duration(ms) * time.Millisecond
	}
	return DefaultGateTimeout
}

// EtcdLeader returns the name of the agreed etcd leader ("" when there is
// none or the members disagree).
func EtcdLeader(ctx context.Context, c *Clients, inv Inventory) string {
	return ReadQuorum(ctx, c, inv).Leader
}

// UpgradeOrder is rules R15 and R16 as an order: workers one at a time in
// inventory order, then control planes one at a time with the etcd leader
// last (one leader election, at the very end, instead of one per node).
func UpgradeOrder(inv Inventory, leader string) []Node {
	out := inv.Workers()
	var last []Node
	for _, cp := range inv.ControlPlanes() {
		if cp.Name == leader {
			last = append(last, cp)
			continue
		}
		out = append(out, cp)
	}
	return append(out, last...)
}

// Mechanics names how a node is upgraded, which depends on the version it
// runs (the host's API does the work).
type Mechanics string

const (
	// MechanicsLegacy is MachineService.Upgrade: Talos checks etcd, cordons,
	// drains, installs and reboots server-side (hosts before v1.13).
	MechanicsLegacy Mechanics = "legacy Upgrade API"
	// MechanicsLifecycle is ImageService.Pull, LifecycleService.Upgrade
	// (writes the new boot entry), a client-side cordon and drain through
	// the eviction API, then Reboot (hosts at v1.13 or later).
	MechanicsLifecycle Mechanics = "image pull + LifecycleService.Upgrade + drain + reboot"
)

// MechanicsFor picks the mechanics for a host version.
func MechanicsFor(host Release) Mechanics {
	if host.AtLeast(1, 13) {
		return MechanicsLifecycle
	}
	return MechanicsLegacy
}

// NodeUpgrade is one node's step of a roll.
type NodeUpgrade struct {
	Node     Node
	From, To Release
	Image    string
}

// UpgradeOptions tune StartUpgrade.
type UpgradeOptions struct {
	// DrainTimeout bounds the client-side drain (v1.13+ path).
	DrainTimeout time.Duration
	// Log hears progress lines.
	Log func(msg string)
}

// Started says what StartUpgrade set in motion.
type Started struct {
	// Actor is the request's actor id, for TrackOptions.Actor.
	Actor string
	// Cordoned is true when the bot cordoned the node itself (v1.13+ path)
	// and must uncordon it once the node is back.
	Cordoned bool
}

// StartUpgrade sets one node's upgrade in motion and returns once the node
// is on its way to a reboot; TrackReboot follows it from there.
func StartUpgrade(ctx context.Context, s *Session, u NodeUpgrade, opts UpgradeOptions) (Started, error) {
	logf := func(format string, a ...any) {
		if opts.Log != nil {
			opts.Log(fmt.Sprintf(format, a...))
		}
	}
	nctx := client.WithNode(ctx, u.Node.Address)
	if MechanicsFor(u.From) == MechanicsLegacy {
		//nolint:staticcheck // the legacy API is the only one hosts before v1.13 serve
		resp, err := s.Talos.MachineClient.Upgrade(nctx, &machineapi.UpgradeRequest{Image: u.Image, Preserve: true})
		if err != nil {
			return Started{}, fmt.Errorf("upgrade %s (legacy Upgrade API): %w", u.Node.Name, err)
		}
		actor := ""
		if len(resp.GetMessages()) > 0 {
			actor = resp.GetMessages()[0].GetActorId()
		}
		logf("%s: upgrade to %s requested (legacy Upgrade API: Talos checks etcd, cordons and drains)", u.Node.Name, u.Image)
		return Started{Actor: actor}, nil
	}

	containerd := &common.ContainerdInstance{Driver: common.ContainerDriver_CRI, Namespace: common.ContainerdNamespace_NS_SYSTEM}
	if err := pullImage(nctx, s, containerd, u.Image); err != nil {
		return Started{}, fmt.Errorf("pull %s on %s: %w", u.Image, u.Node.Name, err)
	}
	logf("%s: pulled %s", u.Node.Name, u.Image)
	if err := lifecycleUpgrade(nctx, s, containerd, u.Image); err != nil {
		return Started{}, fmt.Errorf("install %s on %s (LifecycleService.Upgrade): %w", u.Image, u.Node.Name, err)
	}
	logf("%s: %s installed; it becomes active at the next reboot", u.Node.Name, u.To)
	st := Started{}
	if s.Kube != nil {
		st.Cordoned = true
		if err := CordonAndDrain(ctx, s.Kube, u.Node.Name, opts.DrainTimeout); err != nil {
			return st, fmt.Errorf("%w; %s has %s installed for its next reboot: retry the upgrade, or roll the node back", err, u.Node.Name, u.To)
		}
		logf("%s: cordoned and drained", u.Node.Name)
	} else {
		logf("%s: no kubeconfig, so no client-side drain", u.Node.Name)
	}
	resp, err := s.Talos.MachineClient.Reboot(nctx, &machineapi.RebootRequest{})
	if err != nil {
		return st, fmt.Errorf("reboot %s into %s: %w", u.Node.Name, u.To, err)
	}
	if len(resp.GetMessages()) > 0 {
		st.Actor = resp.GetMessages()[0].GetActorId()
	}
	return st, nil
}

func pullImage(ctx context.Context, s *Session, ci *common.ContainerdInstance, image string) error {
	stream, err := s.Talos.ImageClient.Pull(ctx, &machineapi.ImageServicePullRequest{Containerd: ci, ImageRef: image})
	if err != nil {
		return err
	}
	for {
		_, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

func lifecycleUpgrade(ctx context.Context, s *Session, ci *common.ContainerdInstance, image string) error {
	stream, err := s.Talos.LifecycleClient.Upgrade(ctx, &machineapi.LifecycleServiceUpgradeRequest{
		Containerd: ci, Source: &machineapi.InstallArtifactsSource{ImageName: image}})
	if err != nil {
		return err
	}
	var lastMsg string
	exit := int32(-1)
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		switch r := resp.GetProgress().GetResponse().(type) {
		case *machineapi.LifecycleServiceInstallProgress_Message:
			lastMsg = r.Message
		case *machineapi.LifecycleServiceInstallProgress_ExitCode:
			exit = r.ExitCode
		}
	}
	if exit != 0 {
		return fmt.Errorf("installer exited with code %d (last message: %q)", exit, lastMsg)
	}
	return nil
}

// StartRollback asks a node to boot its previous Talos version.
func StartRollback(ctx context.Context, s *Session, n Node) error {
	if _, err := s.Talos.MachineClient.Rollback(client.WithNode(ctx, n.Address), &machineapi.RollbackRequest{}); err != nil {
		return fmt.Errorf("rollback %s: %w", n.Name, err)
	}
	return nil
}

// GateUntil runs the gate until it passes or within runs out and returns the
// last result. Between nodes a freshly rebooted node needs a moment (kubelet
// Ready, etcd caught up); the gate is the judge, this only gives it time.
func GateUntil(ctx context.Context, c *Clients, inv Inventory, opts GateOptions, within time.Duration) *GateResult {
	deadline := time.Now().Add(within)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		res := Gate(ctx, c, inv, opts)
		if res.Passed || time.Now().After(deadline) || ctx.Err() != nil {
			return res
		}
		select {
		case <-ctx.Done():
			return res
		case <-tick.C:
		}
	}
}

// TalosDriftNote is rule R18's drift report after a roll: declared
// (Terraform talos_version) vs running versions, and the exact change to
// make — only once every node runs the target.
func TalosDriftNote(clusterName string, declared map[string]string, running map[string]string, target Release, schematic string) []string {
	var behind []string
	for node, v := range running {
		if v != target.String() {
			behind = append(behind, node+" ("+v+")")
		}
	}
	decl := declared[DeclaredTalosVersion]
	if len(behind) > 0 {
		return []string{fmt.Sprintf("📝 Terraform: keep talos_version at %s for %s: not every node runs %s yet (%s). Do not bump it until they do (R18).",
			orUnknown(decl), clusterName, target, strings.Join(behind, ", "))}
	}
	if decl == target.String() {
		return []string{fmt.Sprintf("📝 Terraform: talos_version is already %s for %s; no drift.", target, clusterName)}
	}
	lines := []string{
		fmt.Sprintf("📝 Terraform drift (R18): %s declares talos_version = %q but every node runs %s. Change terraform/variables_talos.tf: talos_version = %q.",
			clusterName, orUnknown(decl), target, target.String()),
	}
	if schematic != "" {
		lines = append(lines, fmt.Sprintf("📝 Before applying: download https://factory.talos.dev/image/%s/%s/nocloud-amd64.iso, verify its checksum and upload it to the ISO file id every node declares.", schematic, target))
	}
	lines = append(lines, "📝 Then run tofu plan: if it replaces talos_machine_secrets or any VM, stop (R5); apply only after every node runs the declared version.")
	return lines
}

func orUnknown(s string) string {
	if s == "" {
		return "(not declared)"
	}
	return s
}

// RefusalPlan turns a *RuleError into a refused plan (nothing will run) and
// passes any other error through, for plugins' Plan methods.
func RefusalPlan(err error) (*lifecyclev1.OperationPlan, error) { return sdk.RefusalPlan(err) }
