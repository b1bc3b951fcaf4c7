package storage

import (
	"bytes"
	"fmt"
	"time"

	"go.yaml.in/yaml/v3"
)

// Policies for a node that holds the last healthy replica of a Longhorn
// volume (Settings.LastReplica).
const (
	// LastReplicaWait waits before the node until Longhorn has a healthy
	// replica elsewhere (up to RebuildWait), then drains.
	LastReplicaWait = "wait"
	// LastReplicaRefuse refuses the plan: the operator moves the replica
	// (or lets Longhorn's block-for-eviction node-drain-policy do it).
	LastReplicaRefuse = "refuse"
)

// Policies for a node that runs a CloudNativePG primary (Settings.Switchover).
const (
	// SwitchoverFirst promotes a ready replica on another node (as
	// `kubectl cnpg promote` does) and waits for it before the drain.
	SwitchoverFirst = "switchover"
	// SwitchoverRefuse refuses the plan instead.
	SwitchoverRefuse = "refuse"
)

// Settings are the storage integration's settings, born in the plugins
// that drain (their `plugins: {NAME: {storage: ...}}` section), never in
// the core. The zero value is not valid: start from Defaults.
type Settings struct {
	// Longhorn enables the Longhorn integration (forecast, waits, probe).
	Longhorn bool `yaml:"longhorn" json:"longhorn"`
	// CNPG enables the CloudNativePG integration.
	CNPG bool `yaml:"cnpg" json:"cnpg"`
	// RebuildWait bounds each wait for Longhorn replicas to be rebuilt
	// (before a node holding a last replica, after each node). When it
	// passes, the roll pauses with Resume and Abandon.
	RebuildWait time.Duration `yaml:"rebuild_wait" json:"rebuild_wait"`
	// LastReplica is LastReplicaWait or LastReplicaRefuse.
	LastReplica string `yaml:"last_replica" json:"last_replica"`
	// Switchover is SwitchoverFirst or SwitchoverRefuse.
	Switchover string `yaml:"switchover" json:"switchover"`
	// SwitchoverWait bounds the wait for a new primary to be ready.
	SwitchoverWait time.Duration `yaml:"switchover_wait" json:"switchover_wait"`
}

// Defaults: both integrations on (each still needs its CRDs installed to
// do anything), a 2-hour rebuild wait, wait for last replicas, switch
// primaries over, 5 minutes for a switchover.
func Defaults() Settings {
	return Settings{Longhorn: true, CNPG: true, RebuildWait: 2 * time.Hour, LastReplica: LastReplicaWait,
		Switchover: SwitchoverFirst, SwitchoverWait: 5 * time.Minute}
}

// Decode reads the settings from YAML over the defaults, refusing unknown
// fields, and validates them. Empty input gives the defaults.
func Decode(raw []byte) (Settings, error) {
	s := Defaults()
	if len(bytes.TrimSpace(raw)) > 0 {
		dec := yaml.NewDecoder(bytes.NewReader(raw))
		dec.KnownFields(true)
		if err := dec.Decode(&s); err != nil {
			return Settings{}, fmt.Errorf("storage settings: %w (fields: longhorn, cnpg, rebuild_wait, last_replica, switchover, switchover_wait)", err)
		}
	}
	return s, s.Validate()
}

// Validate names the field to fix.
func (s Settings) Validate() error {
	switch {
	case s.LastReplica != LastReplicaWait && s.LastReplica != LastReplicaRefuse:
		return fmt.Errorf("storage.last_replica is %q: use %q or %q", s.LastReplica, LastReplicaWait, LastReplicaRefuse)
	case s.Switchover != SwitchoverFirst && s.Switchover != SwitchoverRefuse:
		return fmt.Errorf("storage.switchover is %q: use %q or %q", s.Switchover, SwitchoverFirst, SwitchoverRefuse)
	case s.RebuildWait < time.Minute || s.RebuildWait > 7*24*time.Hour:
		return fmt.Errorf("storage.rebuild_wait is %s: use 1m to 168h", s.RebuildWait)
	case s.SwitchoverWait < 10*time.Second || s.SwitchoverWait > time.Hour:
		return fmt.Errorf("storage.switchover_wait is %s: use 10s to 1h", s.SwitchoverWait)
	}
	return nil
}
