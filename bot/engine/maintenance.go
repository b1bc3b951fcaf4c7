package engine

import (
	"fmt"

	"github.com/talosbot/talosbot/approvals"
	"github.com/talosbot/talosbot/bot/grammar"
	"github.com/talosbot/talosbot/config"
)

// scheduledDisruption decides whether the scheduler (a System origin, whose
// authority is the configuration) may start the disruptive command inv on
// cl: only a command whose manifest declares `maintenance` (safe unattended:
// it checks its own safety at each step), and only inside the maintenance
// window of cl's environment. The scheduler skips runs outside the window
// itself; this is the engine's own check, so no other path can start a
// disruption without a person. The approval policy still applies after it.
func (e *Engine) scheduledDisruption(inv *grammar.Invocation, cl *config.Cluster) error {
	if !inv.Spec.GetMaintenance() {
		return fmt.Errorf("a scheduled run may not run %s: it disrupts the cluster; run it from chat", inv.Spec.Name)
	}
	ws := e.o.Config.Policy[cl.Environment].Windows
	if !approvals.InWindow(ws, e.now()) {
		return fmt.Errorf("a scheduled run of %s may start only inside the maintenance window of %s (%s); it is %s",
			inv.Spec.Name, cl.Environment, approvals.DescribeWindows(ws), e.now().UTC().Format("Mon 15:04 MST"))
	}
	return nil
}
