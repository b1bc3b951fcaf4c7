package engine_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/talosbot/talosbot/bot/engine"
	"github.com/talosbot/talosbot/config"
	lifecyclev1 "github.com/talosbot/talosbot/plugins/sdk/proto/lifecycle/v1"
	"github.com/talosbot/talosbot/state"
)

// sectionPlugin records the config section of the first request it plans.
type sectionPlugin struct {
	onePlugin
	got chan []byte
}

func (p sectionPlugin) Plan(_ context.Context, _ string, req *lifecyclev1.OperationRequest) (*lifecyclev1.OperationPlan, error) {
	select {
	case p.got <- req.GetConfig():
	default:
	}
	return &lifecyclev1.OperationPlan{Summary: "hello", CanonicalInputs: []byte("x")}, nil
}

// A plugin gets its own section (plugins.NAME), unread, as JSON; another
// plugin's section never reaches it.
func TestPluginGetsItsOwnSection(t *testing.T) {
	cfg, err := config.Parse([]byte(`
clusters:
  - name: staging
    environment: staging
    channels: [stg]
    endpoints: [127.0.0.1]
    nodes: [{name: cp-1, address: 127.0.0.1, role: controlplane, host: pve1}]
    credentials: {source: files, talosconfig: file:/nonexistent}
policy:
  staging: {operators: ["*"]}
plugins:
  p: {greeting: hej, nested: {n: 2}}
  other: {secret_of_another: 1}
`))
	if err != nil {
		t.Fatal(err)
	}
	st, err := state.Open(filepath.Join(t.TempDir(), "db"), state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	p := sectionPlugin{got: make(chan []byte, 1)}
	e, err := engine.New(context.Background(), engine.Options{Config: cfg, Store: st, Plugins: p, Credentials: noCreds{},
		Policy: allowAll{}, Sink: &replies{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	if _, err := e.Submit(context.Background(), engine.Origin{User: "alice", Channel: "stg"}, "/talos hello"); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-p.got:
		if string(got) != `{"greeting":"hej","nested":{"n":2}}` {
			t.Fatalf("section = %s", got)
		}
	case <-time.After(time.Minute):
		t.Fatal("the plugin was never asked to plan")
	}
}
