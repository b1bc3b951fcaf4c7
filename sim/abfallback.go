package sim

import (
	"context"
	"errors"
	"fmt"
	"time"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
)

// This file is Talos's A/B fallback after an upgrade whose new image does not boot (fault
// bootFailure), as Talos v1.13.9 does it:
//   - the node reboots into the new entry and the new version's boot sequence fails;
//   - machined's handle (internal/app/machined/main.go) logs the error and calls
//     revertBootloader (internal/app/machined/revert.go): the META "upgrade" tag names the
//     previous label, the bootloader's default flips back to it (bootloader Revert) and the
//     tag is deleted;
//   - it counts down "rebooting in N seconds" from 10 and reboots;
//   - the machine boots the old entry: the old version, a third boot id.
//
// So a client following the node sees two new boot ids, a failed boot sequence on the new
// version in between, and the node running and ready on the old version at the end. The
// events of the failed boot are gone after the second reboot (machined keeps them in memory).

// abFallback is a pending failed boot: the node falls back from to to from.
type abFallback struct {
	from, to, image string
}

// errBootFailed is the new version's boot failure (fault bootFailure).
var errBootFailed = errors.New("failed to mount the EPHEMERAL partition: the new image does not boot (sim fault bootFailure)")

// failBoot runs a pending A/B fallback and reports whether it did: the failed boot on the new
// version, the revert, the countdown, the reboot and the boot of the old version.
func (n *node) failBoot(ctx context.Context) bool {
	n.mu.Lock()
	fb := n.fallback
	n.fallback = nil

	if fb == nil {
		n.mu.Unlock()

		return false
	}

	// The new entry boots: its version answers, with a new boot id (switchVersion set it),
	// and what its entry carries.
	n.version = fb.to
	old := n.currentLandingLocked()
	n.installLandingLocked(fb.image, fb.to)
	from := n.state
	n.state = stateRunning
	unreachable := n.fault.Unreachable
	n.mu.Unlock()

	n.transition(from, stateRunning) // observe.go: up on the new version, until the revert

	n.logs.booted(n)

	if !unreachable {
		n.serveFront()
	}

	n.emitStage(machineapi.MachineStatusEvent_BOOTING, false)

	err := n.runSequence(ctx, "", seqBoot, false, machineapi.MachineStatusEvent_BOOTING, func() []phase {
		return []phase{
			ph("memorySizeCheck", noop("memorySizeCheck")),
			ph("diskSizeCheck", noop("diskSizeCheck")),
			ph("env", noop("setUserEnvVars"), noop("waitForCARoots")),
			ph("dbus", noop("startDBus")),
			ph("ephemeral", task{name: "mountEphemeralPartition", run: func(context.Context) error { return errBootFailed }}),
		}
	})
	if ctx.Err() != nil {
		return true
	}

	// handle: log the error, revert the bootloader, count down, reboot.
	n.logs.service("machined", fmt.Sprint(err))
	n.logs.service("machined", fmt.Sprintf("reverting failed upgrade, switching to %q", "A"))
	n.emitStage(machineapi.MachineStatusEvent_REBOOTING, false)

	for i := int(fatalRebootDelay / time.Second); i >= 0; i-- {
		n.logs.service("machined", fmt.Sprintf("rebooting in %d seconds", i))

		if i == 0 {
			break
		}

		t := time.NewTimer(time.Second)

		select {
		case <-ctx.Done():
			t.Stop()

			return true
		case <-t.C:
		}
	}

	n.events.publish("", &machineapi.RestartEvent{Cmd: 0x1234567})
	n.goDown(ctx)
	n.gate.refusing(!n.currentFault().Unreachable)

	if !n.waitReturn(ctx) {
		return true
	}

	// The old entry boots: the version and what its entry carries are the old ones.
	n.mu.Lock()
	n.version = fb.from
	n.land = old
	n.bootID = newUUID()
	n.bootedAt = n.c.now()
	n.mu.Unlock()

	n.comeUp(ctx, "")

	return true
}
