// Package approvals decides who may request, approve and run what: roles per
// environment, N-of-M approvals bound to a plan digest, self-approval and
// expiry. The engine (package bot/engine) asks; this package answers from config.
package approvals

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/talosbot/talosbot/config"
	"github.com/talosbot/talosbot/state"
)

// Policy answers the engine's policy questions (bot/engine.Policy) from the configuration.
type Policy struct {
	cfg *config.Config
}

// New returns the policy for cfg. What commands declare (min_approvals)
// comes with each RequiredApprovals call, from the engine's command specs,
// so the policy names no command itself.
func New(cfg *config.Config) *Policy { return &Policy{cfg: cfg} }

func (p *Policy) env(name string) config.Policy { return p.cfg.Policy[name] }

// Role is what a user may do in an environment.
type Role string

// Roles, from most to least privileged.
const (
	RoleOperator Role = "operator"
	RoleViewer   Role = "viewer"
	RoleNone     Role = "none"
)

// RoleOf returns the user's role in env. Only what is written grants a role:
// a user named (directly or through a group) under operators or approvers is
// an operator, under viewers a viewer, and "*" gives the role to everyone. An
// empty or missing list gives it to no one, so a typo never widens access.
func (p *Policy) RoleOf(env, user string) Role {
	if user == "" {
		return RoleNone
	}
	pol := p.env(env)
	ops, allOps := p.cfg.Members(pol.Operators)
	approvers, _ := p.cfg.Members(pol.Approvers)
	viewers, allViewers := p.cfg.Members(pol.Viewers)
	switch {
	case allOps, slices.Contains(ops, user), slices.Contains(approvers, user):
		return RoleOperator
	case allViewers, slices.Contains(viewers, user):
		return RoleViewer
	}
	return RoleNone
}

// Authorize refuses a request the user's role does not allow, a disruptive
// request on a frozen cluster, and a production disruptive request outside
// every maintenance window (unless --outside-window). Viewers may only run
// read-only commands: a WRITE command (e.g. a snapshot, which applies
// retention) needs an operator although it needs no approval.
func (p *Policy) Authorize(_ context.Context, req Request) error {
	env := req.Cluster.Environment
	switch role := p.RoleOf(env, req.User); {
	case req.System:
		// The configuration is the scheduler's authority (Request.System).
	case role == RoleOperator:
	case role == RoleViewer:
		if req.Disruptive || req.Writes {
			return fmt.Errorf("%s is a viewer in %s and may only read (health, status, audit); ask an operator to run %q", req.User, env, req.Command)
		}
		return nil
	default:
		return fmt.Errorf("%s has no role in %s; add the user to policy.%s.operators or policy.%s.viewers", req.User, env, env, env)
	}
	if !req.Disruptive || req.Housekeeping {
		return nil
	}
	if f := req.Frozen; f != nil {
		return fmt.Errorf("cluster %s is frozen by %s since %s: %q; disruptive commands wait until `/talos unfreeze %s`",
			req.Cluster.Name, f.By, f.Since.UTC().Format("2006-01-02 15:04 MST"), f.Reason, req.Cluster.Name)
	}
	if req.System {
		// A scheduled disruption has no one to ask for --outside-window, and
		// an environment without windows gives it no time to run in.
		if ws := p.env(env).Windows; !InWindow(ws, req.Now) {
			return fmt.Errorf("a scheduled run of %s may start only inside the maintenance window of %s (%s); it is %s",
				req.Command, env, DescribeWindows(ws), req.Now.UTC().Format("Mon 15:04 MST"))
		}
		return nil
	}
	if env == config.EnvProduction && req.Args[FlagOutsideWindow] != "true" {
		if ws := p.env(env).Windows; len(ws) > 0 && !InWindow(ws, req.Now) {
			return fmt.Errorf("%s is outside every production maintenance window (%s); wait for the window, or add --%s (it needs approval and is flagged in the audit)",
				req.Now.UTC().Format("Mon 15:04 MST"), DescribeWindows(ws), FlagOutsideWindow)
		}
	}
	return nil
}

// InWindow reports whether t falls in one of the windows. A window whose end
// is before its start runs past midnight (22:00–02:00).
func InWindow(ws []config.Window, t time.Time) bool {
	for _, w := range ws {
		loc, err := time.LoadLocation(w.Timezone)
		if err != nil {
			continue // config validation rejects unknown zones
		}
		lt := t.In(loc)
		start, err1 := time.Parse("15:04", w.Start)
		end, err2 := time.Parse("15:04", w.End)
		if err1 != nil || err2 != nil {
			continue
		}
		mins := lt.Hour()*60 + lt.Minute()
		s, e := start.Hour()*60+start.Minute(), end.Hour()*60+end.Minute()
		day := strings.ToLower(lt.Weekday().String()[:3])
		prevDay := strings.ToLower(lt.Add(-24 * time.Hour).Weekday().String()[:3])
		for _, d := range w.Days {
			d = strings.ToLower(d)
			switch {
			case s <= e && d == day && mins >= s && mins < e:
				return true
			case s > e && d == day && mins >= s: // before midnight
				return true
			case s > e && d == prevDay && mins < e: // after midnight, window began yesterday
				return true
			}
		}
	}
	return false
}

// NextOpening returns the first time after t at which one of the windows
// opens, within the coming eight days (a window opens at least weekly), and
// false when none does (no windows, or none with a valid day and time).
func NextOpening(ws []config.Window, t time.Time) (time.Time, bool) {
	var best time.Time
	for _, w := range ws {
		loc, err := time.LoadLocation(w.Timezone)
		if err != nil {
			continue
		}
		start, err := time.Parse("15:04", w.Start)
		if err != nil {
			continue
		}
		lt := t.In(loc)
		for d := 0; d <= 8; d++ {
			// time.Date per day keeps the wall-clock start across a DST change.
			at := time.Date(lt.Year(), lt.Month(), lt.Day()+d, start.Hour(), start.Minute(), 0, 0, loc)
			if !at.After(t) || !slices.ContainsFunc(w.Days, func(day string) bool {
				return strings.EqualFold(day, at.Weekday().String()[:3])
			}) {
				continue
			}
			if best.IsZero() || at.Before(best) {
				best = at
			}
			break
		}
	}
	return best, !best.IsZero()
}

// DescribeWindows renders windows for messages: "tue,thu 20:00–23:00 Europe/Berlin".
func DescribeWindows(ws []config.Window) string {
	parts := make([]string, 0, len(ws))
	for _, w := range ws {
		parts = append(parts, fmt.Sprintf("%s %s–%s %s", strings.Join(w.Days, ","), w.Start, w.End, w.Timezone))
	}
	return strings.Join(parts, "; ")
}

// Promotion enforces R6: a production disruptive operation with target X
// needs a succeeded staging operation of the same command and target within
// promotion_max_age. --skip-staging allows it with one extra approval.
func (p *Policy) Promotion(op *state.Operation, last StagingLookup, now time.Time) ([]string, error) {
	if op.Environment != config.EnvProduction || !op.Disruptive || op.Target == "" { // rule:R6
		return nil, nil
	}
	maxAge := p.env(config.EnvProduction).PromotionMaxAge.D()
	if maxAge <= 0 {
		maxAge = config.DefaultPromotionMaxAge
	}
	prev, err := last(op.Command, op.Target, now.Add(-maxAge))
	if err != nil {
		return nil, err
	}
	if prev != nil {
		return []string{FlagPromotedFrom + prev.ID}, nil
	}
	if op.Args[FlagSkipStaging] == "true" {
		return []string{FlagSkipStaging}, nil
	}
	staging := "staging"
	for _, cl := range p.cfg.Clusters {
		if cl.Environment == config.EnvStaging {
			staging = cl.Name
			break
		}
	}
	// A multi-hop target spells its path ("v1.11.6 → v1.12.6 → v1.13.9"):
	// staging must have taken the same path, and the command names the
	// final version (docs/RELEASES.md "Multi-hop upgrades").
	arg, same := op.Target, ""
	if i := strings.LastIndex(op.Target, pathSep); i >= 0 {
		arg, same = op.Target[i+len(pathSep):], " (from the same minor, so that staging takes the same path)"
	}
	return nil, fmt.Errorf("R6: %s %s has not succeeded on staging in the last %s; run `/talos %s %s %s` first%s, or add --%s (needs one extra approval, flagged in the audit)",
		op.Command, op.Target, age(maxAge), op.Command, arg, staging, same, FlagSkipStaging)
}

// pathSep separates the stops of a multi-hop target.
const pathSep = " → "

// RequiredApprovals returns how many approvals op needs: every disruptive
// command in production needs min_approvals unless no_approval_commands
// names it; in staging only those approval_commands names. A command whose
// manifest declares min_approvals (declared > 0) always needs approval (no
// list exempts it) and, in production, at least that many unless
// allow_self_approval is set (a solo operator).
func (p *Policy) RequiredApprovals(op *state.Operation, declared int) int {
	if !op.Disruptive {
		return 0
	}
	pol := p.env(op.Environment)
	need := pol.NeedsApproval(op.Environment, op.Command) || declared > 0
	if op.Args[FlagOutsideWindow] == "true" || slices.Contains(op.Flags, FlagSkipStaging) {
		need = true // outside the window, or without staging, only with approval
	}
	if !need {
		return 0
	}
	n := max(pol.MinApprovals, 1)
	if declared > 0 && op.Environment == config.EnvProduction && !pol.AllowSelfApproval {
		n = max(n, declared)
	}
	if slices.Contains(op.Flags, FlagSkipStaging) {
		n++ // skipping staging needs one extra approval
	}
	return n
}

// CanApprove refuses users who are not approvers, and requesters approving
// their own request unless allow_self_approval is set.
func (p *Policy) CanApprove(op *state.Operation, user string) error {
	pol := p.env(op.Environment)
	approvers, _ := p.cfg.Members(pol.Approvers)
	if user == op.Requester && !pol.AllowSelfApproval {
		return fmt.Errorf("%s requested %s and cannot approve it: another approver must (policy.%s.allow_self_approval is false)", user, op.ID, op.Environment)
	}
	if !slices.Contains(approvers, user) {
		return fmt.Errorf("%s is not an approver for %s (policy.%s.approvers)", user, op.Environment, op.Environment)
	}
	return nil
}

// Expiry is how long an approval request stays open.
func (p *Policy) Expiry(op *state.Operation) time.Duration {
	if d := p.env(op.Environment).Expiry.D(); d > 0 {
		return d
	}
	return config.DefaultExpiry
}
