// Command talosbot-plugins is the multi-call binary of talosbot's built-in
// plugins. The bot (talosbot serve) starts it as `talosbot-plugins plugin
// NAME`, one subprocess per plugin, and talks gRPC to it (hashicorp/go-plugin).
// It holds everything that talks to a cluster (client-go, Talos machinery,
// etcd), so the long-running bot process links none of it.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/talosbot/talosbot/internal/version"
)

// exitError carries a process exit code (2 for bad input).
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func main() {
	if err := newRoot().Execute(); err != nil {
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
		Use:   "talosbot-plugins",
		Short: "talosbot's built-in plugins (started by talosbot serve, not by people)",
		Long: `talosbot-plugins holds talosbot's built-in lifecycle plugins. Install it next to
the talosbot binary (the same directory), or point TALOSBOT_PLUGINS_BIN at it:
talosbot serve starts one "talosbot-plugins plugin NAME" subprocess per plugin on
first use.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version.Version,
	}
	root.SetVersionTemplate(version.String() + "\n")
	root.AddCommand(newPluginCmd(), newManifestsCmd(), newVersionCmd())
	return root
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "version",
		Short:   "Print the version",
		Example: "  talosbot-plugins version",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintln(cmd.OutOrStdout(), version.String())
			return nil
		},
	}
}
