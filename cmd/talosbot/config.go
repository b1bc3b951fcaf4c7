package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/talosbot/talosbot/config"
)

func newConfigCmd() *cobra.Command {
	cfg := &cobra.Command{
		Use:   "config",
		Short: "Work with the talosbot configuration file",
	}
	var path string
	check := &cobra.Command{
		Use:   "check --config FILE",
		Short: "Validate a configuration file and list every error with its path",
		Long: `Validate a configuration file without starting anything. Every problem is listed
with its location, e.g.
  clusters[1].nodes[2].address: "10.0.20" is not an IP address
and the command exits 2. Secrets are never read or printed: only the form of
their references (env:NAME, file:/path) is checked.`,
		Example: "  talosbot config check --config deploy/examples/talosbot.yaml",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := config.Load(path)
			if err != nil {
				return &exitError{code: 2, err: err}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: OK (%d clusters: %v)\n", path, len(c.Clusters), c.ClusterNames())
			return nil
		},
	}
	check.Flags().StringVar(&path, "config", "", "configuration file (YAML)")
	_ = check.MarkFlagRequired("config")
	cfg.AddCommand(check)
	return cfg
}
