package sim

import (
	"fmt"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/compatibility"
)

// installerRun is what one run of an installer container in upgrade mode printed and how it
// exited.
type installerRun struct {
	lines    []string
	exitCode int32
}

// runInstaller is the installer of version target upgrading a host that runs version host: its
// pre-flight (cmd/installer/pkg/install/preflight.go, v1.13.9: the host's version from the
// machine API, compatibility.TalosVersion.UpgradeableFrom) and, if that passes, the install.
// A failed pre-flight makes the installer print "pre-flight checks failed: …" to stderr and exit
// 1 (cmd/installer/cmd/installer/root.go, Execute) before it touches a disk. The check is
// machinery's compatibility package (the version go.mod pins), the table the installer of each
// version carries for its own minor.
func runInstaller(host, target, image string) installerRun {
	run := installerRun{lines: []string{"running pre-flight checks", "host Talos version: " + host}}

	err := preflight(host, target)
	if err != nil {
		run.lines = append(run.lines, fmt.Sprintf("pre-flight checks failed: %v", err))
		run.exitCode = 1

		return run
	}

	run.lines = append(run.lines, "all pre-flight checks successful",
		"running installer "+image, "upgrading Talos to "+target, "writing boot entry for "+target)

	return run
}

// preflight is PreflightChecks.talosVersion: can an installer of target upgrade a host of host?
func preflight(host, target string) error {
	h, err := compatibility.ParseTalosVersion(&machineapi.VersionInfo{Tag: host})
	if err != nil {
		return fmt.Errorf("error parsing host Talos version: %w", err)
	}

	t, err := compatibility.ParseTalosVersion(&machineapi.VersionInfo{Tag: target})
	if err != nil {
		return fmt.Errorf("error parsing installer Talos version: %w", err)
	}

	return t.UpgradeableFrom(h)
}

// installerTask is the legacy upgrade sequence's "upgrade" task running the installer
// (internal/pkg/install/install.go, v1.12.6: a non-zero exit is `task "upgrade" failed: exit
// code N`, which fails the sequence). An image without a version the sim knows is left to the
// boot (switchVersion says so).
func (n *node) installerTask(image string) error {
	target, ok := n.c.images.version(image)
	if !ok {
		return nil
	}

	run := runInstaller(n.talosVersion(), target, image)
	for _, l := range run.lines {
		n.c.log.Info("installer", "node", n.info.Name, "line", l)
	}

	if run.exitCode != 0 {
		return fmt.Errorf("task %q failed: exit code %d", "upgrade", run.exitCode)
	}

	return nil
}
