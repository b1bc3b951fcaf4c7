package tfguard

import (
	"context"
	"fmt"

	"github.com/talosbot/talosbot/plugins/cluster/planguard"
	"github.com/talosbot/talosbot/plugins/sdk"
)

// Config is the plugin's own section, plugins.tfguard (docs/CONFIG.md):
// the R5 guard's tunables for `/talos tf plan`. The upgrades' guards read
// theirs from their own sections, so that each plugin owns its settings.
type Config struct {
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

// ValidateConfig implements sdk.ConfigValidator.
func (*Plugin) ValidateConfig(_ context.Context, raw []byte, _ []string) error {
	_, err := decodeConfig(raw)
	return err
}
