package config

import (
	"encoding/json"
	"strings"
	"testing"
)

// A plugin's section is kept unread: any keys, any shape, and the core's own
// keys of plugins: (external, pass_env) are still checked.
func TestPluginSectionsAreKeptUnreadAsJSON(t *testing.T) {
	doc := base + goodPolicy + `
plugins:
  pass_env: [TF_VAR_x]
  snapshot:
    keep: 3
    whatever_it_likes: {nested: [1, two, {three: 3}]}
    max_age: 14d
  hello: {greeting: hi}
`
	c, err := Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(c.Plugins.PluginSectionNames(), ","); got != "hello,snapshot" {
		t.Fatalf("sections = %s", got)
	}
	raw, err := c.Plugins.PluginSection("snapshot")
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
	if v["keep"] != float64(3) || v["max_age"] != "14d" {
		t.Fatalf("section = %s", raw)
	}
	if raw, _ := c.Plugins.PluginSection("absent"); raw != nil {
		t.Fatalf("absent section = %s", raw)
	}
	if len(c.Plugins.PassEnv) != 1 {
		t.Fatalf("pass_env lost: %+v", c.Plugins)
	}
	// The lines of keys inside a section are known, so a plugin's problem
	// (a path) gets its line.
	errs := []FieldError{{Path: "plugins.snapshot.whatever_it_likes.nested[2].three", Msg: "x"}}
	c.Locate(errs)
	if errs[0].Line == 0 {
		t.Fatalf("no line for a path inside a section")
	}
}

func TestPluginSectionsRefusals(t *testing.T) {
	wantErrs(t, base+`
plugins:
  pass_env: [TF_VAR_x]
  pas_env: [TF_VAR_y]
  numbered: {1: one}
  external:
    - {name: external, path: /bin/x, sha256: `+strings.Repeat("a", 64)+`}
`,
		`plugins.numbered: the key 1 is not a string`,
		`plugins.external[0].name: "external" is a key of plugins: itself`,
	)
}
