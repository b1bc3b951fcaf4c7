package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/talosbot/talosbot/bot"
	"github.com/talosbot/talosbot/config"
	"github.com/talosbot/talosbot/plugins/catalog"
	"github.com/talosbot/talosbot/plugins/host"
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
  policy.production.operatrs: unknown key "operatrs"; did you mean "operators"?
and the command exits 2. It runs every check serve runs before it starts,
so serve never refuses a file config check accepted: keys, types, bounds
(durations at most 3650d), groups, roles, chat keys, and every command name
in the policy and alert rules against the command catalogue (the built-in
plugins' manifests, and each external plugin's, which is checksum-verified
and asked for its manifest exactly as serve does), every plugin's own section
(plugins.NAME, checked by its plugin through ValidateConfig: each external
plugin, and each built-in that has a section), and the secrets serve reads
at start: every reference resolves (all missing variables are listed at
once), file secrets are regular files of at most 1 MiB, the audit, alert and
console tokens are at least 32 characters and all different. Secrets are
never printed. serve runs this same check (checkConfig) before it starts.`,
		Example: "  talosbot config check --config deploy/examples/talosbot.yaml",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, _, err := checkConfig(cmd.Context(), path)
			if err != nil {
				return err
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

// checkConfig is every check of a configuration file that serve runs
// before it starts, and all that config check runs: the document (bounds,
// keys, types, values), the start-up secrets (resolved, strong enough,
// distinct) and the command catalogue. Both commands call it, so config
// check cannot accept what serve refuses. Every problem is listed at once;
// the error is an *exitError with code 2 wrapping *config.Errors.
func checkConfig(ctx context.Context, path string) (*config.Config, *config.Secrets, error) {
	data, err := config.ReadFile(path)
	if err != nil {
		return nil, nil, &exitError{code: 2, err: err}
	}
	c, errs := config.Decode(data)
	if errs, err = movedKeys(errs); err != nil {
		return nil, nil, err
	}
	var secrets *config.Secrets
	if c != nil {
		var serrs []config.FieldError
		secrets, serrs = c.ResolveSecrets()
		errs = append(errs, serrs...)
		errs = append(errs, checkCatalogue(ctx, c)...)
		c.Locate(errs) // the catalogue's errors get their lines too
	}
	if len(errs) > 0 {
		return nil, nil, &exitError{code: 2, err: &config.Errors{File: path, List: errs}}
	}
	return c, secrets, nil
}

// checkCatalogue reads the command catalogue the way serve does (built-in
// manifests from plugins/catalog, external plugins launched after their checksum is
// verified) and checks the configuration's command names against it.
func checkCatalogue(ctx context.Context, c *config.Config) []config.FieldError {
	m, err := newPluginHost(c, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		return []config.FieldError{{Path: "plugins", Msg: err.Error()}}
	}
	defer m.Close()
	cat, err := bot.Catalogue(ctx, m)
	if err != nil {
		return []config.FieldError{{Path: "plugins.external", Msg: err.Error()}}
	}
	return append(c.CheckCommands(cat), checkPluginSections(ctx, c, m)...)
}

// newPluginHost is the plugin host of serve and config check: the built-ins
// (described from plugins/catalog without starting anything, started from
// talosbot-plugins on first use) and the configured external plugins.
func newPluginHost(cfg *config.Config, log *slog.Logger, onRestart func(string)) (*host.Manager, error) {
	builtins, err := catalog.Load()
	if err != nil {
		return nil, err
	}
	var ext []host.External
	for _, p := range cfg.Plugins.External {
		ext = append(ext, host.External{Name: p.Name, Path: p.Path, SHA256: p.SHA256})
	}
	// No sum (a plain go build without TALOSBOT_PLUGINS_SHA256): config
	// check needs none, and the host refuses to start a built-in without it;
	// serve has refused already, with the fix (pluginsBinary).
	sum, _ := pluginsSHA256()
	return host.New(host.Options{Executable: pluginsBinaryPath(), ExecutableSHA256: sum, BuiltIn: builtins.Names(), External: ext, RunTimeout: cfg.Timeouts.Run.D(), Logger: log, PassEnv: cfg.Plugins.PassEnv,
		Describe:  builtins.Describe,
		OnRestart: onRestart})
}
