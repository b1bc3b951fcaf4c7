package engine_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/talosbot/talosbot/bot/engine"
	"github.com/talosbot/talosbot/config"
	lifecyclev1 "github.com/talosbot/talosbot/plugins/sdk/proto/lifecycle/v1"
	"github.com/talosbot/talosbot/state"
)

// lateProvider is a status provider whose cluster never answers. It gives
// up the moment the call's deadline passes, as the plugin host does when
// the plugin's copy of the deadline ends the call before the caller's own
// timer has fired, so the call's context may not be done yet when its
// error comes back.
type lateProvider struct{ onePlugin }

func (lateProvider) Manifests(context.Context) ([]*lifecyclev1.Manifest, error) {
	return []*lifecyclev1.Manifest{{Name: "p", Commands: []*lifecyclev1.Command{{Name: "versions", StatusLabel: "versions",
		Effect: lifecyclev1.Effect_EFFECT_READ_ONLY, Args: []*lifecyclev1.Arg{{Name: "cluster"}}}}}}, nil
}

func (lateProvider) Plan(ctx context.Context, _ string, _ *lifecyclev1.OperationRequest) (*lifecyclev1.OperationPlan, error) {
	dl, _ := ctx.Deadline()
	for time.Now().Before(dl) {
		// a cluster that does not answer before the deadline
	}
	return nil, errors.New("plan cancelled: context deadline exceeded")
}

// A provider that ran out of timeouts.status reads "no answer within …",
// naming the setting, even when its error comes back before the call's own
// timer has marked the context done.
func TestStatusFactsNamesTheTimeoutWhenTheDeadlinePassed(t *testing.T) {
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
timeouts: {status: 20ms}
`))
	if err != nil {
		t.Fatal(err)
	}
	st, err := state.Open(filepath.Join(t.TempDir(), "db"), state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	e, err := engine.New(context.Background(), engine.Options{Config: cfg, Store: st, Plugins: lateProvider{}, Credentials: noCreds{},
		Policy: allowAll{}, Sink: &replies{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	// The race is the runtime's, so ask a few times: each must name the timeout.
	for range 20 {
		got := e.StatusFacts(context.Background(), "alice", []string{"staging"})["staging"]
		if len(got) != 1 || !strings.Contains(got[0], "not read (no answer within") || !strings.Contains(got[0], "timeouts.status") {
			t.Fatalf("late provider reads %q, want the timeout named", got)
		}
	}
}
