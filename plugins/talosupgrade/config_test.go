package talosupgrade

import (
	"strings"
	"testing"
)

// The section is decoded strictly: a misspelt key or a wrong type is an
// error naming its path, never a silently ignored setting.
func TestValidateConfigIsStrict(t *testing.T) {
	t.Parallel()
	p := &Plugin{}
	for raw, want := range map[string]string{
		`{"refuse_non_latest_pach": true}`:   `refuse_non_latest_pach: unknown key "refuse_non_latest_pach"; did you mean "refuse_non_latest_patch"?`,
		`{"refuse_non_latest_patch": "yes"}`: `refuse_non_latest_patch: is a string, want true or false`,
	} {
		err := p.ValidateConfig(t.Context(), []byte(raw), nil)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want %q", raw, err, want)
		}
	}
	for _, ok := range []string{``, `{}`, `{"refuse_non_latest_patch": true}`} {
		if err := p.ValidateConfig(t.Context(), []byte(ok), nil); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
}

// plan_before_upgrade names configured clusters: a typo would silently
// leave that cluster's upgrades without the R5 guard.
func TestPlanBeforeUpgradeNamesClusters(t *testing.T) {
	p := &Plugin{}
	err := p.ValidateConfig(t.Context(), []byte(`{"plan_before_upgrade": ["staging", "prodution"]}`), []string{"staging", "production"})
	if err == nil || !strings.Contains(err.Error(), `plan_before_upgrade[1]: no cluster is named "prodution"; did you mean "production"?`) {
		t.Fatalf("got %v", err)
	}
	if err := p.ValidateConfig(t.Context(), []byte(`{"plan_before_upgrade": ["production"], "terraform_guard": {"protected_vms": ["talos_node"]}}`), []string{"staging", "production"}); err != nil {
		t.Fatal(err)
	}
}
