package terraform_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	tfjson "github.com/hashicorp/terraform-json"

	"github.com/talosbot/talosbot/internal/terraform"
	"github.com/talosbot/talosbot/internal/terraform/tftest"
)

const secret = "talosconfig-secret-8c1f0b"

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// assertEmpty fails when the run left anything in the parent of the
// private run directories.
func assertEmpty(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		t.Errorf("left behind in temp dir: %s", e.Name())
	}
}

func env(extra ...string) []string {
	return append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}, extra...)
}

func TestOutputsReadSensitiveInMemory(t *testing.T) {
	bin := tftest.Binary(t)
	root := tftest.Root(t, bin, map[string]string{"talosconfig": secret, "talos_version": "v1.12.6"})
	tmp := t.TempDir()
	r, err := terraform.New(terraform.Config{Root: root, Binary: bin, Env: env(), TempDir: tmp})
	if err != nil {
		t.Fatal(err)
	}
	outs, err := r.Outputs(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	tc := outs["talosconfig"]
	if !tc.Sensitive {
		t.Fatal("talosconfig output must be reported sensitive")
	}
	if v, err := tc.Text(); err != nil || v != secret {
		t.Fatalf("talosconfig = %q, %v", v, err)
	}
	if v, _ := outs["talos_version"].Text(); v != "v1.12.6" || outs["talos_version"].Sensitive {
		t.Fatalf("talos_version = %q", v)
	}
	want := []string{"talos_image_factory_schematic_id", "talos_kubeconfig", "talos_kubernetes_version", "talos_longhorn_installer_image", "talos_version", "talosconfig"}
	if got := strings.Join(outs.Names(), ","); got != strings.Join(want, ",") {
		t.Fatalf("outputs = %s", got)
	}
	assertEmpty(t, tmp)
	// The bot's run never wrote into the root (its .terraform stays the operator's).
	if _, err := os.Stat(filepath.Join(root, ".terraform")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("root has a .terraform directory written by the run: %v", err)
	}
}

func TestPlanGuardRefusesSecretsReplacement(t *testing.T) {
	bin := tftest.Binary(t)
	root := tftest.Root(t, bin, map[string]string{"talosconfig": secret})
	tmp := t.TempDir()
	// The changed variable arrives as TF_VAR_ (as an operator's would) and
	// goes through the private variables file; the secret one too.
	r, err := terraform.New(terraform.Config{Root: root, Binary: bin, TempDir: tmp,
		Env: env("TF_VAR_secrets_generation=2", "TF_VAR_talosconfig="+secret, "TF_LOG=trace")})
	if err != nil {
		t.Fatal(err)
	}
	p, err := r.Plan(ctxT(t), terraform.PlanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Add != 1 || p.Destroy != 1 || p.Change != 0 || p.Replace != 1 {
		t.Fatalf("plan = %+v (%s)", p, p.Summary())
	}
	if p.Summary() != "Plan: 1 to add, 0 to change, 1 to destroy (1 replacement)." {
		t.Fatalf("summary = %q", p.Summary())
	}
	vs := terraform.Guard{}.Check(p)
	if len(vs) != 1 || vs[0].Change.Address != "terraform_data.talos_machine_secrets" || vs[0].Kind != "cluster secrets" {
		t.Fatalf("violations = %v", vs)
	}
	assertEmpty(t, tmp) // plan file, variables file and TF_DATA_DIR are gone
}

func TestPlanGuardPassesInPlaceChangeAndVMTypesAreConfigurable(t *testing.T) {
	bin := tftest.Binary(t)
	root := tftest.Root(t, bin, nil)
	tmp := t.TempDir()
	r, err := terraform.New(terraform.Config{Root: root, Binary: bin, TempDir: tmp,
		Env: env("TF_VAR_config_revision=2", "TF_VAR_node_generation=2")})
	if err != nil {
		t.Fatal(err)
	}
	p, err := r.Plan(ctxT(t), terraform.PlanOptions{NoRefresh: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(p.Lines(), "; "); got != "update terraform_data.machine_config; replace terraform_data.talos_node" {
		t.Fatalf("lines = %s", got)
	}
	if vs := (terraform.Guard{}).Check(p); len(vs) != 0 {
		t.Fatalf("default guard: talos_node is not a protected type or name, got %v", vs)
	}
	vs := terraform.Guard{VMs: []string{"talos_node"}}.Check(p)
	if len(vs) != 1 || vs[0].Kind != "node VM" || vs[0].String() != "replace terraform_data.talos_node (node VM)" {
		t.Fatalf("configured guard = %v", vs)
	}
	assertEmpty(t, tmp)
}

func TestMissingBinaryNamesConfigKey(t *testing.T) {
	empty := t.TempDir()
	root := t.TempDir()
	for _, bin := range []string{"tofu", "", "terraform", "/nonexistent/tofu"} {
		_, err := terraform.New(terraform.Config{Root: root, Binary: bin, ConfigKey: "clusters[1].credentials.terraform",
			Env: []string{"PATH=" + empty}})
		if !errors.Is(err, terraform.ErrBinaryNotFound) || !strings.Contains(err.Error(), "clusters[1].credentials.terraform.binary") {
			t.Fatalf("binary %q: err = %v", bin, err)
		}
	}
	_, err := terraform.New(terraform.Config{Root: root, Binary: "tf", ConfigKey: "clusters[1].credentials.terraform", Env: []string{"PATH=" + empty}})
	if err == nil || !strings.Contains(err.Error(), `clusters[1].credentials.terraform.binary: "tf" is not tofu, terraform or an absolute path`) {
		t.Fatalf("bad name: %v", err)
	}
	_, err = terraform.New(terraform.Config{Root: filepath.Join(root, "nope"), ConfigKey: "clusters[1].credentials.terraform"})
	if err == nil || !strings.Contains(err.Error(), "clusters[1].credentials.terraform.root") {
		t.Fatalf("bad root: %v", err)
	}
}

func TestFindBinaryPrefersTofu(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	for _, f := range []string{filepath.Join(a, "terraform"), filepath.Join(b, "tofu")} {
		if err := os.WriteFile(f, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	path := a + string(os.PathListSeparator) + b
	if p, err := terraform.FindBinary("", "k", path); err != nil || p != filepath.Join(b, "tofu") {
		t.Fatalf("empty binary: %s %v (tofu must win over an earlier terraform)", p, err)
	}
	if p, err := terraform.FindBinary("terraform", "k", path); err != nil || p != filepath.Join(a, "terraform") {
		t.Fatalf("terraform: %s %v", p, err)
	}
}

func TestSummarizeAndGuardOnProviderTypes(t *testing.T) {
	rc := func(addr, typ, name string, mode tfjson.ResourceMode, acts ...tfjson.Action) *tfjson.ResourceChange {
		return &tfjson.ResourceChange{Address: addr, Type: typ, Name: name, Mode: mode, Change: &tfjson.Change{Actions: acts}}
	}
	p := terraform.Summarize(&tfjson.Plan{ResourceChanges: []*tfjson.ResourceChange{
		rc("module.talos.talos_machine_secrets.this", "talos_machine_secrets", "this", tfjson.ManagedResourceMode, tfjson.ActionCreate, tfjson.ActionDelete),
		rc("proxmox_virtual_environment_vm.node[\"cp-2\"]", "proxmox_virtual_environment_vm", "node", tfjson.ManagedResourceMode, tfjson.ActionDelete),
		rc("proxmox_vm_qemu.w", "proxmox_vm_qemu", "w", tfjson.ManagedResourceMode, tfjson.ActionUpdate),
		rc("talos_machine_configuration_apply.cp", "talos_machine_configuration_apply", "cp", tfjson.ManagedResourceMode, tfjson.ActionDelete, tfjson.ActionCreate),
		rc("data.talos_client_configuration.this", "talos_client_configuration", "this", tfjson.DataResourceMode, tfjson.ActionRead),
		rc("dns_a_record.x", "dns_a_record", "x", tfjson.ManagedResourceMode, tfjson.ActionNoop),
	}})
	if p.Summary() != "Plan: 2 to add, 1 to change, 3 to destroy (2 replacements)." {
		t.Fatalf("summary = %s", p.Summary())
	}
	got := terraform.Describe(terraform.Guard{}.Check(p))
	want := "replace module.talos.talos_machine_secrets.this (cluster secrets); delete proxmox_virtual_environment_vm.node[\"cp-2\"] (node VM)"
	if got != want {
		t.Fatalf("violations = %s\nwant %s", got, want)
	}
	if (&terraform.Plan{}).Summary() != "No changes." {
		t.Fatal("empty plan summary")
	}
	// A plan without replacements says nothing about replacements: "(0
	// replacements)" beside an R5 guard reads as if one had been checked for.
	if got := (&terraform.Plan{Add: 2, Change: 1}).Summary(); got != "Plan: 2 to add, 1 to change, 0 to destroy." {
		t.Fatalf("summary without replacements = %q", got)
	}
}

func TestOutputText(t *testing.T) {
	for raw, want := range map[string]string{`"abc"`: "abc", `3`: "3", `true`: "true"} {
		if got, err := (terraform.Output{Value: []byte(raw)}).Text(); err != nil || got != want {
			t.Errorf("%s: %q %v", raw, got, err)
		}
	}
	for _, raw := range []string{`["s3cr3t"]`, `null`, `{"a":"s3cr3t"}`} {
		_, err := (terraform.Output{Value: []byte(raw)}).Text()
		if err == nil || strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("%s: err = %v (must fail without echoing the value)", raw, err)
		}
	}
}

func TestMissingCLIConfigFileIsNamed(t *testing.T) {
	_, err := terraform.New(terraform.Config{Root: t.TempDir(), Binary: "tofu", ConfigKey: "clusters[0].credentials.terraform",
		Env: []string{"PATH=" + os.Getenv("PATH"), "TF_CLI_CONFIG_FILE=/nonexistent/terraformrc"}})
	if err == nil || !strings.Contains(err.Error(), "TF_CLI_CONFIG_FILE=/nonexistent/terraformrc") || !strings.Contains(err.Error(), "unset the variable") {
		t.Fatalf("err = %v", err)
	}
}

// TestConfiguredGuardListsAddToTheDefaults: a configured protected list
// adds to the defaults and never replaces them, so talos_machine_secrets
// (R5) and the Proxmox VM types stay protected whatever terraform_guard
// names; blank entries are dropped.
func TestConfiguredGuardListsAddToTheDefaults(t *testing.T) {
	p := &terraform.Plan{Changes: []terraform.Change{
		{Address: "talos_machine_secrets.this", Type: "talos_machine_secrets", Name: "this", Action: terraform.ActionReplace},
		{Address: "proxmox_virtual_environment_vm.cp1", Type: "proxmox_virtual_environment_vm", Name: "cp1", Action: terraform.ActionDelete},
		{Address: "terraform_data.talos_node", Type: "terraform_data", Name: "talos_node", Action: terraform.ActionReplace},
		{Address: "my_secrets.this", Type: "my_secrets", Name: "this", Action: terraform.ActionReplace},
	}}
	g := terraform.Guard{Secrets: []string{"my_secrets", " "}, VMs: []string{"talos_node", ""}}
	got := terraform.Describe(g.Check(p))
	for _, want := range []string{"replace talos_machine_secrets.this (cluster secrets)", "delete proxmox_virtual_environment_vm.cp1 (node VM)",
		"replace terraform_data.talos_node (node VM)", "replace my_secrets.this (cluster secrets)"} {
		if !strings.Contains(got, want) {
			t.Errorf("violations %q lack %q", got, want)
		}
	}
	secrets, vms := g.Lists()
	if s := strings.Join(append(secrets, vms...), ","); s != "talos_machine_secrets,my_secrets,proxmox_virtual_environment_vm,proxmox_vm_qemu,talos_node" {
		t.Errorf("lists = %s", s)
	}
}
