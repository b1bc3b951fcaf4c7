package sdk_test

import (
	"context"

	"github.com/talosbot/talosbot/plugins/sdk"
	lifecyclev1 "github.com/talosbot/talosbot/plugins/sdk/proto/lifecycle/v1"
)

// health is a minimal read-only plugin.
type health struct{}

func (health) Describe(context.Context) (*lifecyclev1.Manifest, error) {
	return &lifecyclev1.Manifest{Name: "health", Version: "1.0.0", Commands: []*lifecyclev1.Command{{
		Name: "health", Summary: "Run the health gate", Effect: lifecyclev1.Effect_EFFECT_READ_ONLY,
	}}}, nil
}

func (health) Plan(_ context.Context, req *lifecyclev1.OperationRequest) (*lifecyclev1.OperationPlan, error) {
	return &lifecyclev1.OperationPlan{
		Summary:         "health gate on " + req.GetCluster().GetName(),
		Steps:           []*lifecyclev1.Step{{Id: "gate", Title: "Health gate", Kind: "gate"}},
		CanonicalInputs: sdk.NewCanonical(req).Bytes(), // command and cluster are all it depends on
	}, nil
}

func (health) Run(ctx context.Context, _ *lifecyclev1.OperationRequest, r sdk.Reporter) error {
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
