package main

import (
	"context"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/talosbot/talosbot/plugins/sdk"
)

// maxName bounds --name; a longer one is refused (rule EX1, this example's
// own rule: plugins may define rules beyond the runbook's R1–R24).
const maxName = 32

// hello implements sdk.Plugin. It keeps no state: the host may call it
// concurrently from one process.
type hello struct{}

func (hello) Describe(context.Context) (*sdk.Manifest, error) {
	return &sdk.Manifest{Name: "hello", Version: "1.0.0", Commands: []*sdk.Command{{
		Name:    "hello",
		Summary: "Greet someone and list the cluster's nodes (an example external plugin; read-only)",
		Args: []*sdk.Arg{
			{Name: "cluster", Description: "cluster to greet (default: the channel's cluster)"},
			{Name: "name", Flag: true, Description: "who to greet", DefaultValue: "world"},
		},
		Effect:  sdk.EffectReadOnly,
		Example: "/talos hello staging --name ops",
	}}}, nil
}

// name is --name, trimmed, or "world".
func name(req *sdk.OperationRequest) string {
	if n := strings.TrimSpace(req.Args["name"]); n != "" {
		return n
	}
	return "world"
}

// Plan says what Run will do; it has no side effects. The SDK has already
// checked that req.Command is "hello".
func (hello) Plan(_ context.Context, req *sdk.OperationRequest) (*sdk.OperationPlan, error) {
	n := name(req)
	if utf8.RuneCountInString(n) > maxName {
		return sdk.RefusalPlan(sdk.Refuse("EX1", fmt.Sprintf("the name is longer than %d characters", maxName), "use a shorter --name"))
	}
	var nodes []string
	for _, node := range req.Cluster.Nodes {
		nodes = append(nodes, node.Name)
	}
	return &sdk.OperationPlan{
		Summary: fmt.Sprintf("Greet %s on %s (read-only)", n, req.Cluster.Name),
		Steps:   []*sdk.Step{{ID: "greet", Title: "greet " + n, Kind: "note"}},
		// Everything that decides what Run does goes into the digest.
		CanonicalInputs: sdk.NewCanonical(req).Str("name", n).List("nodes", nodes).Bytes(),
	}, nil
}

// Run does the work and reports. Report errors may be ignored: the SDK keeps
// the first one and fails the run with it.
func (hello) Run(_ context.Context, req *sdk.OperationRequest, r sdk.Reporter) error {
	_ = r.StepStarted("greet", "")
	cfg, err := decodeConfig(req.Config) // plugins.hello
	if err != nil {
		return err
	}
	res := &sdk.Result{OK: true, Summary: fmt.Sprintf("👋 %s, %s, from %s", cfg.Greeting, name(req), req.Cluster.Name)}
	for _, node := range req.Cluster.Nodes {
		res.Lines = append(res.Lines, fmt.Sprintf("• %s (%s)", node.Name, node.Role))
	}
	_ = r.StepOK("greet", "greeted")
	return r.Result(res)
}
