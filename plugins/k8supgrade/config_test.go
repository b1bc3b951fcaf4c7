package k8supgrade

import (
	"strings"
	"testing"
)

// The section is decoded strictly, and plan_before_upgrade names
// configured clusters.
func TestValidateConfig(t *testing.T) {
	p := &Plugin{}
	clusters := []string{"staging", "production"}
	for raw, want := range map[string]string{
		`{"plan_before_upgrade": true}`:            `plan_before_upgrade: is true, want a list`,
		`{"plan_before_upgrade": ["stagin"]}`:      `plan_before_upgrade[0]: no cluster is named "stagin"; did you mean "staging"?`,
		`{"terraform_guard": {"no_refrsh": true}}`: `terraform_guard.no_refrsh: unknown key "no_refrsh"; did you mean "no_refresh"?`,
		`{"refuse_non_latest_patch": true}`:        `refuse_non_latest_patch: unknown key`,
	} {
		err := p.ValidateConfig(t.Context(), []byte(raw), clusters)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want %q", raw, err, want)
		}
	}
	for _, ok := range []string{``, `{}`, `{"plan_before_upgrade": ["production"], "terraform_guard": {"no_refresh": true}}`} {
		if err := p.ValidateConfig(t.Context(), []byte(ok), clusters); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
}
