package cluster

import (
	"strings"

	"github.com/talosbot/talosbot/plugins/sdk"
)

// The refusals below are each the one place that enforces their rule for
// every plugin (docs/RUNBOOK.md). Each enforcing line carries a `rule:` marker
// that hack/mutate-rules.sh disables to prove the named tests catch it.

// CheckGateBefore is rule R1 before a disruptive operation: failing lists the
// gate's failures that matter for it (gate.Result.Reasons, or fewer when the
// plugin tolerates some); any at all refuse, naming them. operation says what
// would have run ("the upgrade", "the removal").
func CheckGateBefore(operation string, failing []string) error {
	if len(failing) == 0 { // rule:R1
		return nil
	}
	return sdk.Refuse("R1", "the health gate before "+operation+" failed: "+strings.Join(failing, "; "),
		"fix what the gate names (/talos health), then run the same command again; nothing was changed")
}

// CheckSnapshotDir is rule R12's precondition: an operation that must take an
// etcd snapshot first refuses when there is nowhere off the cluster to put it.
func CheckSnapshotDir(dir, operation string) error {
	if dir != "" { // rule:R12
		return nil
	}
	return sdk.Refuse("R12", "no snapshot directory is configured, so the etcd snapshot that must precede "+operation+" cannot be stored off-cluster",
		"set snapshot_dir in the bot configuration to a disk outside the cluster")
}
