//go:build linux

package host

import (
	"errors"
	"os/exec"
	"syscall"
)

// isolate starts the plugin as the leader of its own process group, so that
// killing the plugin kills whatever it started too (killProcessGroup), and
// makes the kernel kill the plugin when the bot dies, even by SIGKILL.
// Without the group, a child that inherits the plugin's stderr outlives a
// kill and holds the pipe open, and go-plugin waits on that pipe forever.
// Without the death signal an orphaned plugin would carry on with a rolling
// upgrade that nobody tracks, while the restarted bot marks the operation
// interrupted and may resume it: two writers on one cluster.
func isolate(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}

// killProcessGroup sends SIGKILL to the process group that pid leads. The
// kernel keeps pid from being reused while any member of the group lives, so
// this is safe after the leader is reaped: it either reaches the plugin's
// leftover children or finds no group.
func killProcessGroup(pid int) error {
	if pid <= 0 {
		return nil
	}
	if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	return nil
}
