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
	seen := map[string]string{}
	for _, s := range all {
		if !slices.Contains(c.Names(), s.Plugin) {
			t.Errorf("%s: %q is not a built-in plugin", s.Path(), s.Plugin)
		}
		if !key.MatchString(s.Key) {
			t.Errorf("%s: the key is not snake_case", s.Path())
		}
		// One old path may become the same key of several plugins, never two keys.
		if k, ok := seen[s.MovedFrom]; s.MovedFrom != "" && ok && k != s.Key {
			t.Errorf("%s: %s moved to two keys, %s and %s", s.Path(), s.MovedFrom, k, s.Key)
		}
		seen[s.MovedFrom] = s.Key
	}
}
