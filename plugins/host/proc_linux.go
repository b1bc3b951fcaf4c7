//go:build linux

package host

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes the kernel kill the plugin when the bot dies, even by
// SIGKILL. Without it an orphaned plugin would carry on with a rolling
// upgrade that nobody tracks, while the restarted bot marks the operation
// interrupted and may resume it: two writers on one cluster.
func dieWithParent(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}
