package talos

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/talosbot/talosbot/plugins/cluster"
)

// This file is the proof that a node landed what the plan installed (issue 28 item 6): after
// the reboot the node runs the target version, the schematic of its installer, the kernel
// arguments its machine config declares, and boots the target's boot entry. Talos reports
// success for each of these when it did not happen: an A/B fallback comes back "running and
// ready" on the old version, LifecycleService.Upgrade drops machine.install.extraKernelArgs
// (siderolabs/talos#13967), an installer from another schematic boots without complaint.

// LandingPlan is what a node should run after its upgrade.
type LandingPlan struct {
	// Version is the target Talos version ("v1.13.9").
	Version string
	// Schematic is the Image Factory schematic id of the installer ("" for an installer not
	// from Image Factory: nothing to compare).
	Schematic string
	// KernelArgs are the machine config's machine.install.extraKernelArgs, which the installer
	// writes into the new boot entry.
	KernelArgs []string
}

// PlanLanding is the landing plan of one node's upgrade: the installer's schematic, and the
// extra kernel arguments read from the node's machine config now (before the upgrade). A
// config that cannot be read leaves the arguments unchecked and says why in unchecked.
func PlanLanding(ctx context.Context, s *cluster.Session, n cluster.Node, target Release, image string) (LandingPlan, string) {
	p := LandingPlan{Version: target.String()}
	if inst, err := ParseInstaller(image); err == nil && inst.Registry == FactoryRegistry {
		p.Schematic = inst.Schematic
	}
	cfg, err := cluster.MachineConfigOf(ctx, s.COSI, n.Address)
	if err != nil {
		return p, fmt.Sprintf("kernel arguments of %s not checked: %v", n.Name, err)
	}
	if m := cfg.Machine(); m != nil {
		p.KernelArgs = m.Install().ExtraKernelArgs()
	}
	return p, ""
}

// Landed is what a node booted, read from its resources.
type Landed struct {
	// Schematic is the version of the ExtensionStatus named "schematic" (Image Factory's
	// extension that identifies the schematic), "" without one.
	Schematic string
	// Cmdline is the KernelCmdline resource (/proc/cmdline).
	Cmdline string
	// BootedEntry is the BootedEntry resource (sd-boot's entry, "Talos-v1.13.9.efi"); ""
	// where Talos publishes none (GRUB: BootedEntryController only runs on UKI boots).
	BootedEntry string
}

// ReadLanded reads what node n booted: `talosctl get extensions`, `get kernelcmdline`,
// `get bootedentry`. It asks the node itself first (Session.NodeClient: right after a reboot
// the endpoint's apid may still be waiting out its reconnect backoff), then through the
// endpoints, and retries a node that does not answer for up to landingReadTimeout.
func ReadLanded(ctx context.Context, s *cluster.Session, n cluster.Node) (Landed, error) {
	var (
		l       Landed
		lastErr error
		direct  = true
	)
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, landingReadTimeout, true, func(ctx context.Context) (bool, error) {
		st, nctx := s.COSI, client.WithNode(ctx, n.Address)
		if direct {
			if dc, err := s.NodeClient(ctx, n); err == nil {
				defer dc.Close() //nolint:errcheck
				st, nctx = dc.COSI, ctx
			}
		}
		direct = !direct
		l, lastErr = readLanded(nctx, st, n)
		if lastErr != nil && status.Code(lastErr) == codes.Unavailable {
			return false, nil
		}
		return true, nil
	})
	if lastErr == nil && err != nil {
		lastErr = err
	}
	return l, lastErr
}

// landingReadTimeout bounds ReadLanded's retries of a node that does not answer.
const landingReadTimeout = 30 * time.Second

func readLanded(nctx context.Context, st state.State, n cluster.Node) (Landed, error) {
	var l Landed
	exts, err := safe.StateListAll[*runtime.ExtensionStatus](nctx, st)
	if err != nil {
		return l, fmt.Errorf("read the extensions of %s: %w", n.Name, err)
	}
	for e := range exts.All() {
		if e.TypedSpec().Metadata.Name == "schematic" {
			l.Schematic = e.TypedSpec().Metadata.Version
		}
	}
	cl, err := safe.StateGetByID[*runtime.KernelCmdline](nctx, st, runtime.KernelCmdlineID)
	if err != nil {
		return l, fmt.Errorf("read the kernel command line of %s: %w", n.Name, err)
	}
	l.Cmdline = cl.TypedSpec().Cmdline
	be, err := safe.StateGetByID[*runtime.BootedEntry](nctx, st, runtime.BootedEntryID)
	switch {
	case err == nil:
		l.BootedEntry = be.TypedSpec().BootedEntry
	case !state.IsNotFoundError(err):
		return l, fmt.Errorf("read the booted entry of %s: %w", n.Name, err)
	}
	return l, nil
}

// Differences names every way l differs from the plan, for chat and the record. Empty: the
// node landed.
func (p LandingPlan) Differences(l Landed) []string {
	var out []string
	if p.Schematic != "" && l.Schematic != p.Schematic {
		got := l.Schematic
		if got == "" {
			got = "none"
		}
		out = append(out, fmt.Sprintf("schematic %s, not the installer's %s", got, p.Schematic))
	}
	args := strings.Fields(l.Cmdline)
	var missing []string
	for _, a := range p.KernelArgs {
		if !slices.Contains(args, a) {
			missing = append(missing, a)
		}
	}
	if len(missing) > 0 {
		out = append(out, fmt.Sprintf("kernel arguments %s declared in machine.install.extraKernelArgs are not on the kernel command line", strings.Join(missing, " ")))
	}
	if l.BootedEntry != "" && !bootedEntryOf(l.BootedEntry, p.Version) {
		out = append(out, fmt.Sprintf("booted entry %s, not Talos-%s", l.BootedEntry, p.Version))
	}
	return out
}

// bootedEntryOf reports whether an sd-boot entry is the version's: "Talos-v1.13.9.efi", or
// "Talos-v1.13.9~2.efi" when the version was installed twice (Talos v1.13.9
// internal/app/machined/pkg/runtime/v1alpha1/bootloader/sdboot/sdboot.go).
func bootedEntryOf(entry, version string) bool {
	base := strings.TrimSuffix(entry, ".efi")
	return base == "Talos-"+version || strings.HasPrefix(base, "Talos-"+version+"~")
}

// LandingError is a node that runs the target version but not as planned.
type LandingError struct {
	Node, Version string
	Differences   []string
}

func (e *LandingError) Error() string {
	return fmt.Sprintf("%s came back on %s but did not land as planned: %s", e.Node, e.Version, strings.Join(e.Differences, "; "))
}

// CheckLanding reads what node n booted and compares it with the plan: nil when it landed, a
// *LandingError naming every difference otherwise.
func CheckLanding(ctx context.Context, s *cluster.Session, n cluster.Node, p LandingPlan) error {
	l, err := ReadLanded(ctx, s, n)
	if err != nil {
		return fmt.Errorf("prove that %s landed %s: %w", n.Name, p.Version, err)
	}
	if d := p.Differences(l); len(d) > 0 {
		return &LandingError{Node: n.Name, Version: p.Version, Differences: d}
	}
	return nil
}

// FallbackError is a node that came back on its old version after an upgrade: the new image
// did not boot and Talos fell back to the previous boot entry (machined's revertBootloader).
type FallbackError struct {
	Node, From, To string
	// BootedEntry is what the node booted, when Talos publishes it.
	BootedEntry string
	// Note is the failed boot's error when the tracker saw it.
	Note string
}

func (e *FallbackError) Error() string {
	s := fmt.Sprintf("%s came back on %s: the new image did not boot, Talos fell back", e.Node, e.From)
	var why []string
	if e.BootedEntry != "" {
		why = append(why, "booted entry "+e.BootedEntry)
	}
	if e.Note != "" {
		why = append(why, "the boot of "+e.To+" failed: "+e.Note)
	}
	if len(why) > 0 {
		s += " (" + strings.Join(why, "; ") + ")"
	}
	return s
}
