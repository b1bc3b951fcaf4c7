package grammar

import (
	"reflect"
	"strings"
	"testing"

	lifecyclev1 "github.com/talosbot/talosbot/plugins/sdk/proto/lifecycle/v1"
)

func TestTokenize(t *testing.T) {
	for in, want := range map[string][]string{
		`upgrade talos v1.13.9 production`:       {"upgrade", "talos", "v1.13.9", "production"},
		`freeze production "etcd restore drill"`: {"freeze", "production", "etcd restore drill"},
		`freeze prod 'it''s'`:                    {"freeze", "prod", "its"},
		`a\ b "c \"d\""`:                         {"a b", `c "d"`},
		"freeze prod “smart quotes”":             {"freeze", "prod", "smart quotes"},
		`x ""`:                                   {"x", ""},
	} {
		got, err := Tokenize(in)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("Tokenize(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{`"open`, `'open`, `trailing\`} {
		if _, err := Tokenize(bad); err == nil {
			t.Errorf("Tokenize(%q) should fail", bad)
		}
	}
}

func testGrammar() *Grammar {
	return NewGrammar(append([]CommandSpec{
		{Command: &lifecyclev1.Command{Name: "status", Args: []*lifecyclev1.Arg{{Name: "cluster"}}}},
		{Command: &lifecyclev1.Command{Name: "freeze", Args: []*lifecyclev1.Arg{{Name: "cluster", Required: true}, {Name: "reason", Required: true}}}},
		{Command: &lifecyclev1.Command{Name: "help", Args: []*lifecyclev1.Arg{{Name: "command"}}}},
	},
		CommandSpec{Plugin: "talosupgrade", Command: &lifecyclev1.Command{Name: "upgrade talos", Example: "/talos upgrade talos v1.13.9 staging", Args: []*lifecyclev1.Arg{
			{Name: "version", Required: true}, {Name: "cluster"}, {Name: "nodes", Flag: true}}}},
		CommandSpec{Plugin: "k8s", Command: &lifecyclev1.Command{Name: "upgrade k8s", Args: []*lifecyclev1.Arg{
			{Name: "version", Required: true}, {Name: "cluster"}, {Name: "dry-run", Flag: true, Boolean: true}}}},
	))
}

func TestParseMultiWordCommandsAndFlags(t *testing.T) {
	g := testGrammar()
	inv, err := g.Parse("/talos upgrade talos v1.13.9 production --nodes=a,b")
	if err != nil {
		t.Fatal(err)
	}
	if inv.Spec.Plugin != "talosupgrade" || !reflect.DeepEqual(inv.Args, map[string]string{"version": "v1.13.9", "cluster": "production", "nodes": "a,b"}) {
		t.Fatalf("inv = %+v", inv)
	}
	inv, err = g.Parse("<@U123> upgrade k8s 1.36.1 --dry-run staging")
	if err != nil {
		t.Fatal(err)
	}
	if inv.Spec.Plugin != "k8s" || inv.Args["dry-run"] != "true" || inv.Args["cluster"] != "staging" {
		t.Fatalf("inv = %+v", inv)
	}
}

func TestParseErrors(t *testing.T) {
	g := testGrammar()
	for in, want := range map[string]string{
		"/talos":                                      "no command given",
		"/talos upgrade":                              `unknown command "upgrade"`,
		"/talos upgrade talos":                        "missing <version>\nusage: /talos upgrade talos <version> [cluster] [--nodes NODES]",
		"/talos upgrade k8s 1.36 --dry-run=x":         "flag --dry-run takes no value",
		"/talos upgrade k8s 1.36 a b":                 `too many arguments: "b"`,
		"/talos upgrade talos v1 --nodes":             "flag --nodes needs a value",
		"/talos upgrade talos v1 --nodes a --nodes b": "flag --nodes given twice",
		"/talos status --cluster x":                   `unknown flag --cluster for "status" (it takes no flags)`,
	} {
		_, err := g.Parse(in)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q) = %v; want %q", in, err, want)
		}
	}
}

// TestUnknownCommandsTeach: a typo gets the nearest command and its usage,
// a first word shared by several commands names them all (the old Slack
// usage hint "upgrade staging to v1.13.9"), and only a word near nothing
// gets the whole list.
func TestUnknownCommandsTeach(t *testing.T) {
	g := testGrammar()
	for in, want := range map[string]string{
		"/talos staus production":           `unknown command "staus"; did you mean /talos status? Try /talos help status.` + "\nusage: /talos status [cluster]",
		"/talos FREZE prod why":             `did you mean /talos freeze?`,
		"/talos upgrade tlaos v1.13.9":      `unknown command "upgrade tlaos"; did you mean /talos upgrade talos? Try /talos help upgrade talos.`,
		"/talos upgrade staging to v1.13.9": `unknown command "upgrade staging"; did you mean /talos upgrade k8s or /talos upgrade talos (e.g. /talos upgrade talos v1.13.9 staging)? Try /talos help upgrade.`,
		"/talos he":                         `unknown command "he". Commands: freeze, help, status, upgrade k8s, upgrade talos.`,
		"/talos frobnicate":                 `unknown command "frobnicate". Commands: freeze, help, status, upgrade k8s, upgrade talos.`,
	} {
		_, err := g.Parse(in)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q) = %v\nwant %q", in, err, want)
		}
	}
}

func FuzzParse(f *testing.F) {
	g := testGrammar()
	for _, s := range []string{"/talos upgrade talos v1.13.9 production --nodes a,b", `freeze "x`, "help", "--=", `\`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		inv, err := g.Parse(s)
		if err == nil && inv.Spec.Command == nil {
			t.Fatalf("Parse(%q) returned an invocation without a command", s)
		}
	})
}
