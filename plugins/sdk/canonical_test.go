package sdk_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/talosbot/talosbot/plugins/sdk"
)

func TestCanonicalIsDeterministicAndUnambiguous(t *testing.T) {
	req := &sdk.OperationRequest{Command: "upgrade talos", Cluster: sdk.Cluster{Name: "staging"}}
	build := func(m map[string]string, set []string) []byte {
		c := sdk.NewCanonical(req).Str("target", "v1.13.9").Int("timeout_ms", 600000).Bool("dry-run", false).
			Duration("gate", 5*time.Minute).Map("declared", m).Set("members", set)
		c.Sub("node", 0).Str("name", "cp-1").List("path", []string{"b", "a"})
		return c.Bytes()
	}
	a := build(map[string]string{"x": "1", "y": "2", "z": "3"}, []string{"m2", "m1"})
	for range 20 { // map iteration order varies run to run
		if b := build(map[string]string{"z": "3", "y": "2", "x": "1"}, []string{"m1", "m2"}); !bytes.Equal(a, b) {
			t.Fatalf("not deterministic:\n%s\n%s", a, b)
		}
	}
	want := `command="upgrade talos"
cluster="staging"
target="v1.13.9"
timeout_ms=600000
dry-run=false
gate="5m0s"
declared={"x":"1","y":"2","z":"3"}
members=["m1","m2"]
node[0].name="cp-1"
node[0].path=["b","a"]
`
	if string(a) != want {
		t.Fatalf("inputs =\n%s\nwant\n%s", a, want)
	}

	// Values cannot run into each other: ("a b", "c") and ("a", "b c") differ,
	// and a value holding a newline and "key=" does not forge a field.
	x := sdk.NewCanonical(nil).List("l", []string{"a,b", "c"}).Bytes()
	y := sdk.NewCanonical(nil).List("l", []string{"a", "b,c"}).Bytes()
	if bytes.Equal(x, y) {
		t.Fatal("list elements are ambiguous")
	}
	forged := sdk.NewCanonical(nil).Str("a", "1\nb=\"2\"").Bytes()
	honest := sdk.NewCanonical(nil).Str("a", "1").Str("b", "2").Bytes()
	if bytes.Equal(forged, honest) {
		t.Fatal("a value forged a field")
	}
	if got := string(sdk.NewCanonical(nil).Str("bad key=", "v").Bytes()); got != "command=\"\"\ncluster=\"\"\n\"bad key=\"=\"v\"\n" {
		t.Fatalf("odd key not quoted: %q", got)
	}
}
