package terraform

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/hashicorp/terraform-exec/tfexec"
	tfjson "github.com/hashicorp/terraform-json"
)

// Action is what a plan does to one resource instance.
type Action string

// Actions, as `tofu plan` summarises them.
const (
	ActionCreate  Action = "create"
	ActionUpdate  Action = "update"
	ActionDelete  Action = "delete"
	ActionReplace Action = "replace"
	ActionForget  Action = "forget"
)

// Change is one managed resource instance the plan would change.
type Change struct {
	// Address is the full address, e.g. module.talos.talos_machine_secrets.this.
	Address string
	Type    string
	Name    string
	Action  Action
	// Deposed is set for the removal of a deposed object.
	Deposed bool
}

// Plan is a plan's summary. It holds no attribute values: a plan's values
// may be sensitive, so only addresses and actions leave this package.
type Plan struct {
	Changes []Change
	// Add, Change and Destroy count as `tofu plan` does: a replacement
	// counts once in Add and once in Destroy.
	Add, Change, Destroy int
	// Replace counts replacements.
	Replace int
	// Version is the version of the binary that made the plan.
	Version string
}

// Summary is "Plan: 1 to add, 2 to change, 1 to destroy (1 replacement)."
// or "No changes.".
func (p *Plan) Summary() string {
	if p.Add == 0 && p.Change == 0 && p.Destroy == 0 && len(p.Changes) == 0 {
		return "No changes."
	}
	s := fmt.Sprintf("Plan: %d to add, %d to change, %d to destroy", p.Add, p.Change, p.Destroy)
	if p.Replace > 0 {
		s += fmt.Sprintf(" (%d %s)", p.Replace, plural(p.Replace, "replacement", "replacements"))
	}
	return s + "."
}

// Lines lists each change as "replace talos_machine_secrets.this", sorted
// by address.
func (p *Plan) Lines() []string {
	out := make([]string, 0, len(p.Changes))
	for _, c := range p.Changes {
		l := string(c.Action) + " " + c.Address
		if c.Deposed {
			l += " (deposed object)"
		}
		out = append(out, l)
	}
	return out
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// PlanOptions tune a plan.
type PlanOptions struct {
	// NoRefresh skips refreshing state from the providers (`-refresh=false`):
	// faster, and it still shows what the configuration would replace.
	NoRefresh bool
}

// Plan runs `plan -out` in a private directory, reads the plan file with
// `show -json` and removes it. It changes nothing: the plan is never applied.
func (r *Runner) Plan(ctx context.Context, opts PlanOptions) (*Plan, error) {
	var out *Plan
	err := r.run(ctx, func(tf *tfexec.Terraform, dir string) error {
		planFile := filepath.Join(dir, "talosbot.tfplan")
		po := []tfexec.PlanOption{tfexec.Out(planFile), tfexec.Lock(true)}
		if opts.NoRefresh {
			po = append(po, tfexec.Refresh(false))
		}
		varFile, err := r.writeVarFile(dir)
		if err != nil {
			return err
		}
		if varFile != "" {
			po = append(po, tfexec.VarFile(varFile))
		}
		if _, err := tf.Plan(ctx, po...); err != nil {
			return fmt.Errorf("%s plan in %s: %w", r.name(), r.cfg.Root, err)
		}
		p, err := tf.ShowPlanFile(ctx, planFile)
		if err != nil {
			return fmt.Errorf("%s show -json of the plan: %w", r.name(), err)
		}
		out = Summarize(p)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Summarize reduces a terraform-json plan to its managed resource changes.
func Summarize(p *tfjson.Plan) *Plan {
	out := &Plan{Version: p.TerraformVersion}
	for _, rc := range p.ResourceChanges {
		if rc == nil || rc.Change == nil || rc.Mode != tfjson.ManagedResourceMode {
			continue
		}
		a := rc.Change.Actions
		c := Change{Address: rc.Address, Type: rc.Type, Name: rc.Name, Deposed: rc.DeposedKey != ""}
		switch {
		case a.Replace():
			c.Action = ActionReplace
			out.Add++
			out.Destroy++
			out.Replace++
		case a.Create():
			c.Action = ActionCreate
			out.Add++
		case a.Update():
			c.Action = ActionUpdate
			out.Change++
		case a.Delete():
			c.Action = ActionDelete
			out.Destroy++
		case a.Forget():
			c.Action = ActionForget
		default:
			continue // no-op and read
		}
		out.Changes = append(out.Changes, c)
	}
	sort.Slice(out.Changes, func(i, j int) bool { return out.Changes[i].Address < out.Changes[j].Address })
	return out
}

// DefaultSecretsTypes are the resources whose replacement is a cluster
// migration (R5): the Talos provider's machine secrets.
func DefaultSecretsTypes() []string { return []string{"talos_machine_secrets"} }

// DefaultVMTypes are the node VM resource types of the Proxmox providers
// (bpg/proxmox and Telmate/proxmox).
func DefaultVMTypes() []string {
	return []string{"proxmox_virtual_environment_vm", "proxmox_vm_qemu"}
}

// Guard is rule R5: a plan that replaces or deletes cluster secrets or a
// node VM must stop. A resource is protected when its type OR its name is
// listed, so `talos_machine_secrets.this` and `terraform_data.talos_machine_secrets`
// are both protected; matching names too catches wrappers that hide the
// real type, at the price of a false stop for a resource that merely
// borrows a protected name.
//
// Configured lists add to the defaults, never replace them: R5 names
// talos_machine_secrets, so no setting may leave it unprotected (a
// `protected_secrets: [my_secrets]` that dropped it would fail open).
type Guard struct {
	// Secrets lists protected secret types/names, besides DefaultSecretsTypes.
	Secrets []string
	// VMs lists protected VM types/names, besides DefaultVMTypes.
	VMs []string
}

// Lists are the protected secret and VM types/names the guard matches: the
// defaults and the configured ones, blanks and repeats dropped.
func (g Guard) Lists() (secrets, vms []string) {
	merge := func(defaults, extra []string) []string {
		out := defaults
		for _, s := range extra {
			if s = strings.TrimSpace(s); s != "" && !slices.Contains(out, s) {
				out = append(out, s)
			}
		}
		return out
	}
	return merge(DefaultSecretsTypes(), g.Secrets), merge(DefaultVMTypes(), g.VMs)
}

// Violation is one protected resource the plan would replace or delete.
type Violation struct {
	Change Change
	// Kind is "cluster secrets" or "node VM".
	Kind string
}

func (v Violation) String() string {
	return fmt.Sprintf("%s %s (%s)", v.Change.Action, v.Change.Address, v.Kind)
}

// Check returns the plan's violations of R5, sorted by address.
func (g Guard) Check(p *Plan) []Violation {
	secrets, vms := g.Lists()
	match := func(list []string, c Change) bool {
		for _, s := range list {
			if c.Type == s || c.Name == s {
				return true
			}
		}
		return false
	}
	var out []Violation
	for _, c := range p.Changes {
		if c.Action != ActionReplace && c.Action != ActionDelete {
			continue
		}
		switch {
		case match(secrets, c):
			out = append(out, Violation{Change: c, Kind: "cluster secrets"})
		case match(vms, c):
			out = append(out, Violation{Change: c, Kind: "node VM"})
		}
	}
	return out
}

// Describe renders violations for chat and the refusal.
func Describe(vs []Violation) string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = v.String()
	}
	return strings.Join(parts, "; ")
}
