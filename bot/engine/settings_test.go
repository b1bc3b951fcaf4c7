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

// settingsPlugin records the settings of the first request it plans.
type settingsPlugin struct {
	onePlugin
	got chan *lifecyclev1.Settings
}

func (p settingsPlugin) Plan(_ context.Context, _ string, req *lifecyclev1.OperationRequest) (*lifecyclev1.OperationPlan, error) {
	select {
	case p.got <- req.GetSettings():
	default:
	}
	return &lifecyclev1.OperationPlan{Summary: "hello", CanonicalInputs: []byte("x")}, nil
}

// The health gate's waits reach the plugins: timeouts.gate, gate_after and
// health as the request's settings.
func TestGateWaitsReachPlugins(t *testing.T) {
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
timeouts: {gate: 90s, gate_after: 7m, health: 3m}
`))
	if err != nil {
		t.Fatal(err)
	}
	st, err := state.Open(filepath.Join(t.TempDir(), "db"), state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	p := settingsPlugin{got: make(chan *lifecyclev1.Settings, 1)}
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
	case s := <-p.got:
		if s.GetGateTimeoutMs() != (90*time.Second).Milliseconds() || s.GetGateAfterTimeoutMs() != (7*time.Minute).Milliseconds() ||
			s.GetHealthTimeoutMs() != (3*time.Minute).Milliseconds() {
			t.Fatalf("settings = %v", s)
		}
	case <-time.After(time.Minute):
		t.Fatal("the plugin was never asked to plan")
	}
}
