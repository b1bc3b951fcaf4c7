package approvals

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/talosbot/talosbot/bot"
	"github.com/talosbot/talosbot/config"
	"github.com/talosbot/talosbot/state"
)

const clusters = `
clusters:
  - name: staging
    environment: staging
    endpoints: [10.0.20.204]
    nodes: [{name: cp-1, address: 10.0.20.204, role: controlplane, host: pve5}]
    credentials: {source: files, talosconfig: file:/etc/tc}
  - name: production
    environment: production
    endpoints: [10.0.30.11]
    nodes: [{name: cp-1, address: 10.0.30.11, role: controlplane, host: pve1}]
    credentials: {source: files, talosconfig: file:/etc/tc}
`

func mustPolicy(t *testing.T, doc string) (*Policy, *config.Config) {
	t.Helper()
	cfg, err := config.Parse([]byte(clusters + doc))
	if err != nil {
		t.Fatal(err)
	}
	return New(cfg), cfg
}

func prodOp(requester string) *state.Operation {
	return &state.Operation{ID: "op1", Cluster: "production", Environment: config.EnvProduction, Command: "upgrade talos", Disruptive: true, Requester: requester}
}

// A requester who is also an approver may not approve their own request
// while allow_self_approval is off; another approver may.
func TestSelfApprovalRefusedForRequesterWhoIsAnApprover(t *testing.T) {
	p, _ := mustPolicy(t, `
groups: {sre: [alice, bob]}
policy:
  staging: {operators: [alice]}
  production: {operators: [group:sre], approvers: [group:sre], allow_self_approval: false}
`)
	op := prodOp("alice")
	err := p.CanApprove(op, "alice")
	if err == nil || !strings.Contains(err.Error(), "alice requested op1 and cannot approve it") {
		t.Fatalf("self-approval: %v", err)
	}
	if err := p.CanApprove(op, "bob"); err != nil {
		t.Fatalf("another approver: %v", err)
	}
	if err := p.CanApprove(op, "carol"); err == nil || !strings.Contains(err.Error(), "not an approver") {
		t.Fatalf("non-approver: %v", err)
	}
}

func TestSelfApprovalAllowedOnlyWhenConfigured(t *testing.T) {
	p, _ := mustPolicy(t, `
policy:
  staging: {operators: [alice]}
  production: {approvers: [alice], allow_self_approval: true}
`)
	if err := p.CanApprove(prodOp("alice"), "alice"); err != nil {
		t.Fatalf("solo operator: %v", err)
	}
	// allow_self_approval does not make a non-approver an approver.
	if err := p.CanApprove(prodOp("dave"), "dave"); err == nil {
		t.Fatal("dave is no approver")
	}
}

func TestRoles(t *testing.T) {
	p, _ := mustPolicy(t, `
groups: {sre: [alice]}
policy:
  staging: {operators: ["*"]}
  production: {operators: [group:sre], approvers: [bob], viewers: [carol]}
`)
	for _, c := range []struct {
		env, user string
		want      Role
	}{
		{"production", "alice", RoleOperator}, // through the group
		{"production", "bob", RoleOperator},   // approvers operate
		{"production", "carol", RoleViewer},
		{"production", "mallory", RoleNone},
		{"production", "", RoleNone},
		{"staging", "mallory", RoleOperator}, // "*" written out
		{"staging", "", RoleNone},
	} {
		if got := p.RoleOf(c.env, c.user); got != c.want {
			t.Errorf("RoleOf(%s, %q) = %s, want %s", c.env, c.user, got, c.want)
		}
	}
}

// An empty or missing list is no one, not everyone (Validate rejects such a
// config, and the policy fails closed even if it were used).
func TestEmptyListsGrantNothing(t *testing.T) {
	p := New(&config.Config{Policy: map[string]config.Policy{config.EnvStaging: {}, config.EnvProduction: {Operators: []string{"group:missing"}}}})
	for _, env := range []string{config.EnvStaging, config.EnvProduction} {
		if r := p.RoleOf(env, "alice"); r != RoleNone {
			t.Errorf("%s: alice is %s with empty lists", env, r)
		}
	}
}

func TestViewerMayNotRunWriteCommands(t *testing.T) {
	p, cfg := mustPolicy(t, `
policy:
  staging: {operators: [alice], viewers: [carol]}
  production: {operators: [alice], approvers: [bob], viewers: [carol]}
`)
	req := bot.PolicyRequest{User: "carol", Cluster: cfg.Cluster("production"), Command: "snapshot", Writes: true, Now: time.Now()}
	if err := p.Authorize(context.Background(), req); err == nil || !strings.Contains(err.Error(), "carol is a viewer in production and may only read") {
		t.Fatalf("viewer snapshot: %v", err)
	}
	req.User = "alice"
	// An operator may, also while frozen: a snapshot does not disrupt.
	req.Frozen = &bot.Freeze{By: "bob", Reason: "drill", Since: time.Now()}
	if err := p.Authorize(context.Background(), req); err != nil {
		t.Fatalf("operator snapshot: %v", err)
	}
	req.User, req.Writes = "carol", false
	if err := p.Authorize(context.Background(), req); err != nil {
		t.Fatalf("viewer read: %v", err)
	}
}

func TestRequiredApprovals(t *testing.T) {
	p, _ := mustPolicy(t, `
policy:
  staging: {operators: [alice], approvers: [bob], approval_commands: [upgrade talos]}
  production: {operators: [alice], approvers: [bob, dave], min_approvals: 2, no_approval_commands: [rollback]}
`)
	for _, c := range []struct {
		name string
		op   state.Operation
		want int
	}{
		{"production upgrade", state.Operation{Environment: "production", Command: "upgrade talos", Disruptive: true}, 2},
		{"production rollback, exempt", state.Operation{Environment: "production", Command: "rollback", Disruptive: true}, 0},
		{"exempt, but outside the window", state.Operation{Environment: "production", Command: "rollback", Disruptive: true, Args: map[string]string{bot.FlagOutsideWindow: "true"}}, 2},
		{"skip-staging adds one", state.Operation{Environment: "production", Command: "upgrade talos", Disruptive: true, Flags: []string{bot.FlagSkipStaging}}, 3},
		{"read-only", state.Operation{Environment: "production", Command: "health"}, 0},
		{"staging listed", state.Operation{Environment: "staging", Command: "upgrade talos", Disruptive: true}, 1},
		{"staging not listed", state.Operation{Environment: "staging", Command: "rollback", Disruptive: true}, 0},
	} {
		if got := p.RequiredApprovals(&c.op); got != c.want {
			t.Errorf("%s: RequiredApprovals = %d, want %d", c.name, got, c.want)
		}
	}
}

func TestFrozenAndWindowRefusals(t *testing.T) {
	p, cfg := mustPolicy(t, `
policy:
  staging: {operators: [alice]}
  production:
    operators: [alice]
    approvers: [bob]
    maintenance_windows: [{days: [tue], start: "20:00", end: "23:00", timezone: UTC}]
`)
	monday := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	req := bot.PolicyRequest{User: "alice", Cluster: cfg.Cluster("production"), Command: "upgrade talos", Disruptive: true, Now: monday}
	if err := p.Authorize(context.Background(), req); err == nil || !strings.Contains(err.Error(), "outside every production maintenance window") {
		t.Fatalf("outside window: %v", err)
	}
	req.Args = map[string]string{bot.FlagOutsideWindow: "true"}
	if err := p.Authorize(context.Background(), req); err != nil {
		t.Fatalf("--outside-window: %v", err)
	}
	req.Frozen = &bot.Freeze{By: "bob", Reason: "drill", Since: monday}
	if err := p.Authorize(context.Background(), req); err == nil || !strings.Contains(err.Error(), "frozen by bob") {
		t.Fatalf("frozen: %v", err)
	}
	req.Housekeeping = true // unfreeze, abandon: allowed while frozen
	if err := p.Authorize(context.Background(), req); err != nil {
		t.Fatalf("housekeeping: %v", err)
	}
}
