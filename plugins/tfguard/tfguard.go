// Package tfguard is the built-in plugin behind `/talos tf plan [cluster]`:
// it plans the cluster's Terraform root (never applies it), summarises the
// adds, changes and destroys, and refuses under rule R5 when the plan would
// replace or delete the cluster's machine secrets or a node VM.
//
// The host passes the root in OperationRequest.Settings.terraform (root,
// binary, config_key, plan_before_upgrade). Settings.extra may tune the guard:
//
//	terraform_protected_secrets  comma-separated types/names (default talos_machine_secrets)
//	terraform_protected_vms      comma-separated types/names (default proxmox_virtual_environment_vm,proxmox_vm_qemu)
//	terraform_refresh            "false" plans with -refresh=false
//
// Other plugins (e.g. an upgrade that must not start on top of a migration)
// call Check with the same settings.
package tfguard

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/talosbot/talosbot/internal/terraform"
	"github.com/talosbot/talosbot/internal/version"
	"github.com/talosbot/talosbot/plugins/cluster"
	lifecyclev1 "github.com/talosbot/talosbot/plugins/proto/lifecycle/v1"
	"github.com/talosbot/talosbot/plugins/sdk"
)

// Name is the plugin's catalogue name.
const Name = "tfguard"

// Command is the chat command.
const Command = "tf plan"

// Settings.extra keys read by this plugin (and by Check).
const (
	ExtraProtectedSecrets = "terraform_protected_secrets"
	ExtraProtectedVMs     = "terraform_protected_vms"
	ExtraRefresh          = "terraform_refresh"
)

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

// Options are the guard's settings, read from Settings.extra.
type Options struct {
	Config terraform.Config
	Guard  terraform.Guard
	Plan   terraform.PlanOptions
}

// OptionsFrom reads Settings.terraform and Settings.extra. A missing root is an error that says
// which configuration to set.
func OptionsFrom(cluster string, s *lifecyclev1.Settings) (Options, error) {
	x := s.GetExtra()
	tf := s.GetTerraform()
	o := Options{Config: terraform.Config{Root: tf.GetRoot(), Binary: tf.GetBinary(), ConfigKey: tf.GetConfigKey()}}
	if o.Config.ConfigKey == "" {
		o.Config.ConfigKey = "clusters[" + cluster + "].credentials.terraform"
	}
	if o.Config.Root == "" {
		return o, fmt.Errorf("cluster %s has no Terraform root: set %s.root (the host passes it to plugins as settings.terraform)",
			cluster, o.Config.ConfigKey)
	}
	o.Guard.Secrets = list(x[ExtraProtectedSecrets])
	o.Guard.VMs = list(x[ExtraProtectedVMs])
	o.Plan.NoRefresh = x[ExtraRefresh] == "false"
	return o, nil
}

func list(s string) []string {
	if strings.TrimSpace(s) == "" {
		return nil // defaults
	}
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func (o Options) protected() string {
	g := o.Guard
	if g.Secrets == nil {
		g.Secrets = terraform.DefaultSecretsTypes()
	}
	if g.VMs == nil {
		g.VMs = terraform.DefaultVMTypes()
	}
	return strings.Join(append(append([]string{}, g.Secrets...), g.VMs...), ", ")
}

// Plan describes the check. It does not run Terraform.
func (p *Plugin) Plan(_ context.Context, req *lifecyclev1.OperationRequest) (*lifecyclev1.OperationPlan, error) {
	name := req.GetCluster().GetName()
	o, err := OptionsFrom(name, req.GetSettings())
	if err != nil {
		return nil, err
	}
	return &lifecyclev1.OperationPlan{
		Summary: fmt.Sprintf("Terraform plan of %s (%s), never applied; R5 stops on a replacement or deletion of: %s (read-only)",
			name, o.Config.Root, o.protected()),
		Target: name,
		Steps: []*lifecyclev1.Step{
			{Id: "plan", Title: "plan -out in a private directory and read it with show -json", Kind: "terraform"},
			{Id: "guard", Title: "R5: no replacement or deletion of cluster secrets or node VMs", Kind: "gate"},
		},
		CanonicalInputs: sdk.NewCanonical(req).Str("root", o.Config.Root).Str("binary", o.Config.Binary).
			Str("protected", o.protected()).Bool("refresh", !o.Plan.NoRefresh).Bytes(),
	}, nil
}

// Check plans the root in settings and applies the R5 guard. A non-empty
// violation list means: refuse (see Refusal).
func Check(ctx context.Context, cluster string, s *lifecyclev1.Settings, env []string, tempDir string) (*terraform.Plan, []terraform.Violation, error) {
	o, err := OptionsFrom(cluster, s)
	if err != nil {
		return nil, nil, err
	}
	o.Config.Env, o.Config.TempDir = env, tempDir
	r, err := terraform.New(o.Config)
	if err != nil {
		return nil, nil, err
	}
	plan, err := r.Plan(ctx, o.Plan)
	if err != nil {
		return nil, nil, err
	}
	return plan, o.Guard.Check(plan), nil
}

// Refusal is the R5 refusal for violations.
func Refusal(vs []terraform.Violation) *lifecyclev1.Refusal {
	return &lifecyclev1.Refusal{
		Rule: "R5",
		Reason: "the Terraform plan would " + terraform.Describe(vs) +
			": replacing cluster secrets or node VMs is a cluster migration, not routine maintenance",
		Fix: "do not apply this plan; find the change that forces the replacement (tofu plan shows \"forces replacement\") and revert it, or plan a migration outside the bot",
	}
}

// Run plans and guards.
func (p *Plugin) Run(ctx context.Context, req *lifecyclev1.OperationRequest, r sdk.Reporter) error {
	name := req.GetCluster().GetName()
	if err := r.StepStarted("plan", ""); err != nil {
		return err
	}
	plan, vs, err := Check(ctx, name, req.GetSettings(), p.Env, p.TempDir)
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
			Lines: lines, Refusal: Refusal(vs)})
	}
	if err := r.StepOK("guard", "no cluster secrets or node VM replaced or deleted"); err != nil {
		return err
	}
	return r.Result(&lifecyclev1.Result{Ok: true, Summary: name + ": " + plan.Summary() + " R5 guard passed.", Lines: lines})
}

// GuardStep is the plan step upgrade plugins add when the host asks for the
// guard before upgrades.
func GuardStep() *lifecyclev1.Step {
	return &lifecyclev1.Step{Id: "tf-plan-guard", Title: "Terraform plan guard (R5)", Kind: "guard"}
}

// Wanted reports whether the host asked for the guard before upgrades.
func Wanted(s *lifecyclev1.Settings) bool {
	return s.GetTerraform().GetPlanBeforeUpgrade()
}

// BeforeUpgrade runs the R5 guard as the first step of an upgrade (GuardStep)
// when Wanted. It returns a refusal when the plan would replace or delete
// cluster secrets or a node VM, or when Terraform could not plan: an upgrade
// must not start on top of a migration nobody looked at.
func BeforeUpgrade(ctx context.Context, cluster string, s *lifecyclev1.Settings, r sdk.Reporter) *lifecyclev1.Refusal {
	if !Wanted(s) {
		return nil
	}
	id := GuardStep().GetId()
	_ = r.StepStarted(id, "")
	plan, vs, err := Check(ctx, cluster, s, os.Environ(), "")
	if err != nil {
		_ = r.StepFailed(id, err.Error())
		return &lifecyclev1.Refusal{Rule: "R5", Reason: "the Terraform plan before the upgrade failed: " + err.Error(),
			Fix: "fix the Terraform root (/talos tf plan shows the error) or turn off plan_before_upgrade"}
	}
	if len(vs) > 0 {
		_ = r.StepFailed(id, terraform.Describe(vs))
		return Refusal(vs)
	}
	_ = r.StepOK(id, plan.Summary()+" R5 guard passed.")
	return nil
}
