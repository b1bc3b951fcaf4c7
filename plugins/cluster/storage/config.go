package storage

import (
	"fmt"

	"github.com/talosbot/talosbot/plugins/sdk"
)

// Config is the `storage` key of a draining plugin's own section
// (plugins.talosupgrade.storage, plugins.noderemove.storage,
// plugins.rollback.storage), as the operator writes it: each plugin embeds
// it in its Config, sets DefaultConfig before sdk.DecodeConfig (keys the
// section leaves out keep their defaults), and checks it with Validate.
//
// Per plugin, not per cluster: nothing in a wait or a policy has to agree
// across plugins (each operation reads Longhorn and CNPG afresh), and a
// removal may well deserve a longer rebuild wait than a routine roll.
type Config struct {
	Longhorn       bool         `json:"longhorn"`
	CNPG           bool         `json:"cnpg"`
	RebuildWait    sdk.Duration `json:"rebuild_wait"`
	LastReplica    string       `json:"last_replica"`
	Switchover     string       `json:"switchover"`
	SwitchoverWait sdk.Duration `json:"switchover_wait"`
}

// DefaultConfig is Defaults as written in a section.
func DefaultConfig() Config {
	d := Defaults()
	return Config{Longhorn: d.Longhorn, CNPG: d.CNPG, RebuildWait: sdk.Duration(d.RebuildWait),
		LastReplica: d.LastReplica, Switchover: d.Switchover, SwitchoverWait: sdk.Duration(d.SwitchoverWait)}
}

// Settings converts the section's values.
func (c Config) Settings() Settings {
	return Settings{Longhorn: c.Longhorn, CNPG: c.CNPG, RebuildWait: c.RebuildWait.D(),
		LastReplica: c.LastReplica, Switchover: c.Switchover, SwitchoverWait: c.SwitchoverWait.D()}
}

// Validate reports every bad value, each with its path under prefix
// (the key the plugin embeds Config at, "storage"), as sdk.ConfigErrors
// so that the host names plugins.NAME.storage.KEY.
func (c Config) Validate(prefix string) error {
	var errs sdk.ConfigErrors
	path := func(k string) string { return prefix + "." + k }
	if c.LastReplica != LastReplicaWait && c.LastReplica != LastReplicaRefuse {
		errs.Add(path("last_replica"), "is %q: use %q or %q", c.LastReplica, LastReplicaWait, LastReplicaRefuse)
	}
	if c.Switchover != SwitchoverFirst && c.Switchover != SwitchoverRefuse {
		errs.Add(path("switchover"), "is %q: use %q or %q", c.Switchover, SwitchoverFirst, SwitchoverRefuse)
	}
	if d := c.RebuildWait.D(); d < minRebuildWait || d > maxRebuildWait {
		errs.Add(path("rebuild_wait"), "is %s: use %s to %s", d, minRebuildWait, maxRebuildWait)
	}
	if d := c.SwitchoverWait.D(); d < minSwitchoverWait || d > maxSwitchoverWait {
		errs.Add(path("switchover_wait"), "is %s: use %s to %s", d, minSwitchoverWait, maxSwitchoverWait)
	}
	return errs.Err()
}

// DecodeSection reads the section of a plugin whose section holds only
// the storage key (plugins.rollback, plugins.noderemove): strictly
// (unknown keys are errors), over the defaults, each error named
// plugins.PLUGIN.storage.KEY. On an error it returns the defaults.
func DecodeSection(plugin string, raw []byte) (Settings, error) {
	var section struct {
		Storage Config `json:"storage"`
	}
	section.Storage = DefaultConfig()
	if err := sdk.DecodeConfig(raw, &section); err != nil {
		return Defaults(), fmt.Errorf("plugins.%s: %w", plugin, err)
	}
	if err := section.Storage.Validate("storage"); err != nil {
		return Defaults(), fmt.Errorf("plugins.%s: %w", plugin, err)
	}
	return section.Storage.Settings(), nil
}
