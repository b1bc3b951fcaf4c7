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
	lifecyclev1 "github.com/talosbot/talosbot/plugins/sdk/proto/lifecycle/v1"
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
func (*Plugin) Describe(context.Context) (*lifecyclev1.Manifest, error) {
	return &lifecyclev1.Manifest{Name: Name, Version: version.Version, Commands: []*lifecyclev1.Command{{
		Name:    Command,
		Summary: "Plan the cluster's Terraform root (never applies) and refuse if it replaces talos_machine_secrets or a node VM (R5) (read-only)",
		Args:    []*lifecyclev1.Arg{{Name: "cluster", Description: "cluster whose root to plan (default: the channel's cluster)"}},
		Effect:  lifecyclev1.Effect_EFFECT_READ_ONLY,
		Example: "/talos tf plan production",
	}}}, nil
}

// Plan describes the check. It does not run Terraform.
func (p *Plugin) Plan(_ context.Context, req *lifecyclev1.OperationRequest) (*lifecyclev1.OperationPlan, error) {
	name := req.GetCluster().GetName()
	o, err := planguard.OptionsFrom(name, req.GetSettings())
	if err != nil {
		return nil, err
	}
	return &lifecyclev1.OperationPlan{
		Summary: fmt.Sprintf("Terraform plan of %s (%s), never applied; R5 stops on a replacement or deletion of: %s (read-only)",
			name, o.Config.Root, o.Protected()),
		Target: name,
		Steps: []*lifecyclev1.Step{
			{Id: "plan", Title: "plan -out in a private directory and read it with show -json", Kind: "terraform"},
			{Id: "guard", Title: "R5: no replacement or deletion of cluster secrets or node VMs", Kind: "gate"},
		},
		CanonicalInputs: sdk.NewCanonical(req).Str("root", o.Config.Root).Str("binary", o.Config.Binary).
			Str("protected", o.Protected()).Bool("refresh", !o.Plan.NoRefresh).Bytes(),
	}, nil
}

// Run plans and guards.
func (p *Plugin) Run(ctx context.Context, req *lifecyclev1.OperationRequest, r sdk.Reporter) error {
	name := req.GetCluster().GetName()
	if err := r.StepStarted("plan", ""); err != nil {
		return err
	}
	plan, vs, err := planguard.Check(ctx, name, req.GetSettings(), p.Env, p.TempDir)
	if err != nil {
		_ = r.StepFailed("plan", err.Error())
		return r.Result(&lifecyclev1.Result{Ok: false, Summary: name + ": Terraform plan failed", Error: err.Error()})
	}
	if err := r.StepOK("plan", plan.Summary()); err != nil {
		return err
	}
	lines := append(plan.Lines(), cluster.FollowupLines(req.GetSettings())...)
	if len(vs) > 0 {
		if err := r.StepFailed("guard", terraform.Describe(vs)); err != nil {
			return err
		}
		for _, v := range vs {
			lines = append(lines, "❌ R5: "+v.String())
		}
		return r.Result(&lifecyclev1.Result{Ok: false, Summary: name + ": " + plan.Summary() + " Refused (R5).",
			Lines: lines, Refusal: planguard.Refusal(vs).Proto()})
	}
	if err := r.StepOK("guard", "no cluster secrets or node VM replaced or deleted"); err != nil {
		return err
	}
	return r.Result(&lifecyclev1.Result{Ok: true, Summary: name + ": " + plan.Summary() + " R5 guard passed.", Lines: lines})
}
