package sim

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	"github.com/cosi-project/runtime/pkg/resource/meta"
	"github.com/siderolabs/talos/pkg/machinery/extensions"
	"github.com/siderolabs/talos/pkg/machinery/imager/quirks"
	"github.com/siderolabs/talos/pkg/machinery/kernel"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
)

// This file is what a node publishes that proves which image it booted (issue 28 item 6):
// the schematic id (ExtensionStatus "schematic"), the kernel command line (KernelCmdline) and
// the booted boot entry (BootedEntry), and the faults that make a node land something else
// than its installer: another schematic, or the machine config's extra kernel arguments left
// out. docs/SIMULATOR.md, "Landing", cites each.

// landing is what the node's current boot entry carries; prev is the other (A/B) entry.
type landing struct {
	schematic string // "" for an installer that is not from Image Factory
	cmdline   string
	entry     string // BootedEntry: sd-boot's entry file, "Talos-<version>.efi"

	prev *landing
}

// factorySchematic is the schematic id in an Image Factory installer reference
// (factory.talos.dev/<platform>-installer/<id>:<version>, or …/installer/<id>:…).
var factorySchematic = regexp.MustCompile(`/[a-z0-9-]*installer(?:-secureboot)?/([0-9a-f]{64})(?:[:@]|$)`)

// schematicOf is the schematic an installer image carries: Image Factory builds the schematic
// into the image as an extension named "schematic" whose version is the id; other installers
// (ghcr.io/siderolabs/installer) carry none.
func schematicOf(image string) string {
	if m := factorySchematic.FindStringSubmatch(image); m != nil {
		return m[1]
	}

	return ""
}

// bootEntryName is sd-boot's UKI file name for a version (Talos v1.13.9
// internal/app/machined/pkg/runtime/v1alpha1/bootloader/sdboot/sdboot.go: "Talos-%s.efi").
func bootEntryName(version string) string { return "Talos-" + version + ".efi" }

// kernelCmdline is the command line a node boots with: the platform and console, Talos's
// default arguments for the version (pkg/machinery/kernel DefaultArgs), then the machine
// config's machine.install.extraKernelArgs, which the installer writes into the boot entry.
// dropExtra leaves them out (fault kernelArgsNotApplied).
func kernelCmdline(rawConfig []byte, version string, dropExtra bool) string {
	args := append([]string{"talos.platform=nocloud", "console=ttyS0"}, kernel.DefaultArgs(quirks.New(version))...)

	if !dropExtra {
		var cc configCache
		if cfg, err := cc.get(rawConfig); err == nil && cfg.Machine() != nil {
			args = append(args, cfg.Machine().Install().ExtraKernelArgs()...)
		}
	}

	return strings.Join(args, " ")
}

// currentLandingLocked returns the node's landing, set up on first use from the version and
// config it started with. Callers hold n.mu.
func (n *node) currentLandingLocked() *landing {
	if n.land == nil {
		n.land = &landing{schematic: n.info.Schematic, cmdline: kernelCmdline(n.config, n.version, false), entry: bootEntryName(n.version)}
	}

	return n.land
}

// landImageLocked makes the entry of an installed image the booted one: its schematic (or the
// fault's), its command line (without the extra arguments under kernelArgsNotApplied) and
// its entry name. Callers hold n.mu; cmdline was computed without it.
func (n *node) landImageLocked(image, version, cmdline string) {
	cur := n.currentLandingLocked()
	next := &landing{schematic: schematicOf(image), cmdline: cmdline, entry: bootEntryName(version),
		prev: &landing{schematic: cur.schematic, cmdline: cur.cmdline, entry: cur.entry}}

	if n.fault.LandSchematic != "" {
		next.schematic = n.fault.LandSchematic
	}

	n.land = next
}

// swapLandingLocked is a rollback: the other entry boots.
func (n *node) swapLandingLocked() {
	cur := n.currentLandingLocked()
	if cur.prev == nil {
		return
	}

	n.land = &landing{schematic: cur.prev.schematic, cmdline: cur.prev.cmdline, entry: cur.prev.entry,
		prev: &landing{schematic: cur.schematic, cmdline: cur.cmdline, entry: cur.entry}}
}

// landingResourceTypes are the resource types this file serves.
func landingResourceTypes() []meta.ResourceWithRD {
	return []meta.ResourceWithRD{&runtime.ExtensionStatus{}, &runtime.KernelCmdline{}, &runtime.BootedEntry{}}
}

// landingResources follows runtime.ExtensionStatusController (one ExtensionStatus per layer of
// the image's extensions; Image Factory's "schematic" layer carries the id as its version),
// runtime.KernelCmdlineController (/proc/cmdline) and runtime.BootedEntryController (the
// sd-boot entry the node booted).
func (n *node) landingResources() []desiredResource {
	n.mu.Lock()
	l := *n.currentLandingLocked()
	n.mu.Unlock()

	var out []desiredResource

	if l.schematic != "" {
		ext := runtime.NewExtensionStatus(runtime.NamespaceName, "0")
		ext.TypedSpec().Image = "000.schematic.sqsh"
		ext.TypedSpec().Metadata = extensions.Metadata{Name: "schematic", Version: l.schematic,
			Author: "Image Factory", Description: "This extension is used to identify the schematic"}
		out = append(out, desiredResource{res: ext, owner: "runtime.ExtensionStatusController"})
	}

	cl := runtime.NewKernelCmdline()
	cl.TypedSpec().Cmdline = l.cmdline
	out = append(out, desiredResource{res: cl, owner: "runtime.KernelCmdlineController"})

	be := runtime.NewBootedEntrySpec()
	be.TypedSpec().BootedEntry = l.entry
	out = append(out, desiredResource{res: be, owner: "runtime.BootedEntryController"})

	return out
}

// installLandingLocked is called where a reboot switches to an installed image. Callers
// hold n.mu.
func (n *node) installLandingLocked(image, version string) {
	n.landImageLocked(image, version, kernelCmdline(n.config, version, n.fault.KernelArgsNotApplied))
}

// landingFaultError validates the landing faults for Inject.
func landingFaultError(f Fault) error {
	if f.LandSchematic != "" && !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(f.LandSchematic) {
		return fmt.Errorf("sim: landSchematic %q is not a schematic id (64 lowercase hex digits)", f.LandSchematic)
	}

	return unmetConditionsError(f.UnmetConditions)
}

// Landing is what a node's current boot carries (for tests and the control API).
type Landing struct {
	Schematic   string `json:"schematic"`
	Cmdline     string `json:"cmdline"`
	BootedEntry string `json:"bootedEntry"`
}

// NodeLanding returns what the named node booted.
func (c *Cluster) NodeLanding(_ context.Context, name string) (Landing, error) {
	n, err := c.node(name)
	if err != nil {
		return Landing{}, err
	}

	n.mu.Lock()
	defer n.mu.Unlock()

	l := n.currentLandingLocked()

	return Landing{Schematic: l.schematic, Cmdline: l.cmdline, BootedEntry: l.entry}, nil
}
