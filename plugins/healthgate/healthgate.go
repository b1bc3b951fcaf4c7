// Package healthgate is the built-in plugin behind `/talos health [cluster]`:
// it runs the standard health gate (plugins/cluster/gate, rules R1–R3) until
// it passes or settings.health_timeout_ms runs out, as `talosctl health`
// waits for its checks, and reports one step and one result line per probe,
// with Talos's own check lines under the cluster-health line. A probe that
// could not run is a skipped step marked "not checked". It changes nothing.
package healthgate

import (
	"context"
	"fmt"
	"strings"

	"github.com/talosbot/talosbot/internal/version"
	"github.com/talosbot/talosbot/plugins/cluster"
	"github.com/talosbot/talosbot/plugins/cluster/gate"
	"github.com/talosbot/talosbot/plugins/sdk"
)

// Name is the plugin's catalogue name.
const Name = "healthgate"

// Command is the chat command.
const Command = "health"

// Plugin implements sdk.Plugin. It keeps no state between calls.
type Plugin struct{}

// New returns the plugin.
func New() sdk.Plugin { return &Plugin{} }

// Describe returns the manifest.
func (*Plugin) Describe(context.Context) (*sdk.Manifest, error) {
	return &sdk.Manifest{Name: Name, Version: version.Version, Commands: []*sdk.Command{{
		Name:    Command,
		Summary: "Run the health gate: Talos versions, cluster health, etcd, Kubernetes nodes, pods, Flux, PodDisruptionBudgets (read-only)",
		Args:    []*sdk.Arg{{Name: "cluster", Description: "cluster to check (default: the channel's cluster)"}},
		Effect:  sdk.EffectReadOnly,
		Example: "/talos health staging",
	}}}, nil
}

// Plan lists the probes. It does not contact the cluster.
func (*Plugin) Plan(_ context.Context, req *sdk.OperationRequest) (*sdk.OperationPlan, error) {
	inv, err := cluster.InventoryFrom(&req.Cluster)
	if err != nil {
		return nil, err
	}
	timeout, wait := gate.Timeout(req.Settings), gate.HealthWait(req.Settings)
	plan := &sdk.OperationPlan{
		Summary: fmt.Sprintf("Health gate of %s: %d probes in parallel over %d nodes, re-run until it passes for up to %s, each run within %s (read-only)",
			inv.Name, len(gate.Probes()), len(inv.Nodes), wait, timeout),
		Target: inv.Name,
	}
	for _, p := range gate.Probes() {
		// The title alone: "Talos version: Talos version on every node, …"
		// repeated each probe's definition on every line of the message.
		plan.Steps = append(plan.Steps, &sdk.Step{ID: p.Name, Title: p.Title, Kind: "gate"})
	}
	if len(req.Credentials.Kubeconfig) == 0 {
		plan.Warnings = append(plan.Warnings, fmt.Sprintf("no kubeconfig for this cluster: the Kubernetes probes (%s) will be %s",
			strings.Join(gate.KubernetesProbeTitles(), ", "), gate.NotChecked))
	}
	plan.CanonicalInputs = sdk.NewCanonical(req).List("nodes", cluster.Names(inv.Nodes)).Duration("timeout", timeout).Duration("wait", wait).Bytes()
	return plan, nil
}

// Run runs the gate and reports each probe as a step and a result line.
func (*Plugin) Run(ctx context.Context, req *sdk.OperationRequest, r sdk.Reporter) error {
	inv, err := cluster.InventoryFrom(&req.Cluster)
	if err != nil {
		return err
	}
	clients, err := cluster.Connect(ctx, inv, &req.Credentials)
	if err != nil {
		return err
	}
	defer clients.Close()

	for _, p := range gate.Probes() {
		if err := r.StepStarted(p.Name, p.What); err != nil {
			return err
		}
	}
	// With a kubeconfig configured, an API that does not answer is the
	// cluster's problem, as it is for talosctl health: the probes fail. Only
	// without one are they "not checked".
	opts := gate.OptionsFrom(req.Settings)
	opts.RequireKubernetes = len(req.Credentials.Kubeconfig) > 0
	res := gate.Until(ctx, clients, inv, opts, gate.HealthWait(req.Settings))
	if err := gate.Report(r, "", res); err != nil {
		return err
	}
	out := &sdk.Result{OK: res.Passed, Summary: inv.Name + ": " + res.Summary(), Lines: res.Lines()}
	if !res.Passed {
		out.Error = strings.Join(res.Reasons, "; ")
	}
	return r.Result(out)
}
