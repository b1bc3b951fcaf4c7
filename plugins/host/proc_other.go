//go:build !linux

package host

import "os/exec"

// dieWithParent has no portable equivalent outside Linux; plugins there
// notice the bot's exit only when their gRPC connection breaks.
func dieWithParent(*exec.Cmd) {}
