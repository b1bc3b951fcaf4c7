//go:build demo

package main

import "github.com/spf13/cobra"

// demoCommands are the subcommands that run the simulator (sim, and
// internal/testenv for a kube-apiserver). They are built only with -tags demo
// (bin/talosbot-demo, `make demo`), so the production binary links neither
// the simulator nor its embedded etcd.
func demoCommands() []*cobra.Command { return []*cobra.Command{newDemoCmd(), newSimCmd()} }
