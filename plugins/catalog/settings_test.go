package catalog

import (
	"regexp"
	"slices"
	"testing"
)

// Every line of settings.txt names a built-in and a snake_case key, and an
// old path at most once: the lint check and config check's refusal of moved
// keys read it.
func TestSettingsNameBuiltIns(t *testing.T) {
	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	all, err := Settings()
	if err != nil {
		t.Fatal(err)
	}
	if len(all) == 0 {
		t.Fatal("settings.txt lists no setting")
	}
	key := regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)
	seen := map[string]bool{}
	for _, s := range all {
		if !slices.Contains(c.Names(), s.Plugin) {
			t.Errorf("%s: %q is not a built-in plugin", s.Path(), s.Plugin)
		}
		if !key.MatchString(s.Key) {
			t.Errorf("%s: the key is not snake_case", s.Path())
		}
		if s.MovedFrom != "" && seen[s.MovedFrom] {
			t.Errorf("%s: %s moved twice", s.Path(), s.MovedFrom)
		}
		seen[s.MovedFrom] = true
	}
}
