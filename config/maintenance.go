package config

import (
	"fmt"
	"sort"

	"github.com/robfig/cron/v3"
)

// MaintenanceSchedule (maintenance_schedule: {CLUSTER: CRON}) runs, for each
// cluster, every plugin command whose manifest declares `maintenance` (a
// disruptive command safe to run unattended, such as the etcd
// defragmentation) at the cron times that fall inside the maintenance
// window of the cluster's environment (bot/schedule, docs/OPERATIONS.md
// "Scheduled maintenance"). The key names no command: the manifests do.
//
// A scheduled disruptive run needs a window to run in, so a cluster whose
// environment has no maintenance_windows is refused here rather than left
// to run at any hour.
func (c *Config) validateMaintenanceSchedule() []FieldError {
	var errs []FieldError
	names := make([]string, 0, len(c.MaintenanceSchedule))
	for n := range c.MaintenanceSchedule {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		spec := c.MaintenanceSchedule[name]
		p := "maintenance_schedule." + name
		cl := c.Cluster(name)
		if cl == nil {
			errs = append(errs, FieldError{Path: p, Msg: fmt.Sprintf("no cluster is named %q", name)})
			continue
		}
		if spec == ScheduleOff {
			continue
		}
		if _, err := cron.ParseStandard(spec); err != nil {
			errs = append(errs, FieldError{Path: p, Msg: fmt.Sprintf("%q is not a cron expression (e.g. \"0 3 * * 0\", or off): %v", spec, err)})
			continue
		}
		if len(c.Policy[cl.Environment].Windows) == 0 {
			errs = append(errs, FieldError{Path: p, Msg: fmt.Sprintf("the %s environment of %s has no maintenance_windows; a scheduled disruptive run needs one (policy.%s.maintenance_windows), or set %q",
				cl.Environment, name, cl.Environment, ScheduleOff)})
		}
	}
	return errs
}
