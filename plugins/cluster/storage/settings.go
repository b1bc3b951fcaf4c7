package storage

import (
	"time"
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
// that drain (the `storage` key of their `plugins: {NAME: ...}` section,
// read through Config), never in the core. The zero value is not valid:
// start from Defaults.
type Settings struct {
	// Longhorn enables the Longhorn integration (forecast, waits, probe).
	Longhorn bool
	// CNPG enables the CloudNativePG integration.
	CNPG bool
	// RebuildWait bounds each wait for Longhorn replicas to be rebuilt
	// (before a node holding a last replica, after each node). When it
	// passes, the roll pauses with Resume and Abandon.
	RebuildWait time.Duration
	// LastReplica is LastReplicaWait or LastReplicaRefuse.
	LastReplica string
	// Switchover is SwitchoverFirst or SwitchoverRefuse.
	Switchover string
	// SwitchoverWait bounds the wait for a new primary to be ready.
	SwitchoverWait time.Duration
}

// Defaults: both integrations on (each still needs its CRDs installed to
// do anything), a 2-hour rebuild wait, wait for last replicas, switch
// primaries over, 5 minutes for a switchover.
func Defaults() Settings {
	return Settings{Longhorn: true, CNPG: true, RebuildWait: 2 * time.Hour, LastReplica: LastReplicaWait,
		Switchover: SwitchoverFirst, SwitchoverWait: 5 * time.Minute}
}

// The bounds Config.Validate holds the waits to: a rebuild wait under a
// minute pauses every roll at once; over a week it is a typo (a 10 TiB
// rebuild takes hours, not weeks). A switchover is a restart of the
// promoted instance: seconds to minutes.
const (
	minRebuildWait    = time.Minute
	maxRebuildWait    = 7 * 24 * time.Hour
	minSwitchoverWait = 10 * time.Second
	maxSwitchoverWait = time.Hour
)
