package gates

import (
	"context"
	"fmt"

	"github.com/talosbot/talosbot/plugins/sdk"
)

// Config is the plugin's own section, plugins.gates (docs/CONFIG.md): the
// names the readiness gates look for where a cluster differs from the
// defaults. Empty keys take the defaults.
type Config struct {
	// HostLabel is the node label that names the physical host (default
	// topology.kubernetes.io/zone): control planes must be on distinct hosts.
	HostLabel string `json:"host_label"`
	// LonghornVolume is the Talos UserVolumeConfig the Longhorn gate looks
	// for on every node (default longhorn).
	LonghornVolume string `json:"longhorn_volume"`
	// LonghornNamespace is where Longhorn runs (default longhorn-system).
	LonghornNamespace string `json:"longhorn_namespace"`
	// FluxPath is the production cluster path Flux must reconcile; empty:
	// any path naming production and not staging.
	FluxPath string `json:"flux_path"`
}

// withDefaults fills the empty keys.
func (c Config) withDefaults() Config {
	if c.HostLabel == "" {
		c.HostLabel = DefaultHostLabel
	}
	if c.LonghornVolume == "" {
		c.LonghornVolume = DefaultLonghornVolume
	}
	if c.LonghornNamespace == "" {
		c.LonghornNamespace = DefaultLonghornNamespace
	}
	return c
}

// decodeConfig reads the section strictly (unknown keys are errors).
func decodeConfig(raw []byte) (Config, error) {
	var c Config
	if err := sdk.DecodeConfig(raw, &c); err != nil {
		return c, fmt.Errorf("plugins.%s: %w", Name, err)
	}
	return c.withDefaults(), nil
}

// ValidateConfig implements sdk.ConfigValidator.
func (*Plugin) ValidateConfig(_ context.Context, raw []byte, _ []string) error {
	_, err := decodeConfig(raw)
	return err
}
