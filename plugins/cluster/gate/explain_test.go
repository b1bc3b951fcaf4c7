package gate_test

import (
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/client"

	"github.com/talosbot/talosbot/plugins/cluster"
	"github.com/talosbot/talosbot/plugins/cluster/gate"
	"github.com/talosbot/talosbot/plugins/cluster/internal/simtest"
	"github.com/talosbot/talosbot/sim"
)

// TestGateExplainsEtcdAndCertificateFaults: the faults a gate cannot heal by waiting are named
// with what Talos or etcd is doing and the fix: etcd's NOSPACE alarm, a member whose etcd exits
// at start after its reboot, and a node whose apid certificate expired or does not name its
// address.
func TestGateExplainsEtcdAndCertificateFaults(t *testing.T) {
	t.Parallel()
	c := simtest.Start(t, sim.Options{ControlPlanes: 3, Workers: 1, RebootDelay: 200 * time.Millisecond})
	inv, cl := simtest.Connect(t, c, nil)
	ctx := simtest.Ctx(t, 3*time.Minute)

	must(t, c.Inject(ctx, "cp-1", sim.Fault{EtcdNoSpace: true}))
	res := gate.Run(ctx, cl, inv, gateOpts)
	requireFail(t, res, "etcd-status", "alarm NOSPACE on member cp-1: etcd's database reached its space quota")
	requireFail(t, res, "etcd-status", "etcd defrag")
	must(t, c.Clear(ctx, "cp-1"))

	must(t, c.Inject(ctx, "worker-1", sim.Fault{ApidCertificate: "expired"}))
	res = gate.Run(ctx, cl, inv, gateOpts)
	requireFail(t, res, "talos-version", "apid's certificate is outside its validity")
	must(t, c.Inject(ctx, "worker-1", sim.Fault{ApidCertificate: "noSAN"}))
	deadline := time.Now().Add(45 * time.Second)
	for {
		res = gate.Run(ctx, cl, inv, gateOpts)
		if strings.Contains(strings.Join(res.Reasons, "\n"), "does not name the address") || time.Now().After(deadline) {
			break
		}
	}
	requireFail(t, res, "talos-version", "apid's certificate does not name the address the bot used")
	must(t, c.Clear(ctx, "worker-1"))

	// cp-2 reboots and its etcd does not come back.
	must(t, c.Inject(ctx, "cp-2", sim.Fault{EtcdRejoinFailure: true}))
	s, err := cluster.NewTalosClient(ctx, c.Talosconfig(), []string{inv.ControlPlanes()[0].Address})
	must(t, err)
	defer s.Close()
	cp2, _ := inv.Node("cp-2")
	must(t, s.Reboot(client.WithNode(ctx, cp2.Address)))
	deadline = time.Now().Add(60 * time.Second)
	for {
		res = gate.Run(ctx, cl, inv, gateOpts)
		if strings.Contains(strings.Join(res.Reasons, "\n"), "exits at start") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the gate never explained cp-2's etcd:\n%s", strings.Join(res.Lines(), "\n"))
		}
	}
	requireFail(t, res, "controlplane-services", "etcd on cp-2 exits at start and Talos restarts it forever")
	requireFail(t, res, "controlplane-services", "talosctl etcd remove-member cp-2")
}
