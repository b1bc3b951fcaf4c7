package builtin_test

import (
	"bytes"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/talosbot/talosbot/plugins/builtin"
	"github.com/talosbot/talosbot/plugins/catalog"
	"github.com/talosbot/talosbot/plugins/sdk"
)

// TestCatalogueIsCurrent is the staleness test of plugins/catalog: the
// manifests the bot embeds are exactly what the built-in plugins describe.
// A change to a plugin's commands without `go generate ./plugins/catalog`
// fails here (and, were it shipped, at the host's check of a started plugin).
func TestCatalogueIsCurrent(t *testing.T) {
	want, err := builtin.ManifestsJSON(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(catalog.JSON(), want) {
		t.Fatal("plugins/catalog/manifests.json is stale: run `go generate ./plugins/catalog` (or `make generate`) and commit it")
	}
	c, err := catalog.Load()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.Names(), builtin.Names()) {
		t.Fatalf("catalogue names %v, built-ins %v", c.Names(), builtin.Names())
	}
	for _, name := range builtin.Names() {
		p, _ := builtin.New(name)
		live, err := p.Describe(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := c.Manifest(name); !proto.Equal(got, sdk.ManifestToWire(live)) {
			t.Errorf("%s: catalogued manifest differs from the plugin's Describe\ncatalogue: %v\nplugin:    %v", name, got, live)
		}
	}
}
