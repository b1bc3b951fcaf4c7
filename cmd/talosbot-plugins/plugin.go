package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/talosbot/talosbot/plugins/builtin"
	"github.com/talosbot/talosbot/plugins/sdk"
)

func newPluginCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "plugin NAME",
		Short: "Serve a built-in plugin over go-plugin (started by the bot, not by people)",
		Long: `The bot starts each built-in plugin as a subprocess with
"talosbot-plugins plugin NAME" and talks gRPC to it (hashicorp/go-plugin). Running
it by hand prints go-plugin's refusal, because the handshake cookie is missing.

Built-in plugins: ` + strings.Join(builtin.Names(), ", "),
		Example: "  talosbot-plugins plugin healthgate   # as launched by the bot",
		Args:    cobra.ExactArgs(1),
		Hidden:  false,
		RunE: func(_ *cobra.Command, args []string) error {
			p, ok := builtin.New(args[0])
			if !ok {
				return &exitError{code: 2, err: fmt.Errorf("unknown plugin %q; built-in plugins: %s", args[0], strings.Join(builtin.Names(), ", "))}
			}
			sdk.Serve(p)
			return nil
		},
	}
}
