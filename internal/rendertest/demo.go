package rendertest

import (
	"fmt"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/talosbot/talosbot/bot/opfacts"
	lifecyclev1 "github.com/talosbot/talosbot/plugins/sdk/proto/lifecycle/v1"
	"github.com/talosbot/talosbot/state"
)

// DemoWarnings are the risks the talosupgrade plugin puts on the demo's
// production plan without `make tools`: its own "no kubeconfig" and the
// health gate's, which say the same thing, and the gate's Flux warning.
var DemoWarnings = []string{
	"worker-2 runs the only replica of deployment/ingress-nginx; it is unavailable while worker-2 drains",
	"no kubeconfig: the gates cannot check Kubernetes and v1.13+ nodes are rebooted without a client-side drain",
	"health gate: no kubeconfig for this cluster, so its Kubernetes probes (nodes, pods, flux, pod disruption budgets) are not checked: " +
		"nothing will stop this operation for a NotReady node, a stalled Flux object or a blocking PodDisruptionBudget; configure the cluster's kubeconfig to have them checked",
}

// AwaitingDemo is Awaiting with the plan the demo's production cluster
// gets (issue 31's 40-line card): the warnings above, and the node identity
// and Kubernetes support preconditions with their long details.
func AwaitingDemo() (*state.Operation, *opfacts.Facts) {
	op, f := Awaiting()
	var p lifecyclev1.OperationPlan
	if err := protojson.Unmarshal(op.Plan, &p); err != nil {
		panic(err)
	}
	p.Warnings = DemoWarnings
	var ids []string
	for i, n := range nodes {
		ids = append(ids, fmt.Sprintf("%s: hostname talos-%s-%02d.production.demo.internal, nodename %s, machine id 7f3a9c%02d1e4b", n.name, n.role, i, n.name, i))
	}
	p.Preconditions = append(p.Preconditions,
		&lifecyclev1.Precondition{Name: "node identity", Ok: true, Rule: "identity", Detail: strings.Join(ids, "; ")},
		&lifecyclev1.Precondition{Name: "Kubernetes support", Ok: true, Rule: "R20", Detail: "Talos v1.13.9 supports Kubernetes v1.31 to v1.36; the running Kubernetes version is unknown"},
	)
	raw, err := protojson.Marshal(&p)
	if err != nil {
		panic(err)
	}
	op.Plan = raw
	return op, f
}
