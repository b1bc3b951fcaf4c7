// Package opfacts holds what an operation's message shows beside the
// operation itself. The engine fills it from the store, the policy and the
// configuration; renderers and their test fixtures (internal/rendertest)
// read it without importing the engine.
package opfacts

import (
	"time"

	"github.com/talosbot/talosbot/state"
)

// Facts are what an operation's message shows beside the operation itself,
// read from the store, the policy and the configuration when the engine
// sends an Update. The renderer never reads the store: everything it shows
// comes from here.
type Facts struct {
	// Now is the engine's clock when the facts were read: relative times
	// ("in 30 min", "2 days ago") are counted from it.
	Now time.Time
	// Required is how many approvals the operation needs (0: none).
	Required int
	// Approvals are the approvals of the current plan digest, oldest first.
	Approvals []state.Approval
	// Approvers are who may still approve: configured approvers the policy
	// accepts for this operation, minus those who already did.
	Approvers []string
	// Roles maps each configured node of the cluster to its role.
	Roles map[string]string
	// Staging is the staging run that satisfied the promotion gate (R6).
	Staging *state.Operation
	// Snapshot is the newest succeeded operation of the cluster that took an
	// etcd snapshot (its command declares needs_snapshot).
	Snapshot *state.Operation
	// Gate is the newest finished read-only operation of the cluster whose
	// plan ran health-gate steps (kind "gate").
	Gate *state.Operation
	// Past are earlier succeeded runs of the same command on the cluster,
	// newest first (at most ten): durations and ETAs come from them.
	Past []*state.Operation
	// PastFrom names the other clusters Past came from: with no run of the
	// command on record on this cluster, runs on clusters with the same
	// node count stand in (staging's run estimates production's), and the
	// estimate says where they came from.
	PastFrom []string
	// Previous maps a node the plan moves to "its previous version" (a
	// rollback names no target) to the version it ran before the newest
	// operation on record that upgraded it to its current one.
	Previous map[string]string
}
