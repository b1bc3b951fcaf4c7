package builtin_test

import (
	"strings"
	"testing"

	"github.com/talosbot/talosbot/plugins/builtin"
	"github.com/talosbot/talosbot/plugins/sdk"
)

// The three plugins that drain take the storage key in their own section
// (plugins.NAME.storage) and validate it strictly, naming the path.
func TestDrainingPluginsValidateTheirStorageKey(t *testing.T) {
	for _, name := range []string{"talosupgrade", "noderemove", "rollback"} {
		p, ok := builtin.New(name)
		if !ok {
			t.Fatalf("no built-in %s", name)
		}
		if problems := sdk.ValidateConfigOf(t.Context(), p, []byte(`{"storage": {"rebuild_wait": "6h", "last_replica": "refuse", "cnpg": false}}`), nil); len(problems) > 0 {
			t.Errorf("%s refuses a good storage key: %v", name, problems)
		}
		for raw, want := range map[string]string{
			`{"storage": {"last_replica": "maybe"}}`: `storage.last_replica: is "maybe"`,
			`{"storage": {"swichover": "refuse"}}`:   `storage.swichover: unknown key "swichover"; did you mean "switchover"?`,
			`{"storage": {"rebuild_wait": "10s"}}`:   `storage.rebuild_wait: is 10s: use 1m0s to 168h0m0s`,
		} {
			problems := sdk.ValidateConfigOf(t.Context(), p, []byte(raw), nil)
			var got []string
			for _, pr := range problems {
				got = append(got, pr.GetPath()+": "+pr.GetMessage())
			}
			if !strings.Contains(strings.Join(got, "\n"), want) {
				t.Errorf("%s %s: got %q, want %q", name, raw, got, want)
			}
		}
	}
}
