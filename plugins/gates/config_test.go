package gates

import (
	"strings"
	"testing"
)

// The section is decoded strictly, and an empty key takes its default: the
// keys were Settings.extra strings that no configuration could reach.
func TestConfigIsStrictWithDefaults(t *testing.T) {
	p := &Plugin{}
	for raw, want := range map[string]string{
		`{"flux_pth": "./clusters/production"}`: `flux_pth: unknown key "flux_pth"; did you mean "flux_path"?`,
		`{"host_label": 7}`:                     `host_label: is 7, want a string`,
	} {
		err := p.ValidateConfig(t.Context(), []byte(raw), nil)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want %q", raw, err, want)
		}
	}
	c, err := decodeConfig([]byte(`{"longhorn_volume": "lh-data"}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.LonghornVolume != "lh-data" || c.HostLabel != DefaultHostLabel || c.LonghornNamespace != DefaultLonghornNamespace || c.FluxPath != "" {
		t.Fatalf("config = %+v", c)
	}
}
