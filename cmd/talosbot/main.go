// Command talosbot runs the Talos Linux cluster lifecycle from chat.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/talosbot/talosbot/internal/version"
)

// exitError carries a process exit code (2 for bad input, as config check uses).
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func main() {
	root := newRoot()
	if err := root.Execute(); err != nil {
		code := 1
		var ee *exitError
		if errors.As(err, &ee) {
			code = ee.code
		}
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(code)
	}
}

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:   "talosbot",
		Short: "Run the Talos Linux cluster lifecycle safely from Slack, Discord or a local console",
		Long: `talosbot plans Talos and Kubernetes lifecycle operations in plugins, asks for
approval where policy demands it, runs them node by node behind the health gate,
and records everything in a hash-chained audit trail.

Start with the demo (no tokens needed):
  make demo            # bin/talosbot-demo demo
Run the bot for real:
  talosbot config check --config /etc/talosbot/talosbot.yaml
  talosbot serve --config /etc/talosbot/talosbot.yaml`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version.Version,
	}
	root.SetVersionTemplate(version.String() + "\n")
	root.AddCommand(newServeCmd(), newAuditCmd(), newConfigCmd(), newVersionCmd())
	root.AddCommand(demoCommands()...) // demo and sim: only in the demo build (demo_cmds.go)
	return root
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "version",
		Short:   "Print the talosbot version",
		Example: "  talosbot version",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintln(cmd.OutOrStdout(), version.String())
			return nil
		},
	}
}
