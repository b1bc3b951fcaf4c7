package schedule

import (
	"context"
	"fmt"
	"time"

	lifecyclev1 "github.com/talosbot/talosbot/plugins/sdk/proto/lifecycle/v1"

	"github.com/talosbot/talosbot/approvals"
	"github.com/talosbot/talosbot/config"
	"github.com/talosbot/talosbot/state"
)

// maintenanceRole is maintenance_schedule: it runs the commands whose
// manifests declare `maintenance` (disruptive, safe unattended, e.g. the
// etcd defragmentation) in the maintenance window of the cluster's
// environment. Like every scheduled run it is skipped, and said so once,
// when another operation holds the cluster's lock; a run due outside the
// window is skipped the same way. The run itself is an operation like any
// other: the approval policy applies (put the command in the environment's
// no_approval_commands to let it run unattended), and the plugin refuses at
// Plan when there is nothing to do (the defrag: every member under its
// fragmentation threshold), which the channel is told.
var maintenanceRole = role{key: "maintenance_schedule", what: "is a maintenance command (manifest maintenance)",
	serves:     func(c *lifecyclev1.Command) bool { return c.GetMaintenance() },
	schedules:  func(c *config.Config) map[string]string { return c.MaintenanceSchedule },
	disruptive: true}

// skipOutsideWindow says and audits that j, due at now, fell outside its
// maintenance window.
func (s *Scheduler) skipOutsideWindow(ctx context.Context, j *Job, now time.Time) (string, error) {
	msg := fmt.Sprintf("⏭️ scheduled %s skipped: %s is outside the maintenance window (%s); next run %s",
		j.Text, now.UTC().Format("Mon 15:04 MST"), approvals.DescribeWindows(j.Windows), j.next.UTC().Format(time.RFC3339))
	ev := state.AuditEvent{Time: now.UTC(), Actor: User, Action: "schedule skipped", Cluster: j.Cluster, Command: j.Command, Result: "skipped",
		Detail: map[string]string{
			"reason":   "outside the maintenance window",
			"text":     j.Text,
			"schedule": j.Spec,
			"next":     j.next.UTC().Format(time.RFC3339),
		}}
	if err := s.o.Store.Update(ctx, func(tx *state.Tx) error { _, err := tx.Append(ev); return err }); err != nil {
		return msg, fmt.Errorf("audit the skipped %s: %w", j.Text, err)
	}
	return msg, nil
}
