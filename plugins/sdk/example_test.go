package sdk_test

import (
	"context"

	"github.com/talosbot/talosbot/plugins/sdk"
)

// health is a minimal read-only plugin.
type health struct{}

func (health) Describe(context.Context) (*sdk.Manifest, error) {
	return &sdk.Manifest{Name: "health", Version: "1.0.0", Commands: []*sdk.Command{{
		Name: "health", Summary: "Run the health gate", Effect: sdk.EffectReadOnly,
	}}}, nil
}

func (health) Plan(_ context.Context, req *sdk.OperationRequest) (*sdk.OperationPlan, error) {
	return &sdk.OperationPlan{
		Summary:         "health gate on " + req.Cluster.Name,
		Steps:           []*sdk.Step{{ID: "gate", Title: "Health gate", Kind: "gate"}},
		CanonicalInputs: sdk.NewCanonical(req).Bytes(), // command and cluster are all it depends on
	}, nil
}

func (health) Run(ctx context.Context, _ *sdk.OperationRequest, r sdk.Reporter) error {
	if err := r.StepStarted("gate", ""); err != nil {
		return err
	}
	// ... probe the cluster with ctx ...
	return r.StepOK("gate", "all probes pass") // Serve adds Result{Ok: true}
}

// A plugin's main is a single call. Started by hand it only prints a hint;
// the host starts it with the handshake cookie.
func ExampleServe() {
	sdk.Serve(health{})
}
