package noderemove

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/talosbot/talosbot/internal/testenv"
	"github.com/talosbot/talosbot/plugins/sdk"
	"github.com/talosbot/talosbot/plugins/sdk/sdktest"
	"github.com/talosbot/talosbot/sim"
)

func startSim(t *testing.T, kube *testenv.Kube) *sim.Cluster {
	t.Helper()
	// Inventory, host, Node and etcd member names all differ (as on real clusters).
	opts := sim.Options{ControlPlanes: 3, Workers: 1, RebootDelay: 300 * time.Millisecond, DrainTimeout: 5 * time.Second, Naming: sim.DistinctNames}
	if kube != nil {
		opts.Kube, opts.Kubeconfig = kube.Client, kube.Kubeconfig
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := sim.Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func request(c *sim.Cluster, kube *testenv.Kube, node string) *sdk.OperationRequest {
	pc := &sdk.Cluster{Name: "staging", Environment: "staging"}
	for _, n := range c.Nodes() {
		pc.Nodes = append(pc.Nodes, &sdk.Node{Name: n.Name, Address: n.IP, Role: n.Role, Host: n.Host, Platform: n.Platform})
	}
	creds := &sdk.Credentials{Talosconfig: c.Talosconfig()}
	if kube != nil {
		creds.Kubeconfig = kube.Kubeconfig
	}
	return &sdk.OperationRequest{OperationID: "op-rm", Command: Command, Args: map[string]string{"node": node}, Cluster: *pc,
		Credentials: *creds, Settings: sdk.Settings{NodeTimeoutMs: 20_000, GateTimeoutMs: 8_000}}
}

func members(t *testing.T, c *sim.Cluster) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ec, err := c.Etcd().Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer ec.Close()
	ml, err := ec.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// By inventory name: the sim's member names differ from them.
	byMember := map[string]string{}
	for _, n := range c.Nodes() {
		byMember[n.EtcdMember] = n.Name
	}
	var out []string
	for _, m := range ml.Members {
		name, ok := byMember[m.Name]
		if !ok {
			name = "unknown member " + m.Name
		}
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// nodeName is the Kubernetes Node name of the sim node with this inventory name.
func nodeName(t *testing.T, c *sim.Cluster, name string) string {
	t.Helper()
	for _, n := range c.Nodes() {
		if n.Name == name {
			return n.NodeName
		}
	}
	t.Fatalf("no sim node %s", name)
	return ""
}

// TestRemoveControlPlane: 3 control planes, remove one: 2 members remain and
// the Kubernetes Node is gone; the result carries the Terraform follow-up.
func TestRemoveControlPlane(t *testing.T) {
	t.Parallel()
	slow(t)
	kube := testenv.StartKube(t)
	c := startSim(t, kube)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	req := request(c, kube, "cp-3")

	plan, err := New().Plan(ctx, req)
	if err != nil || plan.Refusal != nil {
		t.Fatalf("plan: %v %v", err, plan)
	}
	if c.Calls("cp-3", "Reset") != 0 {
		t.Fatal("Plan reset the node")
	}
	rec, _ := sdktest.Run(ctx, New(), req, nil)
	res := rec.FinalResult()
	if !res.OK {
		t.Fatalf("removal failed: %v", res)
	}
	if got := members(t, c); !slices.Equal(got, []string{"cp-1", "cp-2"}) {
		t.Fatalf("etcd members %v, want cp-1, cp-2", got)
	}
	if _, err := kube.Client.CoreV1().Nodes().Get(ctx, nodeName(t, c, "cp-3"), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("Kubernetes Node of cp-3 still there: %v", err)
	}
	if !strings.Contains(strings.Join(res.Lines, "\n"), "remove the inventory entry of cp-3") {
		t.Fatalf("no Terraform follow-up in %v", res.Lines)
	}

	// Again, with the inventory still listing cp-3: nothing to do but the
	// follow-up, which keeps the drift visible.
	rec, _ = sdktest.Run(ctx, New(), req, nil)
	res = rec.FinalResult()
	if !res.OK || !strings.Contains(strings.Join(res.Lines, "\n"), "Drift until then") || c.Calls("cp-3", "Reset") != 1 {
		t.Fatalf("second run: %v (resets %d)", res, c.Calls("cp-3", "Reset"))
	}
}

// TestRemovalRefusedWhileAMemberIsDown: with cp-2 down, removing cp-1 would
// leave one healthy member of three (R9).
func TestRemovalRefusedWhileAMemberIsDown(t *testing.T) {
	t.Parallel()
	slow(t)
	c := startSim(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := c.Inject(ctx, "cp-2", sim.Fault{Unreachable: true}); err != nil {
		t.Fatal(err)
	}
	req := request(c, nil, "cp-1")
	plan, err := New().Plan(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if r := plan.Refusal; r.Rule != "R9" || !strings.Contains(r.Reason, "1 healthy member(s), fewer than the majority 2 of the current 3") {
		t.Fatalf("want an R9 refusal, got %v", plan)
	}
	rec, _ := sdktest.Run(ctx, New(), req, nil)
	if res := rec.FinalResult(); res.OK || res.Refusal.Rule != "R9" {
		t.Fatalf("Run: want an R9 refusal, got %v", res)
	}
	if c.Calls("cp-1", "Reset") != 0 || len(members(t, c)) != 3 {
		t.Fatal("the refused removal changed the cluster")
	}
}

func TestRemovalRefusesTwoMembers(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := sim.Start(ctx, sim.Options{ControlPlanes: 2, Naming: sim.DistinctNames})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close() //nolint:errcheck
	plan, err := New().Plan(ctx, request(c, nil, "cp-2"))
	if err != nil || plan.Refusal.Rule != "R9" || !strings.Contains(plan.Refusal.Reason, "only two members") {
		t.Fatalf("want an R9 refusal for two members, got %v %v", plan, err)
	}
}

func TestRemovalOfUnknownNodeRefused(t *testing.T) {
	t.Parallel()
	c := startSim(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req := request(c, nil, "cp-9")
	plan, err := New().Plan(ctx, req)
	if err != nil || plan.Refusal.Rule != "R8" || !strings.Contains(plan.Refusal.Reason, `"cp-9" is not in the inventory`) {
		t.Fatalf("want an R8 refusal, got %v %v", plan, err)
	}
	rec, _ := sdktest.Run(ctx, New(), req, nil)
	if res := rec.FinalResult(); res.OK || res.Refusal.Rule != "R8" {
		t.Fatalf("Run: want an R8 refusal, got %v", res)
	}
	for _, n := range c.Nodes() {
		if c.Calls(n.Name, "Reset") != 0 {
			t.Fatalf("%s was reset", n.Name)
		}
	}
}

func TestRemoveWorker(t *testing.T) {
	t.Parallel()
	slow(t)
	c := startSim(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rec, _ := sdktest.Run(ctx, New(), request(c, nil, "worker-1"), nil)
	if res := rec.FinalResult(); !res.OK {
		t.Fatalf("worker removal failed: %v", res)
	}
	if len(members(t, c)) != 3 || c.Calls("worker-1", "Reset") != 1 {
		t.Fatal("worker removal touched etcd or did not reset the worker")
	}
}

// TestFailingBeforeGateRefusesRemoval is R1 in the removal: cp-2's kubelet
// is unhealthy, so cp-3 is not reset and etcd keeps three members.
func TestFailingBeforeGateRefusesRemoval(t *testing.T) {
	t.Parallel()
	slow(t)
	c := startSim(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := c.Inject(ctx, "cp-2", sim.Fault{UnhealthyService: "kubelet"}); err != nil {
		t.Fatal(err)
	}
	rec, _ := sdktest.Run(ctx, New(), request(c, nil, "cp-3"), nil)
	res := rec.FinalResult()
	if res.OK || res.Refusal.Rule != "R1" || !strings.Contains(res.Refusal.Reason, "cp-2: kubelet unhealthy") {
		t.Fatalf("want an R1 refusal naming cp-2's kubelet, got %v", res)
	}
	if c.Calls("cp-3", "Reset") != 0 || len(members(t, c)) != 3 {
		t.Fatal("the refused removal changed the cluster")
	}
}
