package drift_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/client"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/talosbot/talosbot/internal/testenv"
	"github.com/talosbot/talosbot/plugins/cluster"
	"github.com/talosbot/talosbot/plugins/drift"
	"github.com/talosbot/talosbot/plugins/sdk"
	"github.com/talosbot/talosbot/plugins/sdk/sdktest"
	"github.com/talosbot/talosbot/sim"
)

func request(c *sim.Cluster, kubeconfig []byte, declared map[string]string) *sdk.OperationRequest {
	pc := &sdk.Cluster{Name: "staging", Environment: "staging", Declared: declared}
	for _, n := range c.Nodes() {
		pc.Nodes = append(pc.Nodes, &sdk.Node{Name: n.Name, Address: n.IP, Role: n.Role, Host: n.Host})
	}
	return &sdk.OperationRequest{OperationID: "op-1", Command: drift.Command, Cluster: *pc,
		Credentials: sdk.Credentials{Talosconfig: c.Talosconfig(), Kubeconfig: kubeconfig}}
}

func run(ctx context.Context, t *testing.T, req *sdk.OperationRequest) *sdk.Result {
	t.Helper()
	rec, err := sdktest.Run(ctx, drift.New(), req, nil)
	if err != nil {
		t.Fatal(err)
	}
	return rec.FinalResult()
}

// runAnswered runs drift until every node answered: a node that just
// rebooted is unreachable through another control plane's apid until that
// apid's backend backoff lets it dial again (as on Talos), so the reading
// settles within the backoff.
func runAnswered(ctx context.Context, t *testing.T, req *sdk.OperationRequest) *sdk.Result {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		res := run(ctx, t, req)
		if !strings.Contains(strings.Join(res.Lines, "\n"), "cannot read the Talos version") || time.Now().After(deadline) {
			return res
		}
		select {
		case <-ctx.Done():
			return res
		case <-time.After(200 * time.Millisecond): // polling the plugin under a deadline
		}
	}
}

func mustContain(t *testing.T, res *sdk.Result, wants ...string) {
	t.Helper()
	all := strings.Join(res.Lines, "\n")
	for _, w := range wants {
		if !strings.Contains(all, w) {
			t.Fatalf("lines lack %q:\n%s", w, all)
		}
	}
}

// upgrade runs a legacy Talos upgrade of one sim node and waits until it
// answers with the new version.
func upgrade(ctx context.Context, t *testing.T, cli *client.Client, ip, to string) {
	t.Helper()
	img := "factory.talos.dev/nocloud-installer/376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba:" + to
	if _, err := cli.Upgrade(client.WithNode(ctx, ip), img, false, true); err != nil {
		t.Fatalf("upgrade %s: %v", ip, err)
	}
	deadline := time.Now().Add(time.Minute)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		resp, err := cli.MachineClient.Version(client.WithNode(ctx, ip), &emptypb.Empty{})
		if err == nil && resp.GetMessages()[0].GetVersion().GetTag() == to {
			return
		}
		if err == nil {
			err = errors.New("still " + resp.GetMessages()[0].GetVersion().GetTag())
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not come back on %s: %v", ip, to, err)
		}
		<-tick.C
	}
}

func TestDriftAfterSimUpgrade(t *testing.T) {
	kube := testenv.StartKube(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := sim.Start(ctx, sim.Options{ControlPlanes: 3, Workers: 1, Kube: kube.Client, RebootDelay: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	declared := map[string]string{"talos_version": "v1.12.6", "kubernetes_version": "v1.35.2"}
	req := request(c, kube.Kubeconfig, declared)

	plan, err := drift.New().Plan(ctx, req)
	if err != nil || len(plan.Steps) != 3 || len(plan.Warnings) != 0 {
		t.Fatalf("plan = %v, %v", plan, err)
	}
	res := run(ctx, t, req)
	if !res.OK {
		t.Fatalf("no drift expected: %v", res)
	}
	mustContain(t, res, `✅ talos: talos_version = "v1.12.6": every node runs it (4)`, `✅ kubernetes: talos_kubernetes_version = "v1.35.2"`,
		"✅ membership: the 4 inventory nodes match Talos, etcd, Kubernetes")

	inv, err := cluster.InventoryFrom(&req.Cluster)
	if err != nil {
		t.Fatal(err)
	}
	cli, err := cluster.NewTalosClient(ctx, c.Talosconfig(), cluster.Addresses(inv.ControlPlanes()))
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	addr := func(name string) string { n, _ := inv.Node(name); return n.Address }

	// Mid-roll: one node upgraded. Drift is reported and Terraform must not move yet (R18).
	upgrade(ctx, t, cli, addr("worker-1"), "v1.13.9")
	res = runAnswered(ctx, t, req)
	if res.OK {
		t.Fatalf("drift expected after upgrading worker-1: %v", res)
	}
	mustContain(t, res, "❌ talos: Talos versions differ: v1.12.6 on cp-1, cp-2, cp-3; v1.13.9 on worker-1",
		`→ no Terraform change yet: keep talos_version = "v1.12.6" until every node runs one version (R18)`)

	// Every node upgraded: the exact change is to bump talos_version.
	for _, n := range []string{"cp-1", "cp-2", "cp-3"} {
		upgrade(ctx, t, cli, addr(n), "v1.13.9")
	}
	res = runAnswered(ctx, t, req)
	mustContain(t, res, `❌ talos: every node runs Talos v1.13.9 but Terraform declares talos_version = "v1.12.6"`,
		`→ set talos_version = "v1.13.9" in variables_talos.tf, then /talos tf plan and apply`)
	if res.OK || res.Summary != "staging: 1 difference between Terraform and the cluster" {
		t.Fatalf("result = %v", res)
	}

	// Inventory drift: worker-1 dropped from the inventory (still a node), a
	// removed node left in it; and a stale Kubernetes declaration.
	req = request(c, kube.Kubeconfig, map[string]string{"talos_version": "v1.13.9", "talos_kubernetes_version": "v1.34.4"})
	var nodes []*sdk.Node
	for _, n := range req.Cluster.Nodes {
		if n.Name != "worker-1" {
			nodes = append(nodes, n)
		}
	}
	ghost := addr("cp-1")
	ghost = ghost[:strings.LastIndex(ghost, ".")] + ".200"
	req.Cluster.Nodes = append(nodes, &sdk.Node{Name: "worker-9", Address: ghost, Role: "worker", Host: "pve2"})
	res = run(ctx, t, req)
	mustContain(t, res,
		`❌ kubernetes: every node runs kubelet v1.35.2 but Terraform declares talos_kubernetes_version = "v1.34.4"`,
		`→ set talos_kubernetes_version = "v1.35.2" in variables_talos.tf`,
		"❌ membership: worker-9 ("+ghost+") is in the inventory but is not a Kubernetes node and does not answer the Talos API: removed, still in the inventory",
		`→ remove the "worker-9" entry from talos_nodes`,
		"❌ membership: Kubernetes node worker-1 ("+addr("worker-1")+") is not in the inventory",
		`→ add "worker-1" to talos_nodes if it belongs to the cluster`)
	// Another node may still be coming back from its upgrade above and be
	// listed beside worker-9 ("of cp-3, worker-9"): worker-9 must be named.
	if l := res.Lines[0]; !strings.Contains(l, "cannot read the Talos version of") || !strings.Contains(l, "worker-9") {
		t.Fatalf("an unreachable node must block a version verdict: %v", res.Lines)
	}
}

func TestAnalyzeWithoutKubernetes(t *testing.T) {
	inv := cluster.Inventory{Name: "p", Nodes: []cluster.Node{
		{Name: "cp-1", Address: "10.0.0.1", Role: "controlplane"},
		{Name: "cp-2", Address: "10.0.0.2", Role: "controlplane"},
		{Name: "w-1", Address: "10.0.0.4", Role: "worker"},
	}}
	o := drift.Observed{
		Talos:    map[string]string{"cp-1": "v1.12.6", "w-1": "v1.12.6"},
		TalosErr: map[string]string{"cp-2": "connection refused"},
		Etcd:     true, KubeErr: "no kubeconfig",
		EtcdMembers: []drift.EtcdMember{{Name: "cp-1", PeerHost: "10.0.0.1"}, {Name: "cp-7", PeerHost: "10.0.0.7"}},
	}
	got := strings.Join(drift.Analyze(inv, "v1.12.6", "v1.35.2", o).Lines(), "\n")
	for _, w := range []string{
		"❌ talos: cannot read the Talos version of cp-2 (unreachable)",
		"skipped: no Kubernetes API (no kubeconfig)",
		"❌ membership: cp-2 (10.0.0.2) does not answer the Talos API and is not an etcd member",
		"❌ membership: etcd member cp-7 (10.0.0.7) is not in the inventory",
	} {
		if !strings.Contains(got, w) {
			t.Fatalf("lack %q in\n%s", w, got)
		}
	}
	// A control plane that is still an etcd member is down, not removed.
	o.EtcdMembers = append(o.EtcdMembers, drift.EtcdMember{Name: "cp-2", PeerHost: "10.0.0.2"})
	if got := strings.Join(drift.Analyze(inv, "v1.12.6", "", o).Lines(), "\n"); strings.Contains(got, "cp-2 (10.0.0.2) does not answer") {
		t.Fatalf("cp-2 is an etcd member: %s", got)
	}
}
