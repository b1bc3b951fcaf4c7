package noderemove

import (
	"context"
	"fmt"

	"github.com/talosbot/talosbot/plugins/cluster/storage"
	"github.com/talosbot/talosbot/plugins/sdk"
)

// Config is the plugin's own section of the bot's config,
// plugins.noderemove (docs/CONFIG.md). The host passes it unread; only this
// package knows its keys.
type Config struct {
	// Storage tunes the storage-aware drain (docs/UPGRADES.md, "Storage").
	Storage storage.Config `json:"storage"`
}

// decodeConfig reads the section strictly (unknown keys are errors) over
// the defaults.
func decodeConfig(raw []byte) (Config, error) {
	c := Config{Storage: storage.DefaultConfig()}
	if err := sdk.DecodeConfig(raw, &c); err != nil {
		return c, fmt.Errorf("plugins.%s: %w", Name, err)
	}
	if err := c.Storage.Validate("storage"); err != nil {
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
