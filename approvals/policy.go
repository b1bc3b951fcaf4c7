// Package approvals decides who may request, approve and run what: roles per
// environment, N-of-M approvals bound to a plan digest, self-approval and
// expiry. The engine (package bot) asks; this package answers from config.
package approvals

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/talosbot/talosbot/bot"
	"github.com/talosbot/talosbot/config"
	"github.com/talosbot/talosbot/state"
)

// Policy implements bot.Policy from the configuration.
type Policy struct {
	cfg *config.Config
}

// New returns the policy for cfg.
func New(cfg *config.Config) *Policy { return &Policy{cfg: cfg} }

var _ bot.Policy = (*Policy)(nil)

func (p *Policy) env(name string) config.Policy { return p.cfg.Policy[name] }

// expand resolves "group:NAME" entries into their members.
func (p *Policy) expand(list []string) []string {
	var out []string
	for _, m := range list {
		if g, ok := strings.CutPrefix(m, "group:"); ok {
			out = append(out, p.cfg.Groups[g]...)
			continue
		}
		out = append(out, m)
	}
	return out
}

// Role is what a user may do in an environment.
type Role string

// Roles, from most to least privileged.
const (
	RoleOperator Role = "operator"
	RoleViewer   Role = "viewer"
	RoleNone     Role = "none"
)

// RoleOf returns the user's role in env. With no operators and no viewers
// configured for env, everyone is an operator (a solo setup).
func (p *Policy) RoleOf(env, user string) Role {
	pol := p.env(env)
	ops, viewers := p.expand(pol.Operators), p.expand(pol.Viewers)
	switch {
	case slices.Contains(ops, user), slices.Contains(p.expand(pol.Approvers), user) && len(ops) > 0:
		return RoleOperator
	case slices.Contains(viewers, user):
		return RoleViewer
	case len(ops) == 0 && len(viewers) == 0:
		return RoleOperator
	}
	return RoleNone
}

// Authorize refuses a request the user's role does not allow.
func (p *Policy) Authorize(_ context.Context, req bot.PolicyRequest) error {
	env := req.Cluster.Environment
	switch p.RoleOf(env, req.User) {
	case RoleOperator:
		return nil
	case RoleViewer:
		if req.Disruptive {
			return fmt.Errorf("%s is a viewer in %s and may only read (health, status, audit); ask an operator to run %q", req.User, env, req.Command)
		}
		return nil
	}
	return fmt.Errorf("%s has no role in %s; add the user to policy.%s.operators or policy.%s.viewers", req.User, env, env, env)
}

// RequiredApprovals returns how many approvals op needs: by default every
// disruptive command in production needs min_approvals, staging none.
func (p *Policy) RequiredApprovals(op *state.Operation) int {
	if !op.Disruptive {
		return 0
	}
	pol := p.env(op.Environment)
	need := false
	if pol.Approval != nil {
		need = slices.Contains(*pol.Approval, op.Command)
	} else {
		need = op.Environment == config.EnvProduction
	}
	if !need {
		return 0
	}
	return max(pol.MinApprovals, 1)
}

// CanApprove refuses users who are not approvers, and requesters approving
// their own request unless allow_self_approval is set.
func (p *Policy) CanApprove(op *state.Operation, user string) error {
	pol := p.env(op.Environment)
	approvers := p.expand(pol.Approvers)
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
