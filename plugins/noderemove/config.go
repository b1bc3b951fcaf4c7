package noderemove

import (
	"context"

	"github.com/talosbot/talosbot/plugins/cluster/storage"
)

// The plugin's own section of the bot's config, plugins.noderemove
// (docs/CONFIG.md), holds only the storage key that tunes the
// storage-aware drain (docs/UPGRADES.md, "Storage"). The host passes it
// unread; storage.DecodeSection reads it.

// decodeConfig reads the section strictly (unknown keys are errors) over
// the defaults.
func decodeConfig(raw []byte) (storage.Settings, error) {
	return storage.DecodeSection(Name, raw)
}

// ValidateConfig implements sdk.ConfigValidator: config check and serve
// ask it before anything runs.
func (*Plugin) ValidateConfig(_ context.Context, raw []byte, _ []string) error {
	_, err := decodeConfig(raw)
	return err
}
