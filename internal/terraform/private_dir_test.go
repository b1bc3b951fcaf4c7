package terraform_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/talosbot/talosbot/internal/terraform"
	"github.com/talosbot/talosbot/internal/terraform/tftest"
)

// The run directory holds the var file with the cluster's secrets and the
// provider data: while Terraform runs in it, it is readable by its owner
// only (0700), whatever the umask and the parent's mode (issue 34: the mode
// survived mutation). A wrapper around the real binary records the mode of
// TF_DATA_DIR's parent on every invocation.
func TestRunDirectoryIsOwnerOnlyWhileTerraformRuns(t *testing.T) {
	bin := tftest.Binary(t)
	root := tftest.Root(t, bin, map[string]string{"talosconfig": secret, "talos_version": "v1.12.6"})
	rec := filepath.Join(t.TempDir(), "modes")
	wrapper := filepath.Join(t.TempDir(), "tofu")
	script := "#!/bin/sh\n" +
		"if [ -n \"$TF_DATA_DIR\" ]; then stat -c %a \"$(dirname \"$TF_DATA_DIR\")\" >>" + rec + "; fi\n" +
		"exec " + bin + " \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	if err := os.Chmod(tmp, 0o777); err != nil { // a world-writable parent, like /tmp
		t.Fatal(err)
	}
	r, err := terraform.New(terraform.Config{Root: root, Binary: wrapper, Env: env(), TempDir: tmp})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Outputs(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(rec)
	if err != nil {
		t.Fatalf("the wrapper recorded nothing: %v", err)
	}
	modes := strings.Fields(string(data))
	if len(modes) == 0 {
		t.Fatal("the wrapper recorded no run")
	}
	for _, m := range modes {
		if m != "700" {
			t.Fatalf("run directory mode %s while Terraform ran (all: %v), want 700", m, modes)
		}
	}
	assertEmpty(t, tmp)
}
