// Package planguard is rule R5 for plugins: plan the cluster's Terraform root
// (never apply it) and refuse when the plan would replace or delete the
// cluster's machine secrets or a node VM — that is a cluster migration, not
// maintenance. `/talos tf plan` (plugins/tfguard) runs it on request; every
// upgrade (Talos and Kubernetes) runs it as its first step when the
// upgrade plugin's section lists the cluster under plan_before_upgrade, so
// no upgrade starts on top of a migration nobody looked at. The plan and the
// guard itself are internal/terraform's; this package reads the settings and
// speaks in steps and refusals.
//
// The host passes the root as evidence, OperationRequest.Evidence.Terraform
// (root, binary, config_key: the bot resolves credentials from the same
// root, so it is core configuration). The guard's own tunables are a Config
// in the section of each plugin that runs it (terraform_guard: in
// plugins.tfguard, plugins.talosupgrade, plugins.k8supgrade), and whether
// an upgrade runs it is that plugin's plan_before_upgrade (docs/CONFIG.md).
package planguard

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/talosbot/talosbot/internal/terraform"
	"github.com/talosbot/talosbot/plugins/sdk"
)

// Config is the guard's part of a plugin's section, terraform_guard:
// (decoded strictly with the rest of the section).
type Config struct {
	// ProtectedSecrets are resource types or names whose replacement or
	// deletion is refused as a migration, besides talos_machine_secrets
	// (always protected).
	ProtectedSecrets []string `json:"protected_secrets"`
	// ProtectedVMs are node VM types or names, besides
	// proxmox_virtual_environment_vm and proxmox_vm_qemu (always protected).
	ProtectedVMs []string `json:"protected_vms"`
	// NoRefresh plans with -refresh=false (the provider is not asked for
	// the real state; faster, and works while the hypervisor is down).
	NoRefresh bool `json:"no_refresh"`
}

// Options are the guard's settings, read from Evidence.Terraform and the
// plugin's Config.
type Options struct {
	Config terraform.Config
	Guard  terraform.Guard
	Plan   terraform.PlanOptions
}

// OptionsFrom reads Evidence.Terraform and the plugin's Config. A missing root is an error that says
// which configuration to set.
func OptionsFrom(cluster string, ev sdk.Evidence, c Config) (Options, error) {
	tf := ev.Terraform
	o := Options{Config: terraform.Config{Root: tf.GetRoot(), Binary: tf.GetBinary(), ConfigKey: tf.GetConfigKey()}}
	if o.Config.ConfigKey == "" {
		o.Config.ConfigKey = "clusters[" + cluster + "].credentials.terraform"
	}
	if o.Config.Root == "" {
		return o, fmt.Errorf("cluster %s has no Terraform root: set %s.root (the host passes it to plugins as evidence.terraform)",
			cluster, o.Config.ConfigKey)
	}
	// Added to the defaults, never replacing them (terraform.Guard.Lists).
	o.Guard.Secrets = c.ProtectedSecrets
	o.Guard.VMs = c.ProtectedVMs
	o.Plan.NoRefresh = c.NoRefresh
	return o, nil
}

// Protected lists the resource types and names the guard protects (the
// defaults and the configured ones, terraform.Guard.Lists), for plan
// summaries.
func (o Options) Protected() string {
	secrets, vms := o.Guard.Lists()
	return strings.Join(append(secrets, vms...), ", ")
}

// Check plans the root in settings and applies the R5 guard. A non-empty
// violation list means: refuse (see Refusal).
func Check(ctx context.Context, cluster string, ev sdk.Evidence, c Config, env []string, tempDir string) (*terraform.Plan, []terraform.Violation, error) {
	o, err := OptionsFrom(cluster, ev, c)
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
func Refusal(vs []terraform.Violation) *sdk.Refusal {
	return sdk.Refuse("R5", "the Terraform plan would "+terraform.Describe(vs)+
		": replacing cluster secrets or node VMs is a cluster migration, not routine maintenance",
		"do not apply this plan; find the change that forces the replacement (tofu plan shows \"forces replacement\") and revert it, or plan a migration outside the bot")
}

// Step is the plan step an upgrade starts with when the host asks for the
// guard before upgrades (Wanted).
func Step() *sdk.Step {
	return &sdk.Step{ID: "tf-plan-guard", Title: "Terraform plan guard (R5)", Kind: "guard"}
}

// Wanted reports whether an upgrade of cluster runs the guard first: the
// upgrade plugin's plan_before_upgrade lists it.
func Wanted(cluster string, before []string) bool {
	return slices.Contains(before, cluster)
}

// CheckClusters adds a problem for each name in before (a plugin's
// plan_before_upgrade, at path) that is not a configured cluster: a typo
// would silently leave a cluster's upgrades unguarded.
func CheckClusters(path string, before, clusters []string, errs *sdk.ConfigErrors) {
	for i, name := range before {
		if !slices.Contains(clusters, name) {
			hint := ""
			if best := sdk.ClosestName(name, clusters); best != "" {
				hint = fmt.Sprintf("; did you mean %q?", best)
			}
			errs.Add(fmt.Sprintf("%s[%d]", path, i), "no cluster is named %q%s", name, hint)
		}
	}
}

// WithStep returns steps with Step first when wanted (Wanted): an
// upgrade's plan shows the guard it will run.
func WithStep(wanted bool, steps []*sdk.Step) []*sdk.Step {
	if !wanted {
		return steps
	}
	return append([]*sdk.Step{Step()}, steps...)
}

// BeforeUpgrade runs the R5 guard as an upgrade's first step (Step) when
// Wanted. It returns a refusal when the plan would replace or delete cluster
// secrets or a node VM, or when Terraform could not plan: an upgrade must not
// start on top of a migration nobody looked at. nil: go ahead.
func BeforeUpgrade(ctx context.Context, cluster string, wanted bool, ev sdk.Evidence, c Config, r sdk.Reporter) *sdk.Refusal {
	if !wanted {
		return nil
	}
	id := Step().ID
	_ = r.StepStarted(id, "")
	plan, vs, err := Check(ctx, cluster, ev, c, os.Environ(), "")
	if err != nil {
		_ = r.StepFailed(id, err.Error())
		return sdk.Refuse("R5", "the Terraform plan before the upgrade failed: "+err.Error(),
			"fix the Terraform root (/talos tf plan shows the error) or remove the cluster from the plugin's plan_before_upgrade")
	}
	if len(vs) > 0 { // rule:R5
		_ = r.StepFailed(id, terraform.Describe(vs))
		return Refusal(vs)
	}
	_ = r.StepOK(id, plan.Summary()+" R5 guard passed.")
	return nil
}
