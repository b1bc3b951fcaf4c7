package catalog_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/talosbot/talosbot/plugins/catalog"
)

func TestParseRefusesBrokenCatalogues(t *testing.T) {
	for doc, want := range map[string]string{
		`{}`:                                  "cannot unmarshal",
		`[{"name":""}]`:                       "manifest 0 has no name",
		`[{"name":"a"},{"name":"a"}]`:         `plugin "a" is listed twice`,
		`[{"name":"a","commands":[{"x":1}]}]`: "manifest 0",
	} {
		if _, err := catalog.Parse([]byte(doc)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%s) = %v, want an error containing %q", doc, err, want)
		}
	}
}

func TestEmbeddedCatalogueLoadsAndCopies(t *testing.T) {
	c, err := catalog.Load()
	if err != nil {
		t.Fatal(err)
	}
	names := c.Names()
	if len(names) == 0 {
		t.Fatal("no built-in plugins in the catalogue")
	}
	m, ok := c.Manifest(names[0])
	if !ok || len(m.GetCommands()) == 0 {
		t.Fatalf("manifest of %s: %v", names[0], m)
	}
	m.Commands = nil // callers get copies
	if again, _ := c.Manifest(names[0]); len(again.GetCommands()) == 0 {
		t.Fatal("a caller's change reached the catalogue")
	}
	if _, err := c.Describe(t.Context(), "nope"); err == nil || !strings.Contains(err.Error(), `no built-in plugin "nope"`) {
		t.Fatalf("Describe(nope) = %v", err)
	}
}

// TestLinksNoPluginCode keeps the catalogue cheap to import: the bot and
// `config check` read it, so it must not pull in plugin code or the cluster
// libraries.
func TestLinksNoPluginCode(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, bad := range []string{"k8s.io/client-go", "github.com/siderolabs/talos/pkg/machinery", "go.etcd.io/etcd/server/v3", "github.com/talosbot/talosbot/plugins/builtin", "github.com/talosbot/talosbot/plugins/cluster"} {
			if dep == bad || strings.HasPrefix(dep, bad+"/") {
				t.Errorf("plugins/catalog depends on %s", dep)
			}
		}
	}
}
