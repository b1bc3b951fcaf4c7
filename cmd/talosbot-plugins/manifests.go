package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/talosbot/talosbot/plugins/builtin"
)

func newManifestsCmd() *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "manifests [-o FILE]",
		Short: "Print the built-in plugins' manifests as JSON (the source of plugins/catalog)",
		Long: `Print every built-in plugin's manifest (its commands, arguments and effects) as
a JSON array. "go generate ./plugins/catalog" writes it to
plugins/catalog/manifests.json, which the bot embeds to build its grammar without
linking plugin code; a test fails when that file is stale.`,
		Example: "  talosbot-plugins manifests\n  talosbot-plugins manifests -o plugins/catalog/manifests.json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b, err := builtin.ManifestsJSON(cmd.Context())
			if err != nil {
				return err
			}
			if out == "" {
				_, err = cmd.OutOrStdout().Write(b)
				return err
			}
			if err := os.WriteFile(out, b, 0o644); err != nil {
				return fmt.Errorf("write the manifests: %w", err)
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&out, "output", "o", "", "write to FILE instead of stdout")
	return cmd
}
