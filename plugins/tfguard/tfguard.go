// Package tfguard is the built-in plugin behind `/talos tf plan [cluster]`:
// it plans the cluster's Terraform root (never applies it), summarises the
// adds, changes and destroys, and refuses under rule R5 when the plan would
// replace or delete the cluster's machine secrets or a node VM.
//
// The guard itself (settings, plan, refusal) is plugins/cluster/planguard,
// which the upgrade plugins run too.
package tfguard

import (
	"context"
	"fmt"

	"github.com/talosbot/talosbot/internal/terraform"
	"github.com/talosbot/talosbot/internal/version"
	"github.com/talosbot/talosbot/plugins/cluster"
	"github.com/talosbot/talosbot/plugins/cluster/planguard"
	"github.com/talosbot/talosbot/plugins/sdk"
)

// Name is the plugin's catalogue name.
const Name = "tfguard"

// Command is the chat command.
const Command = "tf plan"

// Plugin implements sdk.Plugin. The zero value uses the plugin process's
// environment and temp dir.
type Plugin struct {
	// Env is the Terraform binary's environment (nil: os.Environ()).
	Env []string
	// TempDir is the parent of private run directories (default os.TempDir()).
	TempDir string
}

// New returns the plugin.
func New() sdk.Plugin { return &Plugin{} }

// Describe returns the manifest.
func (*Plugin) Describe(context.Context) (*sdk.Manifest, error) {
	return &sdk.Manifest{Name: Name, Version: version.Version, Commands: []*sdk.Command{{
		Name:    Command,
		Summary: "Plan the cluster's Terraform root (never applies) and refuse if it replaces talos_machine_secrets or a node VM (R5) (read-only)",
		Args:    []*sdk.Arg{{Name: "cluster", Description: "cluster whose root to plan (default: the channel's cluster)"}},
		Effect:  sdk.EffectReadOnly,
		Example: "/talos tf plan production",
	}}}, nil
}

// Plan describes the check. It does not run Terraform.
func (p *Plugin) Plan(_ context.Context, req *sdk.OperationRequest) (*sdk.OperationPlan, error) {
	name := req.Cluster.Name
	c, err := decodeConfig(req.Config)
	if err != nil {
		return nil, err
	}
	o, err := planguard.OptionsFrom(name, req.Evidence, c.TerraformGuard)
	if err != nil {
		return nil, err
	}
	return &sdk.OperationPlan{
		Summary: fmt.Sprintf("Terraform plan of %s (%s), never applied; R5 stops on a replacement or deletion of: %s (read-only)",
			name, o.Config.Root, o.Protected()),
		Target: name,
		Steps: []*sdk.Step{
			{ID: "plan", Title: "plan -out in a private directory and read it with show -json", Kind: "terraform"},
			{ID: "guard", Title: "R5: no replacement or deletion of cluster secrets or node VMs", Kind: "gate"},
		},
		CanonicalInputs: sdk.NewCanonical(req).Str("root", o.Config.Root).Str("binary", o.Config.Binary).
			Str("protected", o.Protected()).Bool("refresh", !o.Plan.NoRefresh).Bytes(),
	}, nil
}

// Run plans and guards.
func (p *Plugin) Run(ctx context.Context, req *sdk.OperationRequest, r sdk.Reporter) error {
	name := req.Cluster.Name
	if err := r.StepStarted("plan", ""); err != nil {
		return err
	}
	c, err := decodeConfig(req.Config)
	if err != nil {
		return err
	}
	plan, vs, err := planguard.Check(ctx, name, req.Evidence, c.TerraformGuard, p.Env, p.TempDir)
	if err != nil {
		_ = r.StepFailed("plan", err.Error())
		return r.Result(&sdk.Result{OK: false, Summary: name + ": Terraform plan failed", Error: err.Error()})
	}
	if err := r.StepOK("plan", plan.Summary()); err != nil {
		return err
	}
	lines := append(plan.Lines(), cluster.FollowupLines(req.Evidence.GitFollowups)...)
	if len(vs) > 0 {
		if err := r.StepFailed("guard", terraform.Describe(vs)); err != nil {
			return err
		}
		for _, v := range vs {
			lines = append(lines, "❌ R5: "+v.String())
		}
		return r.Result(&sdk.Result{OK: false, Summary: name + ": " + plan.Summary() + " Refused (R5).",
			Lines: lines, Refusal: planguard.Refusal(vs)})
	}
	if err := r.StepOK("guard", "no cluster secrets or node VM replaced or deleted"); err != nil {
		return err
	}
	return r.Result(&sdk.Result{OK: true, Summary: name + ": " + plan.Summary() + " R5 guard passed.", Lines: lines})
}
