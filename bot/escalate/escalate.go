// Package escalate speaks up when a step of a running operation is late
// (docs/OPERATIONS.md "Late steps"). Each step has an expected duration: the
// 95th percentile of the past runs of the same step on the same cluster
// (from the store, its newest 200 operations; a node's name in the step id
// is generalised, so node/cp-1/upgrade learns from node/cp-2/upgrade), or
// half its timeout when there is no history. Past it, the bot posts once in
// the operation's thread what it waits for and what it sees now (the step's
// last detail, e.g.
// "cp-2: booted, not ready: kubelet"); past twice that, it posts again and
// mentions the approvers (or escalation.mention). Each notice is made once
// per operation, attempt, step and threshold, recorded in the store, so a
// restart does not repeat it.
//
// The checker is driven by Check with the clock it was given; Run calls it
// every escalation.every.
package escalate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/talosbot/talosbot/bot/chat"
	"github.com/talosbot/talosbot/bot/engine"
	"github.com/talosbot/talosbot/config"
	"github.com/talosbot/talosbot/state"
)

// Bucket records the notices made: key op/attempt/step/threshold.
const Bucket = "escalations"

// Options configure a Checker.
type Options struct {
	Config *config.Config
	Store  *state.Store
	Sink   engine.Sink
	Clock  func() time.Time
	Logger *slog.Logger
}

// Checker finds late steps.
type Checker struct {
	o   Options
	log *slog.Logger
}

// New returns a Checker.
func New(o Options) (*Checker, error) {
	if o.Config == nil || o.Store == nil || o.Sink == nil {
		return nil, errors.New("escalate: Config, Store and Sink are required")
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Checker{o: o, log: o.Logger}, nil
}

// Run checks every escalation.every until ctx ends.
func (c *Checker) Run(ctx context.Context) error {
	t := time.NewTicker(c.o.Config.Escalation.Every.D())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if _, err := c.Check(ctx); err != nil {
				c.log.Warn("look for late steps", "err", err)
			}
		}
	}
}

// Late is one running step past its expected duration.
type Late struct {
	Op       *state.Operation
	Step     state.Step
	Running  time.Duration
	Expected time.Duration
	// Basis says where Expected comes from ("p95 of 7 past runs", "half
	// the 10m timeout").
	Basis string
}

// Text is the notice's line: what the step waits for and what it sees now.
func (l Late) Text() string {
	what := l.Step.Title
	if what == "" {
		what = l.Step.ID
	}
	if l.Step.Node != "" && !strings.Contains(what, l.Step.Node) {
		what = l.Step.Node + " · " + what
	}
	now := l.Step.Detail
	if now == "" {
		now = "no news from the plugin since it started"
	}
	return fmt.Sprintf("⏳ %s is late: running %s, expected %s (%s); waiting for it to finish; now: %s",
		what, chat.Duration(l.Running), chat.Duration(l.Expected), l.Basis, now)
}

// LateSteps lists the running steps of running operations past their
// expected duration at now (for /talos status and Check).
func LateSteps(ctx context.Context, cfg *config.Config, st *state.Store, now time.Time) ([]Late, error) {
	var out []Late
	err := st.View(ctx, func(tx *state.Tx) error {
		running, err := tx.Operations(state.OpFilter{States: []state.OpState{state.StateRunning}})
		if err != nil {
			return err
		}
		hist := map[string]map[string][]time.Duration{} // cluster → step kind → durations
		for _, op := range running {
			for _, s := range op.Steps {
				if s.Status != "running" || s.StartedAt.IsZero() {
					continue
				}
				if hist[op.Cluster] == nil {
					if hist[op.Cluster], err = history(tx, op.Cluster); err != nil {
						return err
					}
				}
				exp, basis := expected(cfg, s, hist[op.Cluster][kind(s)])
				if run := now.Sub(s.StartedAt); run > exp {
					out = append(out, Late{Op: op, Step: s, Running: run, Expected: exp, Basis: basis})
				}
			}
		}
		return nil
	})
	return out, err
}

// historyOps bounds how many of a cluster's newest operations the expected
// durations learn from: the check runs every escalation.every (and in
// /talos status) while a step runs, and must not read a cluster's whole
// past each time; recent runs say more about the next one anyway. The
// engine's facts are bounded alike.
const historyOps = 200

// history gathers the durations of finished steps on cluster, by kind,
// from its newest historyOps operations.
func history(tx *state.Tx, cluster string) (map[string][]time.Duration, error) {
	ops, err := tx.Operations(state.OpFilter{Cluster: cluster, Limit: historyOps})
	if err != nil {
		return nil, err
	}
	out := map[string][]time.Duration{}
	add := func(steps []state.Step) {
		for _, s := range steps {
			if s.Status == "ok" && !s.StartedAt.IsZero() && s.EndedAt.After(s.StartedAt) {
				out[kind(s)] = append(out[kind(s)], s.EndedAt.Sub(s.StartedAt))
			}
		}
	}
	for _, op := range ops {
		add(op.Steps)
		for _, a := range op.History {
			add(a.Steps)
		}
	}
	return out, nil
}

// kind is a step's id with its node's name generalised.
func kind(s state.Step) string {
	if s.Node == "" {
		return s.ID
	}
	parts := strings.Split(s.ID, "/")
	for i, p := range parts {
		if p == s.Node {
			parts[i] = "*"
		}
	}
	return strings.Join(parts, "/")
}

// expected is the p95 of past durations, or half the step's timeout.
func expected(cfg *config.Config, s state.Step, past []time.Duration) (time.Duration, string) {
	if len(past) > 0 {
		return P95(past), fmt.Sprintf("p95 of %d past run(s) on this cluster", len(past))
	}
	t := timeout(cfg, s)
	return t / 2, fmt.Sprintf("half the %s timeout, no history yet", chat.Duration(t))
}

// timeout is the step's bound: the gate after a node for gates, the node
// timeout for a node's step, else the run timeout.
func timeout(cfg *config.Config, s state.Step) time.Duration {
	switch {
	case isGate(s):
		return cfg.Timeouts.GateAfter.D()
	case s.Node != "":
		return cfg.Timeouts.Node.D()
	default:
		return cfg.Timeouts.Run.D()
	}
}

// isGate reports whether a part of the step's id is a gate ("gate",
// "gate-after", …). The node's own name is left out (kind), so the upgrade
// of a node named gateway-1 is not taken for a gate.
func isGate(s state.Step) bool {
	for _, p := range strings.Split(kind(s), "/") {
		if p == "gate" || strings.HasPrefix(p, "gate-") {
			return true
		}
	}
	return false
}

// P95 is the nearest-rank 95th percentile.
func P95(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[int(math.Ceil(0.95*float64(len(s))))-1]
}

// Check posts the notices due now and returns how many it posted.
func (c *Checker) Check(ctx context.Context) (int, error) {
	if c.o.Config.Escalation.Disabled {
		return 0, nil
	}
	late, err := LateSteps(ctx, c.o.Config, c.o.Store, c.o.Clock())
	if err != nil {
		return 0, err
	}
	n := 0
	for _, l := range late {
		level := "late"
		text := l.Text()
		var users []string
		if l.Running > 2*l.Expected {
			level = "escalated"
			var note string
			users, note = c.mention(l.Op)
			text += "\n🔔 past twice the expected time, please look" + note
		}
		first, err := c.once(ctx, l, level)
		if err != nil {
			return n, err
		}
		if !first {
			continue
		}
		if level == "escalated" {
			// The first notice is implied by the second: never two at once.
			_, _ = c.once(ctx, l, "late")
		}
		c.post(ctx, l.Op, text, users)
		n++
	}
	return n, nil
}

// once records the notice and reports whether it is new.
func (c *Checker) once(ctx context.Context, l Late, level string) (bool, error) {
	key := fmt.Sprintf("%s/%d/%s/%s", l.Op.ID, l.Op.Attempts, l.Step.ID, level)
	first := false
	err := c.o.Store.Update(ctx, func(tx *state.Tx) error {
		if _, err := tx.GetKV(Bucket, key); err == nil {
			return nil
		} else if !errors.Is(err, state.ErrNotFound) {
			return err
		}
		first = true
		return tx.PutKV(Bucket, key, []byte(c.o.Clock().UTC().Format(time.RFC3339)))
	})
	return first, err
}

// MentionSink is a Sink that can ping users in an operation's thread (the
// renderer, through chat.Message.Mentions, which each chat adapter renders
// as its platform's real mention). A Sink without it gets "@name" as text,
// which pings nobody: every adapter escapes text.
type MentionSink interface {
	ThreadMention(ctx context.Context, op *state.Operation, text string, users []string)
}

// post puts the notice in the operation's thread, mentioning users.
func (c *Checker) post(ctx context.Context, op *state.Operation, text string, users []string) {
	if ms, ok := c.o.Sink.(MentionSink); ok && len(users) > 0 {
		ms.ThreadMention(ctx, op, text, users)
		return
	}
	if len(users) > 0 {
		at := make([]string, 0, len(users))
		for _, u := range users {
			at = append(at, "@"+u)
		}
		text += ": " + strings.Join(at, " ")
	}
	c.o.Sink.Thread(ctx, op, text)
}

// mention is who the escalation pings: escalation.mention, or the approvers
// of the operation's cluster (the policy of its environment), as user ids
// without a leading "@". With nobody to ping, note says so in the text.
func (c *Checker) mention(op *state.Operation) (users []string, note string) {
	list := c.o.Config.Escalation.Mention
	if len(list) == 0 {
		env := op.Environment
		if cl := c.o.Config.Cluster(op.Cluster); cl != nil {
			env = cl.Environment
		}
		list, _ = c.o.Config.Members(c.o.Config.Policy[env].Approvers)
	}
	for _, u := range list {
		if u = strings.TrimPrefix(strings.TrimSpace(u), "@"); u != "" {
			users = append(users, u)
		}
	}
	if len(users) == 0 {
		return nil, " (approvers of " + op.Cluster + ": none configured; set escalation.mention)"
	}
	return users, ""
}
