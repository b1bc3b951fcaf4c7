package gate_test

import (
	"strings"
	"testing"
	"time"

	"github.com/talosbot/talosbot/internal/testenv"
	"github.com/talosbot/talosbot/plugins/cluster/gate"
	"github.com/talosbot/talosbot/plugins/cluster/internal/simtest"
	"github.com/talosbot/talosbot/sim"
)

// TestGateExplainsAddressChange: a control plane that came back with another address does
// not answer at its inventory address; Kubernetes knows it at the new one and its etcd member
// still names the old one. The gate says so with the fix instead of only "unreachable".
func TestGateExplainsAddressChange(t *testing.T) {
	t.Parallel()
	kube := testenv.StartKube(t)
	c := simtest.Start(t, sim.Options{ControlPlanes: 3, Workers: 1, Kube: kube.Client})
	inv, cl := simtest.Connect(t, c, kube.Kubeconfig)
	ctx := simtest.Ctx(t, 3*time.Minute)

	cp2, _ := inv.Node("cp-2")
	must(t, c.Inject(ctx, "cp-2", sim.Fault{AddressChanged: "10.99.0.9"}))
	t.Cleanup(func() { _ = c.Clear(ctx, "cp-2") })

	res := gate.Run(ctx, cl, inv, gateOpts)
	all := strings.Join(res.Reasons, "\n")
	for _, want := range []string{
		"cp-2 does not answer at " + cp2.Address,
		"at 10.99.0.9: its address changed",
		"its etcd member still names " + cp2.Address,
		"fix: update the inventory (Terraform) to 10.99.0.9, or pin the node's address",
	} {
		if !strings.Contains(all, want) {
			t.Fatalf("gate reasons do not say %q:\n%s", want, strings.Join(res.Lines(), "\n"))
		}
	}
	if len(res.Reasons) > len(res.Probes) {
		t.Fatalf("%d reasons for %d probes: the explanation must join a probe's line", len(res.Reasons), len(res.Probes))
	}

	// A node that is merely unreachable (same address everywhere) gets no such explanation.
	must(t, c.Inject(ctx, "cp-2", sim.Fault{Unreachable: true}))
	res = gate.Run(ctx, cl, inv, gateOpts)
	if strings.Contains(strings.Join(res.Reasons, "\n"), "address changed") {
		t.Fatalf("an unreachable node with an unchanged address was explained as moved:\n%s", strings.Join(res.Reasons, "\n"))
	}
}
