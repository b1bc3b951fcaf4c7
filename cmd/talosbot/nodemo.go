//go:build !demo

package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

// demoCommands in the production build: demo and sim exist only in the demo
// build (demo_cmds.go). They remain as hidden commands that say where to
// find them, so an old habit gets an answer instead of "unknown command".
func demoCommands() []*cobra.Command {
	moved := func(name string) *cobra.Command {
		return &cobra.Command{
			Use:                name,
			Short:              "Only in the demo build: bin/talosbot-demo " + name,
			Hidden:             true,
			DisableFlagParsing: true,
			RunE: func(*cobra.Command, []string) error {
				return &exitError{code: 2, err: fmt.Errorf("this talosbot is the production build, without the simulator; %q is in the demo build: run `make demo`, or `bin/talosbot-demo %s` after `make build`", name, name)}
			},
		}
	}
	return []*cobra.Command{moved("demo"), moved("sim")}
}
