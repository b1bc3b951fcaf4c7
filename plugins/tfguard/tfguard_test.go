package tfguard_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/talosbot/talosbot/internal/terraform/tftest"
	"github.com/talosbot/talosbot/plugins/sdk"
	"github.com/talosbot/talosbot/plugins/sdk/sdktest"
	"github.com/talosbot/talosbot/plugins/tfguard"
)

func request(root, bin string) *sdk.OperationRequest {
	return &sdk.OperationRequest{OperationID: "op-1", Command: tfguard.Command,
		Cluster:  sdk.Cluster{Name: "staging", Environment: "staging"},
		Evidence: sdk.Evidence{Terraform: &sdk.Terraform{Root: root, Binary: bin, ConfigKey: "clusters[0].credentials.terraform"}}}
}

func run(t *testing.T, p *tfguard.Plugin, req *sdk.OperationRequest) *sdk.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rec, err := sdktest.Run(ctx, p, req, nil)
	if err != nil {
		t.Fatal(err)
	}
	return rec.FinalResult()
}

func TestDescribeIsReadOnly(t *testing.T) {
	m, err := tfguard.New().Describe(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if c := m.Commands[0]; c.Name != "tf plan" || c.Effect != sdk.EffectReadOnly {
		t.Fatalf("manifest = %v", m)
	}
}

func TestPlanNeedsRoot(t *testing.T) {
	req := request("", "")
	_, err := tfguard.New().Plan(context.Background(), req)
	if err == nil || !strings.Contains(err.Error(), "clusters[0].credentials.terraform.root") || !strings.Contains(err.Error(), "evidence.terraform") {
		t.Fatalf("err = %v", err)
	}
}

func TestSecretsReplacementIsRefusedWithR5(t *testing.T) {
	bin := tftest.Binary(t)
	root := tftest.Root(t, bin, nil)
	tmp := t.TempDir()
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	req := request(root, bin)

	plan, err := tfguard.New().Plan(context.Background(), req)
	if err != nil || len(plan.Steps) != 2 || !strings.Contains(plan.Summary, "talos_machine_secrets") {
		t.Fatalf("plan = %v, %v", plan, err)
	}

	// No change: passes.
	res := run(t, &tfguard.Plugin{Env: env, TempDir: tmp}, req)
	if !res.OK || res.Summary != "staging: No changes. R5 guard passed." {
		t.Fatalf("unchanged root: %v", res)
	}

	// The bot's Git follow-up evidence is part of the report (R5 guard or
	// not, an unmerged Terraform change is what to do next).
	withFollowup := *req
	withFollowup.Evidence.GitFollowups = []sdk.GitFollowup{{Variable: "talos_version", Value: "v1.13.9", Branch: "talosbot/b",
		OperationID: "op0", Base: "main", State: sdk.GitFollowupOpen}}
	res = run(t, &tfguard.Plugin{Env: env, TempDir: tmp}, &withFollowup)
	if !res.OK || !strings.Contains(strings.Join(res.Lines, "\n"), "Git: branch talosbot/b (talos_version → \"v1.13.9\", operation op0) is not merged into main yet") {
		t.Fatalf("follow-up evidence: %v", res)
	}

	// An in-place change passes and is summarised.
	res = run(t, &tfguard.Plugin{Env: append(env, "TF_VAR_config_revision=7"), TempDir: tmp}, req)
	if !res.OK || !strings.Contains(res.Summary, "Plan: 0 to add, 1 to change, 0 to destroy.") ||
		strings.Join(res.Lines, ";") != "update terraform_data.machine_config" {
		t.Fatalf("in-place change: %v", res)
	}

	// Replacing the machine secrets is refused (R5).
	res = run(t, &tfguard.Plugin{Env: append(env, "TF_VAR_secrets_generation=2"), TempDir: tmp}, req)
	r := res.Refusal
	if res.OK || r.Rule != "R5" || !strings.Contains(r.Reason, "replace terraform_data.talos_machine_secrets (cluster secrets)") || r.Fix == "" {
		t.Fatalf("secrets replacement: %v", res)
	}

	// A configured VM name is protected too.
	req.Config = []byte(`{"terraform_guard": {"protected_vms": ["proxmox_virtual_environment_vm", " talos_node"]}}`) // plugins.tfguard
	res = run(t, &tfguard.Plugin{Env: append(env, "TF_VAR_node_generation=2"), TempDir: tmp}, req)
	if res.OK || !strings.Contains(res.Refusal.Reason, "replace terraform_data.talos_node (node VM)") {
		t.Fatalf("node replacement: %v", res)
	}

	if ents, _ := os.ReadDir(tmp); len(ents) != 0 {
		t.Fatalf("runs left %d entries (plan files?) in the temp dir", len(ents))
	}
}

func TestMissingBinaryFailsWithConfigKey(t *testing.T) {
	req := request(t.TempDir(), "tofu")
	res := run(t, &tfguard.Plugin{Env: []string{"PATH=" + t.TempDir()}}, req)
	if res.OK || !strings.Contains(res.Error, "clusters[0].credentials.terraform.binary") {
		t.Fatalf("result = %v", res)
	}
}
