package testenv

import (
	"os/exec"
	"syscall"
)

// setProcAttrs puts the apiserver in its own process group (so Stop can
// signal everything it started) and has the kernel kill it if the test
// binary dies without running its cleanups.
func setProcAttrs(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

func signalGroup(cmd *exec.Cmd, sig syscall.Signal) {
	if cmd.Process == nil {
		return
	}
	// Negative pid: the whole process group led by the apiserver.
	_ = syscall.Kill(-cmd.Process.Pid, sig)
}
