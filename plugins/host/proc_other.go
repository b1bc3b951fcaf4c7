//go:build !linux

package host

import (
	"fmt"
	"os"
	"os/exec"
)

// isolate has no portable equivalent outside Linux; plugins there notice
// the bot's exit only when their gRPC connection breaks, and a kill reaches
// the plugin process only, not what it started.
func isolate(*exec.Cmd) {}

// killProcessGroup is a no-op outside Linux (see isolate).
func killProcessGroup(int) error { return nil }

// openExecutable opens the executable for the checksum; outside Linux it is
// executed by its path (no /proc/self/fd), so a swap after the check is not
// excluded there.
func openExecutable(p *managed) (*os.File, string, error) {
	f, err := openRegular(p.path)
	if err != nil {
		return nil, "", fmt.Errorf("plugin %q (%s): cannot open the executable: %w; check the plugin path in the config", p.name, p.path, err)
	}
	return f, p.path, nil
}

// execsVerifiedFile: outside Linux the path is executed, so go-plugin's
// SecureConfig checks the path again right before exec.
const execsVerifiedFile = false

// statID gives no fileID outside Linux: os.FileInfo has no portable ctime,
// so verifications are not remembered there.
func statID(*os.File) (fileID, bool) { return fileID{}, false }
