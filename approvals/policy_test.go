package approvals

import (
	"context"
	"strings"
	"testing"
	"time"

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
	req := Request{User: "carol", Cluster: cfg.Cluster("production"), Command: "snapshot", Writes: true, Now: time.Now()}
	if err := p.Authorize(context.Background(), req); err == nil || !strings.Contains(err.Error(), "carol is a viewer in production and may only read") {
		t.Fatalf("viewer snapshot: %v", err)
	}
	req.User = "alice"
	// An operator may, also while frozen: a snapshot does not disrupt.
	req.Frozen = &Freeze{By: "bob", Reason: "drill", Since: time.Now()}
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
		{"exempt, but outside the window", state.Operation{Environment: "production", Command: "rollback", Disruptive: true, Args: map[string]string{FlagOutsideWindow: "true"}}, 2},
		{"skip-staging adds one", state.Operation{Environment: "production", Command: "upgrade talos", Disruptive: true, Flags: []string{FlagSkipStaging}}, 3},
		{"read-only", state.Operation{Environment: "production", Command: "health"}, 0},
		{"staging listed", state.Operation{Environment: "staging", Command: "upgrade talos", Disruptive: true}, 1},
		{"staging not listed", state.Operation{Environment: "staging", Command: "rollback", Disruptive: true}, 0},
	} {
		if got := p.RequiredApprovals(&c.op, 0); got != c.want {
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
	req := Request{User: "alice", Cluster: cfg.Cluster("production"), Command: "upgrade talos", Disruptive: true, Now: monday}
	if err := p.Authorize(context.Background(), req); err == nil || !strings.Contains(err.Error(), "outside every production maintenance window") {
		t.Fatalf("outside window: %v", err)
	}
	req.Args = map[string]string{FlagOutsideWindow: "true"}
	if err := p.Authorize(context.Background(), req); err != nil {
		t.Fatalf("--outside-window: %v", err)
	}
	req.Frozen = &Freeze{By: "bob", Reason: "drill", Since: monday}
	if err := p.Authorize(context.Background(), req); err == nil || !strings.Contains(err.Error(), "frozen by bob") {
		t.Fatalf("frozen: %v", err)
	}
	req.Housekeeping = true // unfreeze, abandon: allowed while frozen
	if err := p.Authorize(context.Background(), req); err != nil {
		t.Fatalf("housekeeping: %v", err)
	}
}

// The R6 refusal says its window in words ("14 days"), not "336h0m0s".
func TestPromotionRefusalSaysTheWindowInWords(t *testing.T) {
	cfg := &config.Config{Clusters: []config.Cluster{{Name: "staging", Environment: config.EnvStaging}}}
	p := New(cfg)
	op := &state.Operation{Environment: config.EnvProduction, Disruptive: true, Command: "upgrade talos", Target: "v1.13.9"}
	_, err := p.Promotion(op, func(string, string, time.Time) (*state.Operation, error) { return nil, nil }, time.Now())
	if err == nil || !strings.Contains(err.Error(), "in the last 14 days;") || strings.Contains(err.Error(), "336h") {
		t.Fatalf("R6 refusal: %v", err)
	}
}

// A command whose manifest declares min_approvals needs that many in
// production (however low min_approvals is, whatever no_approval_commands
// says), approval also in staging, and the policy's own minimum where a solo
// operator may approve their own request; a configured minimum above the
// declared one wins. Declaring nothing leaves it to the configuration.
func TestDeclaredMinApprovals(t *testing.T) {
	p, _ := mustPolicy(t, `
policy:
  staging: {operators: [alice]}
  production: {operators: [alice, bob], approvers: [alice, bob], min_approvals: 1, no_approval_commands: [recover]}
`)
	op := func(env, cmd string) *state.Operation {
		return &state.Operation{ID: "op1", Cluster: env, Environment: env, Command: cmd, Disruptive: true, Requester: "alice"}
	}
	for _, c := range []struct {
		env      string
		cmd      string
		declared int
		want     int
	}{
		{config.EnvProduction, "recover", 2, 2},
		{config.EnvProduction, "upgrade talos", 0, 1},
		{config.EnvStaging, "recover", 2, 1},
		{config.EnvStaging, "upgrade talos", 0, 0},
		{config.EnvProduction, "recover", 0, 0}, // exempted by the config when nothing is declared
	} {
		if got := p.RequiredApprovals(op(c.env, c.cmd), c.declared); got != c.want {
			t.Errorf("%s %s declaring %d: %d approvals, want %d", c.env, c.cmd, c.declared, got, c.want)
		}
	}
	three, _ := mustPolicy(t, `
policy:
  staging: {operators: [alice]}
  production: {operators: [alice, bob, carol, dave], approvers: [bob, carol, dave], min_approvals: 3}
`)
	if got := three.RequiredApprovals(op(config.EnvProduction, "recover"), 2); got != 3 {
		t.Errorf("configured 3, declared 2: %d approvals, want 3", got)
	}
	solo, _ := mustPolicy(t, `
policy:
  staging: {operators: [alice]}
  production: {operators: [alice], approvers: [alice], min_approvals: 1, allow_self_approval: true}
`)
	if got := solo.RequiredApprovals(op(config.EnvProduction, "recover"), 2); got != 1 {
		t.Errorf("solo operator: %d approvals, want 1", got)
	}
}

// A multi-hop target (the path) must match a staging run of the same path;
// the refusal names the command with the final version.
func TestPromotionOfAPathNeedsTheSamePathOnStaging(t *testing.T) {
	cfg := &config.Config{Clusters: []config.Cluster{{Name: "staging", Environment: config.EnvStaging}}}
	p := New(cfg)
	path := "v1.11.6 → v1.12.6 → v1.13.9"
	op := &state.Operation{Environment: config.EnvProduction, Disruptive: true, Command: "upgrade talos", Target: path}
	var asked string
	_, err := p.Promotion(op, func(_, target string, _ time.Time) (*state.Operation, error) { asked = target; return nil, nil }, time.Now())
	if asked != path {
		t.Fatalf("looked up %q, want the whole path", asked)
	}
	if err == nil || !strings.Contains(err.Error(), "run `/talos upgrade talos v1.13.9 staging` first (from the same minor") {
		t.Fatalf("R6 refusal: %v", err)
	}
	flags, err := p.Promotion(op, func(_, target string, _ time.Time) (*state.Operation, error) {
		if target == path {
			return &state.Operation{ID: "op-staging"}, nil
		}
		return nil, nil
	}, time.Now())
	if err != nil || len(flags) != 1 || flags[0] != FlagPromotedFrom+"op-staging" {
		t.Fatalf("promoted: %v %v", flags, err)
	}
}

// NextOpening is the first opening after now, across windows and days, in
// each window's own zone (a DST change keeps the wall-clock start), and
// none without a usable window.
func TestNextOpening(t *testing.T) {
	ws := []config.Window{
		{Days: []string{"tue", "thu"}, Start: "20:00", End: "23:00", Timezone: "Europe/Berlin"},
		{Days: []string{"sat"}, Start: "22:00", End: "02:00", Timezone: "UTC"},
	}
	for now, want := range map[string]string{
		"2026-11-30T12:00:00Z": "2026-12-01T19:00:00Z", // Monday → Tuesday 20:00 CET
		"2026-12-01T19:30:00Z": "2026-12-03T19:00:00Z", // inside Tuesday's window → Thursday
		"2026-12-04T08:00:00Z": "2026-12-05T22:00:00Z", // Friday → Saturday's UTC window
		"2026-03-30T12:00:00Z": "2026-03-31T18:00:00Z", // after the spring change: 20:00 CEST
	} {
		n, _ := time.Parse(time.RFC3339, now)
		got, ok := NextOpening(ws, n)
		if !ok || got.UTC().Format(time.RFC3339) != want {
			t.Errorf("NextOpening(%s) = %s, %t; want %s", now, got.UTC().Format(time.RFC3339), ok, want)
		}
	}
	if _, ok := NextOpening(nil, time.Now()); ok {
		t.Error("an opening without windows")
	}
}

// The scheduler (Request.System) needs no role, but its disruptive runs
// fall inside a maintenance window of their environment, whatever the
// environment and without --outside-window; an environment without
// windows has none to run in; a freeze holds.
func TestScheduledDisruptionPolicy(t *testing.T) {
	p, cfg := mustPolicy(t, `
policy:
  staging:
    operators: [alice]
    maintenance_windows: [{days: [sun], start: "02:00", end: "05:00", timezone: UTC}]
  production: {operators: [alice], approvers: [bob]}
`)
	sunday := time.Date(2026, 12, 6, 3, 0, 0, 0, time.UTC)
	req := Request{User: "talosbot-schedule", Cluster: cfg.Cluster("staging"), Command: "etcd defrag", Disruptive: true, Now: sunday, System: true}
	if err := p.Authorize(context.Background(), req); err != nil {
		t.Fatalf("in the window: %v", err)
	}
	req.Now = sunday.Add(3 * time.Hour) // 06:00, the window closed at 05:00
	req.Args = map[string]string{FlagOutsideWindow: "true"}
	if err := p.Authorize(context.Background(), req); err == nil || !strings.Contains(err.Error(), "only inside the maintenance window of staging (sun 02:00–05:00 UTC)") {
		t.Fatalf("outside the window: %v", err)
	}
	req.Now, req.Args = sunday, nil
	req.Frozen = &Freeze{By: "bob", Reason: "drill", Since: sunday}
	if err := p.Authorize(context.Background(), req); err == nil || !strings.Contains(err.Error(), "frozen by bob") {
		t.Fatalf("frozen: %v", err)
	}
	req.Frozen, req.Cluster = nil, cfg.Cluster("production")
	if err := p.Authorize(context.Background(), req); err == nil {
		t.Fatal("an environment without windows let a scheduled disruption start")
	}
	req.System = false // the same name without the scheduler's authority is nobody
	req.Cluster = cfg.Cluster("staging")
	if err := p.Authorize(context.Background(), req); err == nil || !strings.Contains(err.Error(), "has no role") {
		t.Fatalf("a user named like the scheduler: %v", err)
	}
}
