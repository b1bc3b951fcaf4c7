package approvals

import (
	"fmt"
	"time"

	"github.com/talosbot/talosbot/config"
	"github.com/talosbot/talosbot/state"
)

// The policy's inputs are its own types: the engine (package bot/engine)
// passes them, and this package imports nothing of bot/, so the arrow runs
// one way (bot → approvals → config, state).

// Policy flags the engine adds to every disruptive plugin command. They
// change what policy allows, not what the plugin does, so plugins never see
// them. They are defined once, here, where they are read.
const (
	FlagSkipStaging   = "skip-staging"
	FlagOutsideWindow = "outside-window"
	// FlagPromotedFrom prefixes the operation flag naming the staging
	// operation that satisfied the promotion gate (R6).
	FlagPromotedFrom = "promoted-from:"
	// FlagScheduled marks an operation the bot's scheduler started
	// (maintenance_schedule): the policy is checked again before it runs
	// with the scheduler's authority, not a user's role.
	FlagScheduled = "scheduled"
)

// Request describes a request for Policy.Authorize.
type Request struct {
	User       string
	Cluster    *config.Cluster
	Command    string
	Disruptive bool
	// Writes marks a command that changes no cluster but writes or deletes
	// files or state the bot keeps (EFFECT_WRITE, e.g. a snapshot and its
	// retention): it needs the operator role, nothing more.
	Writes bool
	Args   map[string]string
	Now    time.Time
	// Frozen is the cluster's freeze, if any.
	Frozen *Freeze
	// Housekeeping marks commands that must work during a freeze and
	// outside maintenance windows (freeze, unfreeze, abandon, cancel): they
	// stop or record work, they never start it.
	Housekeeping bool
	// System marks the bot's own scheduler (maintenance_schedule, the
	// snapshot schedules): its authority is the configuration, so no role
	// is asked; a freeze still holds, and a disruptive run must fall inside
	// a maintenance window of its environment, whatever the environment.
	System bool
}

// Freeze is a cluster freeze: disruptive operations are refused while it holds.
type Freeze struct {
	Reason string    `json:"reason"`
	By     string    `json:"by"`
	Since  time.Time `json:"since"`
}

// StagingLookup finds the newest succeeded staging operation of command with
// target that ended at or after since.
type StagingLookup func(command, target string, since time.Time) (*state.Operation, error)

// age says a promotion age in the words a person reads ("14 days", "36 h",
// "90 min"), never Go's "336h0m0s". Ages are configured in whole hours or
// days, so coarser units are enough.
func age(d time.Duration) string {
	switch {
	case d >= 48*time.Hour && d%(24*time.Hour) == 0:
		return fmt.Sprintf("%d days", d/(24*time.Hour))
	case d == 24*time.Hour:
		return "1 day"
	case d >= time.Hour && d%time.Hour == 0:
		return fmt.Sprintf("%d h", d/time.Hour)
	case d >= time.Minute:
		return fmt.Sprintf("%d min", d/time.Minute)
	}
	return d.String()
}
