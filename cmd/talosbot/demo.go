//go:build demo

package main

import (
	"github.com/spf13/cobra"
)

func newDemoCmd() *cobra.Command {
	var listen, dataDir string
	cmd := &cobra.Command{
		Use:   "demo [--listen 127.0.0.1:8080] [--data-dir DIR]",
		Short: "Run talosbot against two simulated clusters with a local web console (no tokens needed)",
		Long: `Start two simulated Talos clusters (staging: 1 control plane + 1 worker;
production: 3 control planes + 2 workers), the real plugins, the engine and the
web console, and print the URL to open. Everything it creates lives under the
data dir.`,
		Example: "  talosbot-demo demo\n  talosbot-demo demo --listen 127.0.0.1:9090 --data-dir /tmp/talosbot-demo",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runDemo(cmd.Context(), cmd.OutOrStdout(), listen, dataDir)
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:8080", "address for the console and APIs")
	cmd.Flags().StringVar(&dataDir, "data-dir", "", "where the demo keeps its state (default: a new temp dir)")
	return cmd
}
