// Package schedule runs configured commands on cron schedules
// (snapshots.schedule and snapshots.drill_schedule). A scheduled run is an
// operation like any other: it goes through bot.Engine.Submit, so it is
// audited, shown by /talos status, and its result (a failure too) is posted
// to the cluster's channel. The scheduler's identity is User; it may run
// only commands that do not disrupt the cluster (the engine enforces that
// for a System origin).
//
// Time is injected: Tick does one round for a given instant and is what
// the tests drive; Run is the thin loop that waits for the next due time.
package schedule

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/talosbot/talosbot/bot"
	"github.com/talosbot/talosbot/config"
	"github.com/talosbot/talosbot/state"
)

// User is the requester of scheduled operations.
const User = "talosbot-schedule"

// Job is one schedule: a command line for a cluster.
type Job struct {
	Cluster, Channel string
	// Command is the command name ("snapshot"); Text the full line.
	Command, Text, Spec string
	sched               cron.Schedule
	next                time.Time
}

// Next is when the job is next due.
func (j *Job) Next() time.Time { return j.next }

// Options wire the scheduler.
type Options struct {
	Config *config.Config
	Store  *state.Store
	// Submit is bot.Engine.Submit.
	Submit func(ctx context.Context, from bot.Origin, text string) (string, error)
	// Say posts a line that is not an operation (a skip) to a channel.
	Say func(ctx context.Context, to bot.Origin, text string)
	Now func() time.Time
	Log *slog.Logger
}

// Scheduler holds the jobs.
type Scheduler struct {
	o    Options
	jobs []*Job
}

// Jobs lists the configured schedules: snapshots.schedule runs
// `/talos snapshot <cluster>`, snapshots.drill_schedule runs
// `/talos restore-drill <cluster>`.
func Jobs(cfg *config.Config) ([]*Job, error) {
	var out []*Job
	add := func(key, command string, specs map[string]string) error {
		names := make([]string, 0, len(specs))
		for n := range specs {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, name := range names {
			spec := specs[name]
			if spec == config.ScheduleOff {
				continue
			}
			cl := cfg.Cluster(name)
			if cl == nil {
				return fmt.Errorf("%s.%s: no cluster is named %q", key, name, name)
			}
			s, err := cron.ParseStandard(spec)
			if err != nil {
				return fmt.Errorf("%s.%s: %q is not a cron expression: %w", key, name, spec, err)
			}
			ch := ""
			if len(cl.Channels) > 0 {
				ch = cl.Channels[0]
			}
			out = append(out, &Job{Cluster: name, Channel: ch, Command: command, Text: "/talos " + command + " " + name, Spec: spec, sched: s})
		}
		return nil
	}
	if err := add("snapshots.schedule", "snapshot", cfg.Snapshots.Schedule); err != nil {
		return nil, err
	}
	if err := add("snapshots.drill_schedule", "restore-drill", cfg.Snapshots.DrillSchedules()); err != nil {
		return nil, err
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
	jobs, err := Jobs(o.Config)
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
		to := bot.Origin{User: User, Channel: j.Channel, System: true}
		var lock *state.Lock
		err := s.o.Store.View(ctx, func(tx *state.Tx) error {
			var err error
			lock, err = tx.Lock(j.Cluster)
			return err
		})
		switch {
		case err != nil:
			oc.Err = fmt.Errorf("read the lock of %s: %w", j.Cluster, err)
		case lock != nil:
			oc.Skipped = fmt.Sprintf("⏭️ scheduled %s skipped: %s holds the %s lock (%s by %s); next run %s",
				j.Text, lock.OpID, j.Cluster, lock.Command, lock.Holder, j.next.UTC().Format(time.RFC3339))
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

// Run ticks at each job's due time until ctx ends.
func (s *Scheduler) Run(ctx context.Context) error {
	if len(s.jobs) == 0 {
		return nil
	}
	for {
		next := s.jobs[0].next
		for _, j := range s.jobs[1:] {
			if j.next.Before(next) {
				next = j.next
			}
		}
		t := time.NewTimer(max(0, next.Sub(s.o.Now())))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
			s.Tick(ctx, s.o.Now())
		}
	}
}
