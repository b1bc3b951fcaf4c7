package gitbump

import (
	"strings"
	"testing"
)

const variablesTF = `# Talos versions — bumped by talosbot after a verified upgrade (R18).
variable "talos_version" {
  type        = string
  description = "Talos release every node runs"
  default     = "v1.12.6" # keep in step with the cluster
}

variable "talos_kubernetes_version" {
  type    = string
  default = "v1.35.2"
}

variable "talos_nodes" {
  type = map(object({ role = string }))
  default = {
    cp-1 = { role = "controlplane" }
  }
}
`

func TestEditVariableChangesOnlyTheLiteral(t *testing.T) {
	out, old, err := EditVariable("variables_talos.tf", []byte(variablesTF), "talos_version", "v1.13.9")
	if err != nil {
		t.Fatal(err)
	}
	if old != "v1.12.6" {
		t.Fatalf("old = %q", old)
	}
	want := strings.Replace(variablesTF, `"v1.12.6"`, `"v1.13.9"`, 1)
	if string(out) != want {
		t.Fatalf("edited file differs beyond the literal:\n%s", out)
	}
	out, old, err = EditVariable("variables_talos.tf", []byte(variablesTF), "talos_kubernetes_version", "v1.36.3")
	if err != nil || old != "v1.35.2" || string(out) != strings.Replace(variablesTF, `"v1.35.2"`, `"v1.36.3"`, 1) {
		t.Fatalf("kubernetes: old %q err %v\n%s", old, err, out)
	}
}

func TestEditVariableTfvars(t *testing.T) {
	src := "talos_version    = \"v1.12.6\"\n// other\ncluster_name = \"prod\"\n"
	out, old, err := EditVariable("prod.tfvars", []byte(src), "talos_version", "v1.13.9")
	if err != nil || old != "v1.12.6" || string(out) != strings.Replace(src, "v1.12.6", "v1.13.9", 1) {
		t.Fatalf("old %q err %v\n%s", old, err, out)
	}
}

func TestEditVariableRefusals(t *testing.T) {
	for name, c := range map[string]struct{ src, variable, value, want string }{
		"missing variable": {variablesTF, "talos_schematic", "v1.0.0", `declares no variable "talos_schematic"`},
		"no default":       {"variable \"talos_version\" {\n  type = string\n}\n", "talos_version", "v1.13.9", "has no default"},
		"not a literal":    {"variable \"talos_version\" {\n  default = local.v\n}\n", "talos_version", "v1.13.9", "not a plain string literal"},
		"template":         {"variable \"talos_version\" {\n  default = \"v${local.minor}\"\n}\n", "talos_version", "v1.13.9", "not a plain string literal"},
		"bad value":        {variablesTF, "talos_version", "v1.13.9\"\nx = \"", "not a version"},
		"syntax error":     {"variable \"talos_version\" {\n", "talos_version", "v1.13.9", "parse"},
	} {
		t.Run(name, func(t *testing.T) {
			_, _, err := EditVariable("variables_talos.tf", []byte(c.src), c.variable, c.value)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want %q", err, c.want)
			}
		})
	}
}
