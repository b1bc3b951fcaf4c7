package approvals_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/talosbot/talosbot/approvals"
	"github.com/talosbot/talosbot/bot"
	"github.com/talosbot/talosbot/config"
	"github.com/talosbot/talosbot/plugins/builtin"
	"github.com/talosbot/talosbot/plugins/sdk"
	lifecyclev1 "github.com/talosbot/talosbot/plugins/sdk/proto/lifecycle/v1"
	"github.com/talosbot/talosbot/state"
)

// builtins serves the built-in plugins' manifests in-process: the catalogue
// `talosbot config check` reads.
type builtins struct{}

func (builtins) Manifests(ctx context.Context) ([]*lifecyclev1.Manifest, error) {
	var out []*lifecyclev1.Manifest
	for _, n := range builtin.Names() {
		p, _ := builtin.New(n)
		m, err := p.Describe(ctx)
		if err != nil {
			return nil, err
		}
		out = append(out, sdk.ManifestToWire(m))
	}
	return out, nil
}

func (builtins) Plan(context.Context, string, *lifecyclev1.OperationRequest) (*lifecyclev1.OperationPlan, error) {
	return nil, errors.New("not in this test")
}

func (builtins) Run(context.Context, string, *lifecyclev1.OperationRequest, func(*lifecyclev1.Progress) error) (*lifecyclev1.Result, error) {
	return nil, errors.New("not in this test")
}

// variant is one configuration of the matrix. valid says whether config
// check must accept it; optOut names the production commands the config
// exempts from approval in plain words (no_approval_commands), "*" for all.
// Every variant, valid or not, is also evaluated as decoded, errors ignored:
// even then a typo must never widen access.
type variant struct {
	name   string
	policy string
	valid  bool
	optOut []string
	// open lists the environments with operators: ["*"].
	open []string
}

var variants = []variant{
	{name: "baseline", valid: true, policy: `
groups: {sre: [alice, bob]}
policy:
  staging: {operators: [alice, bob], viewers: [carol]}
  production: {operators: [group:sre], approvers: [group:sre], viewers: [carol]}
`},
	{name: "open staging written out", valid: true, open: []string{"staging"}, policy: `
policy:
  staging: {operators: ["*"]}
  production: {operators: [alice], approvers: [bob], viewers: [carol]}
`},
	{name: "production approval list naming one command", valid: true, policy: `
policy:
  staging: {operators: [alice], viewers: [carol]}
  production: {operators: [alice], approvers: [bob], viewers: [carol], approval_commands: [upgrade talos]}
`},
	{name: "empty approval lists", valid: true, policy: `
policy:
  staging: {operators: [alice], viewers: [carol], approval_commands: []}
  production: {operators: [alice], approvers: [bob], viewers: [carol], approval_commands: [], no_approval_commands: []}
`},
	{name: "production exempts rollback in plain words", valid: true, optOut: []string{"rollback"}, policy: `
policy:
  staging: {operators: [alice], viewers: [carol]}
  production: {operators: [alice], approvers: [bob], viewers: [carol], no_approval_commands: [rollback]}
`},
	{name: "solo production opts out of approval", valid: true, optOut: []string{"*"}, policy: `
policy:
  staging: {operators: [alice], viewers: [carol]}
  production: {operators: [alice], viewers: [carol], no_approval_commands: ["*"]}
`},
	// Typos: each must be refused by config check, and must not widen access.
	{name: "undefined operators group", policy: `
policy:
  staging: {operators: [group:sre], viewers: [carol]}
  production: {operators: [group:sre], approvers: [bob], viewers: [carol]}
`},
	{name: "undefined viewers group", policy: `
policy:
  staging: {operators: [alice], viewers: [group:viewrs]}
  production: {operators: [alice], approvers: [bob], viewers: [carol, group:viewrs]}
`},
	{name: "undefined approvers group", policy: `
groups: {sre: [bob]}
policy:
  staging: {operators: [alice], viewers: [carol]}
  production: {operators: [alice], approvers: [group:sr], viewers: [carol]}
`},
	{name: "misspelled approval command", policy: `
policy:
  staging: {operators: [alice], viewers: [carol], approvers: [bob], approval_commands: [upgrade-talos]}
  production: {operators: [alice], approvers: [bob], viewers: [carol], approval_commands: [upgrade-talos]}
`},
	{name: "misspelled exemption", policy: `
policy:
  staging: {operators: [alice], viewers: [carol]}
  production: {operators: [alice], approvers: [bob], viewers: [carol], no_approval_commands: [rolback]}
`},
	{name: "misspelled exemption key", policy: `
policy:
  staging: {operators: [alice], viewers: [carol]}
  production: {operators: [alice], approvers: [bob], viewers: [carol], no_aproval_commands: ["*"]}
`},
	{name: "empty role lists", policy: `
policy:
  staging: {operators: [], viewers: []}
  production: {operators: [], viewers: [], approvers: [bob]}
`},
	{name: "no policy at all", policy: "\n"},
	{name: "empty group", policy: `
groups: {sre: []}
policy:
  staging: {operators: [group:sre], viewers: [carol]}
  production: {operators: [group:sre], approvers: [group:sre], viewers: [carol]}
`},
	{name: "misspelled operators key", policy: `
policy:
  staging: {operator: ["*"], viewers: [carol]}
  production: {operators: [alice], approvers: [bob], viewers: [carol]}
`},
}

var users = []string{"alice", "bob", "carol", "mallory", ""}

// TestPolicyMatrix runs every command of the catalogue × every user ×
// staging/production × every variant through the policy and asserts:
//   - config check accepts exactly the valid variants;
//   - no disruptive production operation runs without approval unless the
//     config exempts it in plain words (no_approval_commands);
//   - no viewer (carol) and no stranger (mallory, the empty user) changes
//     anything; only "*" written out lets a stranger operate.
func TestPolicyMatrix(t *testing.T) {
	ctx := context.Background()
	cat, err := bot.Catalogue(ctx, builtins{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range cat {
		names = append(names, c.Name)
	}
	for _, want := range []string{"upgrade talos", "upgrade k8s", "rollback", "node remove", "snapshot", "health", "freeze", "unfreeze", "abandon"} {
		if !slices.Contains(names, want) {
			t.Fatalf("catalogue lacks %q: %v", want, names)
		}
	}
	now := time.Date(2026, 12, 1, 21, 0, 0, 0, time.UTC)
	checked := 0
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			cfg, errs := config.Decode([]byte(approvals.Clusters + v.policy))
			if cfg == nil {
				t.Fatalf("not YAML: %v", errs)
			}
			errs = append(errs, cfg.CheckCommands(cat)...)
			if v.valid && len(errs) > 0 {
				t.Fatalf("config check refuses a valid config: %v", errs)
			}
			if !v.valid && len(errs) == 0 {
				t.Fatalf("config check accepts a typo")
			}
			p := approvals.New(cfg)
			for _, env := range []string{config.EnvStaging, config.EnvProduction} {
				cl := cfg.Cluster(env)
				for _, cmd := range cat {
					for _, user := range users {
						checked++
						req := approvals.Request{User: user, Cluster: cl, Command: cmd.Name, Disruptive: cmd.Disruptive, Writes: cmd.Writes, Now: now,
							// bot commands that change state are housekeeping (freeze, unfreeze, abandon, cancel, resume)
							Housekeeping: !cmd.Operation && cmd.Disruptive}
						err := p.Authorize(ctx, req)
						changes := cmd.Disruptive || cmd.Writes
						where := fmt.Sprintf("%s %q by %q", env, cmd.Name, user)
						switch {
						case (user == "carol" && !slices.Contains(v.open, env) || p.RoleOf(env, user) == approvals.RoleViewer) && changes && err == nil:
							t.Errorf("%s: a viewer changes something", where)
						case (user == "mallory" || user == "") && err == nil && !slices.Contains(v.open, env):
							t.Errorf("%s: a user with no role is allowed (%s)", where, p.RoleOf(env, user))
						case user == "" && err == nil:
							t.Errorf("%s: an empty user is allowed", where)
						}
						if err != nil || !cmd.Operation || !cmd.Disruptive || env != config.EnvProduction {
							continue
						}
						op := &state.Operation{ID: "x", Cluster: env, Environment: env, Command: cmd.Name, Disruptive: true, Requester: user}
						exempt := slices.Contains(v.optOut, "*") || slices.Contains(v.optOut, cmd.Name)
						if need := p.RequiredApprovals(op, 0); need == 0 && !exempt {
							t.Errorf("%s: runs in production without approval", where)
						} else if need > 0 {
							// ...and the requester cannot be the approval alone.
							if p.CanApprove(op, user) == nil && !cfg.Policy[env].AllowSelfApproval {
								t.Errorf("%s: the requester may approve their own request", where)
							}
						}
					}
				}
			}
		})
	}
	if want := len(variants) * 2 * len(cat) * len(users); checked != want {
		t.Fatalf("checked %d cases, want %d", checked, want)
	}
	t.Logf("%d cases: %d variants × 2 environments × %d commands × %d users", checked, len(variants), len(cat), len(users))
}

func TestMatrixCatalogueMarksSnapshotAsWrite(t *testing.T) {
	cat, err := bot.Catalogue(context.Background(), builtins{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cat {
		if c.Name == "snapshot" && (!c.Writes || c.Disruptive) {
			t.Fatalf("snapshot must be a WRITE command: %+v", c)
		}
		if strings.HasPrefix(c.Name, "upgrade") && !c.Disruptive {
			t.Fatalf("%s must be disruptive: %+v", c.Name, c)
		}
	}
}
