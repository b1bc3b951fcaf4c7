package tfguard

import (
	"strings"
	"testing"
)

// The guard's tunables are the plugin's own section, decoded strictly.
func TestConfigIsStrict(t *testing.T) {
	p := &Plugin{}
	for raw, want := range map[string]string{
		`{"terraform_guard": {"protected_vm": ["talos_node"]}}`: `terraform_guard.protected_vm: unknown key "protected_vm"; did you mean "protected_vms"?`,
		`{"terraform_guard": {"protected_vms": "talos_node"}}`:  `terraform_guard.protected_vms: `,
		`{"protected_vms": ["talos_node"]}`:                     `protected_vms: unknown key`,
	} {
		err := p.ValidateConfig(t.Context(), []byte(raw), nil)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want %q", raw, err, want)
		}
	}
	for _, ok := range []string{``, `{}`, `{"terraform_guard": {"protected_secrets": ["talos_machine_secrets"], "no_refresh": true}}`} {
		if err := p.ValidateConfig(t.Context(), []byte(ok), nil); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
}
