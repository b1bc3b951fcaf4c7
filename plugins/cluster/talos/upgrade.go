package talos

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

	"github.com/talosbot/talosbot/plugins/cluster"
	"github.com/talosbot/talosbot/plugins/cluster/etcd"
	"github.com/talosbot/talosbot/plugins/cluster/identity"
	"github.com/talosbot/talosbot/plugins/cluster/k8s"
	"github.com/talosbot/talosbot/plugins/sdk"
)

// DefaultNodeTimeout bounds one node's upgrade or rollback (reboot included)
// when settings.node_timeout_ms is unset.
const DefaultNodeTimeout = 10 * time.Minute

// NodeTimeout reads settings.node_timeout_ms (default DefaultNodeTimeout).
func NodeTimeout(s sdk.Settings) time.Duration {
	if ms := s.NodeTimeoutMs; ms > 0 {
		return time.Duration(ms) * time.Millisecond
	}
	return DefaultNodeTimeout
}

// EtcdLeader returns the name of the agreed etcd leader ("" when there is
// none or the members disagree).
func EtcdLeader(ctx context.Context, c *cluster.Clients, ids *identity.Map) string {
	return etcd.ReadQuorum(ctx, c, ids).Leader
}

// UpgradeOrder is rules R15 and R16 as an order: workers one at a time in
// inventory order, then control planes one at a time with the etcd leader
// last (one leader election, at the very end, instead of one per node).
func UpgradeOrder(inv cluster.Inventory, leader string) []cluster.Node {
	out := inv.Workers() // rule:R15-order
	var last []cluster.Node
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
	// (writes the new boot entry), a client-side cordon and drain
	// (k8s.io/kubectl/pkg/drain, as talosctl), then Reboot (hosts at v1.13
	// or later).
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
	Node cluster.Node
	// KubeNode is the node's Kubernetes Node name (identity.Map.KubeNode):
	// what is cordoned and drained. Empty: no Kubernetes drain.
	KubeNode string
	From, To Release
	Image    string
	// Pulled: the installer is already on the node (PullInstaller before
	// the roll's first cordon), so it is not pulled again.
	Pulled bool
}

// UpgradeOptions tune StartUpgrade.
type UpgradeOptions struct {
	// Drain tunes the client-side drain (v1.13+ path).
	Drain k8s.DrainOptions
	// Log hears progress lines.
	Log func(msg string)
	// Pull bounds a pull (or, on the legacy path, the Upgrade call Talos pulls in) that makes
	// no progress; its Log defaults to Log.
	Pull PullOptions
}

// Progress is how far StartUpgrade took a node: after a failure it says what
// state the node was left in.
type Progress struct {
	// Installed: the node accepted the new version. On the v1.13 path it is
	// the default boot entry (LifecycleService.Upgrade finished); on the
	// legacy path Talos runs its upgrade sequence from here.
	Installed bool
	// Cordoned: the bot cordoned the Kubernetes Node (v1.13 path) and must
	// uncordon it, or say it is still cordoned.
	Cordoned bool
	// Drained: every pod the drain evicts is gone.
	Drained bool
	// Rebooting: the node was asked to reboot into the new version.
	Rebooting bool
	// Actor is the request's actor id, for TrackOptions.Actor.
	Actor string
}

// PullInstaller pulls the installer image on a v1.13+ node
// (ImageService.Pull into the system containerd), as talosctl upgrade does
// before it installs. A roll pulls on every node before its first cordon,
// so a registry failure stops it before any node is touched.
func PullInstaller(ctx context.Context, s *cluster.Session, n cluster.Node, image string, o PullOptions) error {
	if err := pullImage(client.WithNode(ctx, n.Address), s, systemContainerd(), image, o); err != nil {
		return fmt.Errorf("pull %s on %s: %w", image, n.Name, err)
	}
	return nil
}

func systemContainerd() *common.ContainerdInstance {
	return &common.ContainerdInstance{Driver: common.ContainerDriver_CRI, Namespace: common.ContainerdNamespace_NS_SYSTEM}
}

// StartUpgrade sets one node's upgrade in motion and returns once the node
// is on its way to a reboot; TrackReboot follows it from there. The
// returned Progress is never nil and says how far it got, also on error.
//
// Legacy hosts (before v1.13) get MachineService.Upgrade with preserve left
// false, as talosctl sends it: Talos then takes the cluster's etcd upgrade
// mutex and runs ValidateForUpgrade on a control plane itself, so a
// concurrent upgrader (another bot, a person with talosctl) is refused by
// Talos too. v1.13+ hosts follow talosctl upgrade: pull (unless Pulled),
// LifecycleService.Upgrade, cordon and drain (kubectl's drain), Reboot.
func StartUpgrade(ctx context.Context, s *cluster.Session, u NodeUpgrade, opts UpgradeOptions) (*Progress, error) {
	logf := func(format string, a ...any) {
		if opts.Log != nil {
			opts.Log(fmt.Sprintf(format, a...))
		}
	}
	p := &Progress{}
	nctx := client.WithNode(ctx, u.Node.Address)
	if opts.Pull.Log == nil && opts.Log != nil {
		opts.Pull.Log = func(msg string) { opts.Log(u.Node.Name + ": " + msg) }
	}
	if MechanicsFor(u.From) == MechanicsLegacy {
		resp, err := legacyUpgrade(nctx, s, u.Image, opts.Pull)
		if err != nil {
			return p, fmt.Errorf("upgrade %s (legacy Upgrade API): %w", u.Node.Name, err)
		}
		p.Installed, p.Rebooting = true, true
		if len(resp.GetMessages()) > 0 {
			p.Actor = resp.GetMessages()[0].GetActorId()
		}
		logf("%s: upgrade to %s requested (legacy Upgrade API: Talos takes its upgrade mutex, checks etcd, cordons and drains)", u.Node.Name, u.Image)
		return p, nil
	}

	// Never reboot a v1.13+ node undrained: without a configured kubeconfig, drain with the
	// one Talos serves, as talosctl does; without either, stop before anything is installed.
	if u.KubeNode == "" {
		return p, fmt.Errorf("%s was not touched: its Kubernetes Node name is unknown (k8s.Nodename unreadable), so it cannot be drained before its reboot", u.Node.Name)
	}
	kube, err := s.DrainKube(ctx)
	if err != nil {
		return p, fmt.Errorf("%s cannot be drained, so it was not touched (a v1.13+ node is drained by the client before its reboot): %w", u.Node.Name, err)
	}
	if s.Kube == nil {
		logf("%s: no kubeconfig configured: draining with the kubeconfig the Talos API serves (held in memory only)", u.Node.Name)
	}
	containerd := systemContainerd()
	if !u.Pulled {
		if err := pullImage(nctx, s, containerd, u.Image, opts.Pull); err != nil {
			return p, fmt.Errorf("pull %s on %s: %w", u.Image, u.Node.Name, err)
		}
		logf("%s: pulled %s", u.Node.Name, u.Image)
	}
	err = lifecycleUpgrade(nctx, s, containerd, u.Image)
	if installerGone(err) {
		// Pulled at the start of the roll and gone since: Talos's image GC removes an
		// installer nothing uses an hour after it first sees it (image_gc.go), and a roll
		// reaches its later nodes that late. Pull it again and install once more.
		logf("%s: the installer pulled earlier is gone from containerd (Talos's image GC removes an unused image after an hour); pulling %s again", u.Node.Name, u.Image)
		if perr := pullImage(nctx, s, containerd, u.Image, opts.Pull); perr != nil {
			return p, fmt.Errorf("pull %s again on %s (it was gone from containerd: %v): %w", u.Image, u.Node.Name, err, perr)
		}
		err = lifecycleUpgrade(nctx, s, containerd, u.Image)
	}
	if err != nil {
		return p, fmt.Errorf("install %s on %s (LifecycleService.Upgrade): %w", u.Image, u.Node.Name, err)
	}
	p.Installed = true
	logf("%s: %s installed as the default boot entry; it becomes active at the next reboot", u.Node.Name, u.To)
	if err := k8s.Cordon(ctx, kube, u.KubeNode); err != nil {
		return p, err
	}
	p.Cordoned = true
	logf("%s: Kubernetes node %s cordoned", u.Node.Name, u.KubeNode)
	if err := k8s.Drain(ctx, kube, u.KubeNode, opts.Drain); err != nil {
		return p, err
	}
	p.Drained = true
	logf("%s: Kubernetes node %s drained", u.Node.Name, u.KubeNode)
	resp, err := s.Talos.MachineClient.Reboot(nctx, &machineapi.RebootRequest{})
	if err != nil {
		return p, fmt.Errorf("reboot %s into %s: %w", u.Node.Name, u.To, err)
	}
	p.Rebooting = true
	if len(resp.GetMessages()) > 0 {
		p.Actor = resp.GetMessages()[0].GetActorId()
	}
	return p, nil
}

// legacyUpgrade is MachineService.Upgrade, in which Talos pulls and validates the installer
// before it answers: a registry it cannot reach holds the call for up to 20 minutes. The wait is
// reported as a pull's is, and bounded by the same no-progress limit.
func legacyUpgrade(ctx context.Context, s *cluster.Session, image string, o PullOptions) (*machineapi.UpgradeResponse, error) {
	if o.Stall <= 0 {
		o.Stall = PullStall(sdk.Settings{})
	}
	start := time.Now()
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, o.Stall)
	defer cancel()
	type answer struct {
		resp *machineapi.UpgradeResponse
		err  error
	}
	done := make(chan answer, 1)
	go func() {
		//nolint:staticcheck // the legacy API is the only one hosts before v1.13 serve
		resp, err := s.Talos.MachineClient.Upgrade(ctx, &machineapi.UpgradeRequest{Image: image})
		done <- answer{resp, err}
	}()
	report := time.NewTicker(reportEvery(o.Stall))
	defer report.Stop()
	for {
		select {
		case a := <-done:
			// Our own limit, not the caller's deadline or cancellation.
			if a.err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) && parent.Err() == nil {
				return nil, fmt.Errorf("%w for %s: Talos pulls and validates %s before it answers the legacy Upgrade call, and retries a registry it cannot reach for up to %s; check that the node reaches the registry, or raise timeouts.node",
					ErrPullStalled, o.Stall, image, TalosPullTimeout)
			}
			return a.resp, a.err
		case <-report.C:
			if o.Log != nil {
				o.Log(fmt.Sprintf("still waiting for Talos to pull and validate %s (%s so far; Talos retries a registry it cannot reach for up to %s); the bot gives up after %s",
					image, time.Since(start).Round(time.Second), TalosPullTimeout, o.Stall))
			}
		}
	}
}

func lifecycleUpgrade(ctx context.Context, s *cluster.Session, ci *common.ContainerdInstance, image string) error {
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
func StartRollback(ctx context.Context, s *cluster.Session, n cluster.Node) error {
	if _, err := s.Talos.MachineClient.Rollback(client.WithNode(ctx, n.Address), &machineapi.RollbackRequest{}); err != nil {
		return fmt.Errorf("rollback %s: %w", n.Name, err)
	}
	return nil
}

// DriftNote is rule R18's drift report after a roll: declared
// (Terraform talos_version) vs running versions, and the exact change to
// make — only once every node runs the target.
func DriftNote(clusterName string, declared map[string]string, running map[string]string, target Release, schematic string) []string {
	var behind []string
	for node, v := range running {
		if v != target.String() {
			behind = append(behind, node+" ("+v+")")
		}
	}
	decl := declared[DeclaredVersion]
	if len(behind) > 0 { // rule:R18
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
