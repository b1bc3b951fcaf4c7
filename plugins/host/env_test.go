package host

import (
	"slices"
	"strings"
	"testing"

	"github.com/talosbot/talosbot/plugins/sdk"
)

// A plugin process gets only the allow-listed environment (defaultEnv and
// Options.PassEnv), never the bot's own: the bot's environment may hold a
// token or a signing secret (issue 34: the allow-list survived mutation).
func TestPluginProcessGetsOnlyTheAllowedEnvironment(t *testing.T) {
	t.Setenv("TALOSBOT_TEST_SECRET", "xoxb-not-for-plugins")
	t.Setenv("TALOSBOT_TEST_PASSED", "1")
	t.Setenv("TZ", "UTC")
	m := newManager(t, Options{BuiltIn: []string{"alpha"}, PassEnv: []string{"TALOSBOT_TEST_PASSED"}})
	plan, err := m.Plan(t.Context(), "alpha", req("env"))
	if err != nil {
		t.Fatal(err)
	}
	got := plan.GetWarnings()
	for _, want := range []string{"PATH", "TZ", "TALOSBOT_TEST_PASSED"} {
		if !slices.Contains(got, want) {
			t.Errorf("plugin environment %v lacks %s", got, want)
		}
	}
	// go-plugin's handshake adds its magic cookie and PLUGIN_* variables.
	cookie := sdk.HandshakeConfig().MagicCookieKey
	for _, k := range got {
		if !slices.Contains(defaultEnv, k) && k != "TALOSBOT_TEST_PASSED" && k != cookie && !strings.HasPrefix(k, "PLUGIN_") {
			t.Errorf("plugin got %s, which is neither in the default allow-list nor in PassEnv", k)
		}
	}
}
