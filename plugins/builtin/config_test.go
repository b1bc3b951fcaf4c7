package builtin_test

import (
	"fmt"
	"testing"

	"github.com/talosbot/talosbot/plugins/builtin"
	"github.com/talosbot/talosbot/plugins/catalog"
	"github.com/talosbot/talosbot/plugins/sdk"
)

// TestBuiltInsAcceptNoSection: every built-in runs on its defaults when the
// config has no section for it, which is why config check starts only the
// built-ins that have one.
func TestBuiltInsAcceptNoSection(t *testing.T) {
	for _, name := range builtin.Names() {
		p, _ := builtin.New(name)
		if problems := sdk.ValidateConfigOf(t.Context(), p, nil, []string{"staging"}); len(problems) > 0 {
			t.Errorf("%s refuses an absent section: %v", name, problems)
		}
	}
}

// Every setting plugins/catalog/settings.txt lists is a key its plugin
// knows (the lint check and config check's moved-key refusal rely on the
// list), and a key it does not list is refused.
func TestCatalogSettingsAreThePluginsKeys(t *testing.T) {
	all, err := catalog.Settings()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range all {
		p, ok := builtin.New(s.Plugin)
		if !ok {
			t.Fatalf("%s: no built-in %q", s.Path(), s.Plugin)
		}
		// null keeps the default whatever the key's type; an unknown key
		// is still an error.
		if problems := sdk.ValidateConfigOf(t.Context(), p, fmt.Appendf(nil, `{%q: null}`, s.Key), nil); len(problems) > 0 {
			t.Errorf("%s: the plugin does not know the key: %v", s.Path(), problems)
		}
		if problems := sdk.ValidateConfigOf(t.Context(), p, []byte(`{"no_such_key_anywhere": 1}`), nil); len(problems) == 0 {
			t.Errorf("%s: the plugin accepts any key", s.Plugin)
		}
	}
}
