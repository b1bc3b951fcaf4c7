// Package tftest gives tests a real OpenTofu/Terraform binary and an applied
// fixture root (testdata/root: terraform_data resources and outputs only, so
// nothing is downloaded).
package tftest

import (
	"context"
	_ "embed"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/terraform-exec/tfexec"

	"github.com/talosbot/talosbot/internal/testenv"
)

//go:embed testdata/root/main.tf
var mainTF []byte

// Binary returns the tofu (or terraform) binary; without one the test is
// skipped, or failed in CI (testenv.Require).
func Binary(t testing.TB) string {
	t.Helper()
	p, err := testenv.TofuPath()
	testenv.Require(t, err)
	return p
}

// Root writes the fixture into a new directory and applies it with vars
// (fixture variables: secrets_generation, node_generation, config_revision,
// talos_version, talos_kubernetes_version, talosconfig). The state is local
// (terraform.tfstate in the root).
func Root(t testing.TB, bin string, vars map[string]string) string {
	t.Helper()
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "main.tf"), mainTF, 0o600); err != nil {
		t.Fatal(err)
	}
	Apply(t, bin, root, vars)
	return root
}

// Apply applies root with vars, using a private TF_DATA_DIR.
func Apply(t testing.TB, bin, root string, vars map[string]string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tf, err := tfexec.NewTerraform(root, bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := tf.SetEnv(map[string]string{"TF_DATA_DIR": t.TempDir(), "CHECKPOINT_DISABLE": "1", "PATH": os.Getenv("PATH"), "HOME": os.Getenv("HOME")}); err != nil {
		t.Fatal(err)
	}
	if err := tf.Init(ctx); err != nil {
		t.Fatalf("init fixture: %v", err)
	}
	var opts []tfexec.ApplyOption
	for k, v := range vars {
		opts = append(opts, tfexec.Var(k+"="+v))
	}
	if err := tf.Apply(ctx, opts...); err != nil {
		t.Fatalf("apply fixture: %v", err)
	}
}
