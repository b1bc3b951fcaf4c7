package k8supgrade

import (
	"context"
	"fmt"

	"github.com/talosbot/talosbot/plugins/cluster/planguard"
	"github.com/talosbot/talosbot/plugins/sdk"
)

// Config is the plugin's own section, plugins.k8supgrade (docs/CONFIG.md).
type Config struct {
	// TerraformGuard tunes the R5 plan guard that runs before the upgrade
	// when the cluster's plan_before_upgrade is set.
	TerraformGuard planguard.Config `json:"terraform_guard"`
}

// decodeConfig reads the section strictly (unknown keys are errors).
func decodeConfig(raw []byte) (Config, error) {
	var c Config
	if err := sdk.DecodeConfig(raw, &c); err != nil {
		return c, fmt.Errorf("plugins.%s: %w", Name, err)
	}
	return c, nil
}

// ValidateConfig implements sdk.ConfigValidator: config check and serve
// ask it before anything runs.
func (*Plugin) ValidateConfig(_ context.Context, raw []byte, _ []string) error {
	_, err := decodeConfig(raw)
	return err
}
