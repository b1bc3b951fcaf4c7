package k8supgrade

import (
	"context"
	"fmt"

	"github.com/talosbot/talosbot/plugins/cluster/planguard"
	"github.com/talosbot/talosbot/plugins/sdk"
)

// Config is the plugin's own section, plugins.k8supgrade (docs/CONFIG.md).
type Config struct {
	// PlanBeforeUpgrade lists the clusters whose upgrades start with the R5
	// Terraform plan guard (was clusters[].credentials.terraform.plan_before_upgrade).
	PlanBeforeUpgrade []string `json:"plan_before_upgrade"`
	// TerraformGuard tunes that guard.
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
func (*Plugin) ValidateConfig(_ context.Context, raw []byte, clusters []string) error {
	c, err := decodeConfig(raw)
	if err != nil {
		return err
	}
	var errs sdk.ConfigErrors
	planguard.CheckClusters("plan_before_upgrade", c.PlanBeforeUpgrade, clusters, &errs)
	return errs.Err()
}
