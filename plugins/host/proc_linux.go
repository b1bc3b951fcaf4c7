//go:build linux

package host

import (
	"errors"
	"fmt"
	"os"
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

// openExecutable opens the plugin's executable for a launch and returns the
// path that executes that open file (/proc/self/fd/N: in the child, between
// fork and exec, the descriptor is still open, as fexecve relies on). The
// checksum is taken from the same descriptor, so a file renamed over
// p.path after the check is never what runs.
func openExecutable(p *managed) (*os.File, string, error) {
	f, err := openRegular(p.path)
	if err != nil {
		return nil, "", fmt.Errorf("plugin %q (%s): cannot open the executable: %w; check the plugin path in the config", p.name, p.path, err)
	}
	return f, fmt.Sprintf("/proc/self/fd/%d", f.Fd()), nil
}

// execsVerifiedFile: a launch executes the descriptor it hashed, so a second
// check on the path (go-plugin's SecureConfig) would read the same inode.
const execsVerifiedFile = true

// statID reads the fields of fileID from the open file.
func statID(f *os.File) (fileID, bool) {
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return fileID{}, false
	}
	return fileID{
		dev: uint64(st.Dev), ino: st.Ino, size: st.Size,
		mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano(),
	}, true
}
