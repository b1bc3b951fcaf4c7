// Package schedule runs configured commands on cron schedules
// (snapshots.schedule and snapshots.drill_schedule). A scheduled run is an
// operation like any other: it goes through engine.Engine.Submit, so it is
// audited, shown by /talos status, and its result (a failure too) is posted
// to the cluster's channel; a run skipped because the cluster is locked is
// posted and audited too. The scheduler's identity is User; it may run
// only commands that do not disrupt the cluster (the engine enforces that
// for a System origin).
//
// The scheduler knows no command name: a schedule runs the commands whose
// plugin manifests declare its role (roles), found in the command catalogue
// it is given.
//
// Time is injected: Tick does one round for a given instant and is what
// the tests drive; Run is the thin loop that waits for the next due time.
package schedule

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	lifecyclev1 "github.com/talosbot/talosbot/plugins/sdk/proto/lifecycle/v1"

	"github.com/talosbot/talosbot/approvals"
	"github.com/talosbot/talosbot/bot/engine"
	"github.com/talosbot/talosbot/bot/grammar"
	"github.com/talosbot/talosbot/bot/notice"
	"github.com/talosbot/talosbot/config"
	"github.com/talosbot/talosbot/state"
)

// User is the requester of scheduled operations.
const User = "talosbot-schedule"

// Job is one schedule: a command line for a cluster.
type Job struct {
	Cluster, Channel string
	// Command is the command name (from its manifest); Text the full line.
	Command, Text, Spec string
	// Windows, for a maintenance job (a disruptive command), are the
	// maintenance windows it must fall in (maintenance.go).
	Windows []config.Window
	// Key is the configuration key of the job's schedule.
	Key   string
	sched cron.Schedule
	next  time.Time
}

// Next is when the job is next due.
func (j *Job) Next() time.Time { return j.next }

// Options wire the scheduler.
type Options struct {
	Config *config.Config
	Store  *state.Store
	// Commands is the command catalogue (engine.Engine.Grammar().Specs()):
	// each schedule's command is found in it by its declared role.
	Commands []grammar.CommandSpec
	// Submit is engine.Engine.Submit.
	Submit func(ctx context.Context, from engine.Origin, text string) (string, error)
	// Say posts a line that is not an operation (a skip) to a channel.
	Say func(ctx context.Context, to engine.Origin, text string)
	Now func() time.Time
	Log *slog.Logger
}

// Scheduler holds the jobs.
type Scheduler struct {
	o    Options
	jobs []*Job
}

// role is what a schedule runs, as a plugin manifest declares it.
type role struct {
	// key is the configuration key of the schedules.
	key string
	// what says what the command does, for errors.
	what string
	// serves reports whether a command has the role.
	serves func(*lifecyclev1.Command) bool
	// schedules are the configured schedules by cluster.
	schedules func(*config.Config) map[string]string
	// disruptive: the role's commands disrupt the cluster, and run only
	// inside the maintenance window (maintenance.go).
	disruptive bool
}

// roles are the schedules: snapshots.schedule runs the command that takes
// snapshots (manifest needs_snapshot), snapshots.drill_schedule the one that
// proves a restore (drill DRILL_ETCD_RESTORE, as the engine's last-drill
// record reads it). Either way the command must not disrupt the cluster.
func roles() []role {
	return []role{
		{key: "snapshots.schedule", what: "takes snapshots (manifest needs_snapshot)",
			serves:    func(c *lifecyclev1.Command) bool { return c.GetNeedsSnapshot() },
			schedules: func(c *config.Config) map[string]string { return c.Snapshots.Schedule }},
		{key: "snapshots.drill_schedule", what: "runs the etcd restore drill (manifest drill DRILL_ETCD_RESTORE)",
			serves:    func(c *lifecyclev1.Command) bool { return c.GetDrill() == lifecyclev1.Drill_DRILL_ETCD_RESTORE },
			schedules: func(c *config.Config) map[string]string { return c.Snapshots.DrillSchedules() }},
		maintenanceRole,
	}
}

// commands finds the plugin commands of specs that have role r, do not
// disrupt the cluster and take the cluster as their first argument (the
// scheduled line is "/talos <command> <cluster>"), sorted by name. Like the
// engine's drill evidence, the scheduler treats every command that declares
// a role alike: when two plugins declare it, both run.
func (r role) commands(specs []grammar.CommandSpec) ([]string, error) {
	var out, unfit []string
	for _, c := range specs {
		if c.Plugin == "" || (c.GetEffect() == lifecyclev1.Effect_EFFECT_DISRUPTIVE && !r.disruptive) || !r.serves(c.Command) {
			continue
		}
		if !clusterFirst(c.Command) {
			unfit = append(unfit, grammar.Usage(c.Command)+" (plugin "+c.Plugin+")")
			continue
		}
		out = append(out, c.Name)
	}
	switch {
	case len(out) == 0 && len(unfit) > 0:
		return nil, fmt.Errorf("%s: %s %s but does not take the cluster as its first argument, so it cannot be scheduled; set the schedules to %q",
			r.key, strings.Join(unfit, ", "), r.what, config.ScheduleOff)
	case len(out) == 0:
		return nil, fmt.Errorf("%s: no plugin command %s without disrupting the cluster; set the schedules to %q or configure the plugin that serves it", r.key, r.what, config.ScheduleOff)
	}
	sort.Strings(out)
	return out, nil
}

// clusterFirst reports whether c's first positional argument is the cluster.
func clusterFirst(c *lifecyclev1.Command) bool {
	for _, a := range c.GetArgs() {
		if !a.GetFlag() {
			return a.GetName() == "cluster"
		}
	}
	return false
}

// Jobs lists the configured schedules, each running its role's command
// from specs for one cluster, e.g. `/talos <snapshot command> <cluster>`.
func Jobs(cfg *config.Config, specs []grammar.CommandSpec) ([]*Job, error) {
	var out []*Job
	for _, r := range roles() {
		schedules := r.schedules(cfg)
		names := make([]string, 0, len(schedules))
		for n, spec := range schedules {
			if spec != config.ScheduleOff {
				names = append(names, n)
			}
		}
		if len(names) == 0 {
			continue
		}
		sort.Strings(names)
		commands, err := r.commands(specs)
		if err != nil {
			return nil, err
		}
		for _, name := range names {
			spec := schedules[name]
			cl := cfg.Cluster(name)
			if cl == nil {
				return nil, fmt.Errorf("%s.%s: no cluster is named %q", r.key, name, name)
			}
			s, err := cron.ParseStandard(spec)
			if err != nil {
				return nil, fmt.Errorf("%s.%s: %q is not a cron expression: %w", r.key, name, spec, err)
			}
			ch := ""
			if len(cl.Channels) > 0 {
				ch = cl.Channels[0]
			}
			var ws []config.Window
			if r.disruptive {
				ws = cfg.Policy[cl.Environment].Windows
			}
			for _, command := range commands {
				out = append(out, &Job{Cluster: name, Channel: ch, Command: command, Text: "/talos " + command + " " + name, Spec: spec, Windows: ws, Key: r.key, sched: s})
			}
		}
	}
	return out, nil
}

// New builds the scheduler and decides each job's first due time from the
// store: a job whose schedule came due while the bot was down (after its
// last scheduled operation) is due now, once, however many times it was
// missed; a job that never ran starts from now.
func New(ctx context.Context, o Options) (*Scheduler, error) {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	jobs, err := Jobs(o.Config, o.Commands)
	if err != nil {
		return nil, err
	}
	now := o.Now()
	err = o.Store.View(ctx, func(tx *state.Tx) error {
		for _, j := range jobs {
			ops, err := tx.Operations(state.OpFilter{Cluster: j.Cluster, Command: j.Command})
			if err != nil {
				return err
			}
			var last time.Time
			for _, op := range ops {
				if op.Requester == User && op.CreatedAt.After(last) {
					last = op.CreatedAt
				}
			}
			switch {
			case last.IsZero():
				j.next = j.sched.Next(now)
			case !j.sched.Next(last).After(now):
				j.next = now // missed while down: run once now
			default:
				j.next = j.sched.Next(last)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the last scheduled runs: %w", err)
	}
	return &Scheduler{o: o, jobs: jobs}, nil
}

// Jobs returns the scheduler's jobs.
func (s *Scheduler) Jobs() []*Job { return s.jobs }

// Outcome is what Tick did for one due job.
type Outcome struct {
	Job *Job
	// OpID is the submitted operation; empty when skipped or refused.
	OpID    string
	Skipped string
	Err     error
}

// Tick runs every job due at now, once, and schedules each for its next
// time after now. A job whose cluster is locked by a disruptive operation
// is skipped, and the channel is told why.
func (s *Scheduler) Tick(ctx context.Context, now time.Time) []Outcome {
	var out []Outcome
	for _, j := range s.jobs {
		if j.next.After(now) {
			continue
		}
		j.next = j.sched.Next(now)
		oc := Outcome{Job: j}
		to := engine.Origin{User: User, Channel: j.Channel, System: true}
		var lock *state.Lock
		err := s.o.Store.View(ctx, func(tx *state.Tx) error {
			var err error
			lock, err = tx.Lock(j.Cluster)
			return err
		})
		switch {
		case err != nil:
			oc.Err = fmt.Errorf("read the lock of %s: %w", j.Cluster, err)
		case j.Key == maintenanceRole.key && !approvals.InWindow(j.Windows, now):
			oc.Skipped, oc.Err = s.skipOutsideWindow(ctx, j, now)
			s.o.Say(ctx, to, oc.Skipped)
		case lock != nil:
			oc.Skipped = fmt.Sprintf("⏭️ scheduled %s skipped: %s holds the %s lock (%s by %s); next run %s",
				j.Text, lock.OpID, j.Cluster, lock.Command, lock.Holder, j.next.UTC().Format(time.RFC3339))
			// The skip is recorded as well as posted: a missing scheduled
			// snapshot must be explainable from the audit trail alone.
			oc.Err = s.auditSkip(ctx, j, lock, now)
			s.o.Say(ctx, to, oc.Skipped)
		default:
			oc.OpID, oc.Err = s.o.Submit(ctx, to, j.Text)
		}
		if oc.Err != nil {
			s.o.Log.Error("scheduled run", "command", j.Text, "err", oc.Err)
		}
		out = append(out, oc)
	}
	return out
}

// auditSkip records that job j did not run at now because lock held its
// cluster. A failed append is returned (and logged by Tick), never dropped.
func (s *Scheduler) auditSkip(ctx context.Context, j *Job, lock *state.Lock, now time.Time) error {
	ev := state.AuditEvent{Time: now.UTC(), Actor: User, Action: "schedule skipped", Cluster: j.Cluster, Command: j.Command, Result: "skipped",
		Detail: map[string]string{
			"reason":         "the cluster is locked by a disruptive operation",
			"text":           j.Text,
			"schedule":       j.Spec,
			"holder_op":      lock.OpID,
			"holder_command": lock.Command,
			"holder":         lock.Holder,
			"next":           j.next.UTC().Format(time.RFC3339),
		}}
	if err := s.o.Store.Update(ctx, func(tx *state.Tx) error { _, err := tx.Append(ev); return err }); err != nil {
		return fmt.Errorf("audit the skipped %s: %w", j.Text, err)
	}
	return nil
}

// Run ticks at each job's due time until ctx ends.
func (s *Scheduler) Run(ctx context.Context) error {
	if len(s.jobs) == 0 {
		return nil
	}
	notice.Loop(ctx, s.o.Now, func(time.Time) time.Time {
		next := s.jobs[0].next
		for _, j := range s.jobs[1:] {
			if j.next.Before(next) {
				next = j.next
			}
		}
		return next
	}, func(ctx context.Context, now time.Time) { s.Tick(ctx, now) })
	return nil
}
