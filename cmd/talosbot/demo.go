//go:build demo

package main

import (
	"time"

	"github.com/spf13/cobra"
)

// demoRebootDelay is how long a simulated node stays down while it reboots in
// the demo: long enough to watch a roll node by node (a real node takes
// minutes; the tests' clusters take a fraction of a second).
const demoRebootDelay = 8 * time.Second

func newDemoCmd() *cobra.Command {
	var o demoOptions
	cmd := &cobra.Command{
		Use:   "demo [--listen 127.0.0.1:8080] [--data-dir DIR] [--keep] [--reboot-delay 8s]",
		Short: "Run talosbot against two simulated clusters with a local web console (no tokens needed)",
		Long: `Start two simulated Talos clusters (staging: 1 control plane + 1 worker;
production: 3 control planes + 2 workers), the real plugins, the engine and the
web console, and print the URL to open. Everything it creates lives under the
data dir, which is removed when the demo stops (Ctrl-C) unless --keep is given;
a --data-dir that existed before the demo is never removed.`,
		Example: "  talosbot-demo demo\n  talosbot-demo demo --listen 127.0.0.1:9090 --data-dir /tmp/talosbot-demo --keep\n  make demo DEMO_ARGS='--listen 127.0.0.1:9090 --reboot-delay 20s'",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runDemo(cmd.Context(), cmd.OutOrStdout(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.listen, "listen", "127.0.0.1:8080", "loopback address for the console and APIs")
	f.StringVar(&o.dataDir, "data-dir", "", "where the demo keeps its state (default: a new temp dir)")
	f.BoolVar(&o.keep, "keep", false, "keep the data dir when the demo stops (state, audit trail, snapshots)")
	f.DurationVar(&o.rebootDelay, "reboot-delay", demoRebootDelay, "how long a simulated node stays down while it reboots")
	return cmd
}
