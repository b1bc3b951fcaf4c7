//go:build !linux

package host

import "os/exec"

// isolate has no portable equivalent outside Linux; plugins there notice
// the bot's exit only when their gRPC connection breaks, and a kill reaches
// the plugin process only, not what it started.
func isolate(*exec.Cmd) {}

// killProcessGroup is a no-op outside Linux (see isolate).
func killProcessGroup(int) error { return nil }
