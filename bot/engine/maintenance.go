package engine

import (
	"fmt"

	"github.com/talosbot/talosbot/bot/grammar"
)

// scheduledDisruption decides whether the scheduler (a System origin, whose
// authority is the configuration) may start the disruptive command inv:
// only a command whose manifest declares `maintenance` (safe unattended:
// it checks its own safety at each step). The policy then applies with the
// scheduler's authority (approvals.Request.System): a freeze holds, and the
// run must fall inside the maintenance window of the cluster's environment,
// when it is requested and again right before it runs.
func (e *Engine) scheduledDisruption(inv *grammar.Invocation) error {
	if !inv.Spec.GetMaintenance() {
		return fmt.Errorf("a scheduled run may not run %s: it disrupts the cluster; run it from chat", inv.Spec.Name)
	}
	return nil
}
