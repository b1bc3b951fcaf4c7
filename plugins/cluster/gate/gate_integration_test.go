package gate_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"

	"github.com/talosbot/talosbot/internal/testenv"
	"github.com/talosbot/talosbot/plugins/cluster"
	"github.com/talosbot/talosbot/plugins/cluster/gate"
	"github.com/talosbot/talosbot/plugins/cluster/internal/simtest"
	"github.com/talosbot/talosbot/sim"
)

// gateOpts keeps the stop-condition tests quick: a failing server-side
// health check waits HealthCheckWait before it reports.
var gateOpts = gate.Options{Timeout: 8 * time.Second, HealthCheckWait: 2 * time.Second}

func probe(t *testing.T, res *gate.Result, name string) gate.ProbeResult {
	t.Helper()
	for _, p := range res.Probes {
		if p.Name == name {
			return p
		}
	}
	t.Fatalf("no probe %q in %v", name, res.Lines())
	return gate.ProbeResult{}
}

// requireFail asserts that the gate failed, that probe failed, and that its
// reason (in Result.Reasons too) contains want.
func requireFail(t *testing.T, res *gate.Result, name, want string) {
	t.Helper()
	if res.Passed {
		t.Fatalf("gate passed, want failure of %s containing %q:\n%s", name, want, strings.Join(res.Lines(), "\n"))
	}
	p := probe(t, res, name)
	if p.Status != gate.StatusFail || !strings.Contains(p.Detail, want) {
		t.Fatalf("probe %s = %s, want ❌ containing %q\nall:\n%s", name, p.Line(), want, strings.Join(res.Lines(), "\n"))
	}
	if !slices.ContainsFunc(res.Reasons, func(r string) bool { return strings.Contains(r, want) }) {
		t.Fatalf("reasons %q do not name %q", res.Reasons, want)
	}
}

// waitPass runs the gate until it passes (after a fault is cleared).
func waitPass(t *testing.T, cl *cluster.Clients, inv cluster.Inventory) *gate.Result {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		res := gate.Run(context.Background(), cl, inv, gateOpts)
		if res.Passed {
			return res
		}
		if time.Now().After(deadline) {
			t.Fatalf("gate still failing after 90s:\n%s", strings.Join(res.Lines(), "\n"))
		}
		<-tick.C
	}
}

func TestGateAgainstSimAndKube(t *testing.T) {
	t.Parallel()
	kube := testenv.StartKube(t)
	c := simtest.Start(t, sim.Options{ControlPlanes: 3, Workers: 2, Kube: kube.Client})
	inv, cl := simtest.Connect(t, c, kube.Kubeconfig)
	ctx := simtest.Ctx(t, 10*time.Minute)

	runGate := func() *gate.Result { return gate.Run(ctx, cl, inv, gateOpts) }
	// inject sets a fault that is cleared even when the subtest fails before
	// its own Clear, so one failure cannot leave the next subtests a broken
	// cluster (a stuck fault once turned one failure into nine).
	inject := func(t *testing.T, node string, f sim.Fault) {
		t.Helper()
		must(t, c.Inject(ctx, node, f))
		t.Cleanup(func() { _ = c.Clear(ctx, node) })
	}

	t.Run("healthy cluster passes with every probe green", func(t *testing.T) {
		res := waitPass(t, cl, inv)
		for _, p := range res.Probes {
			// The Flux APIs are served but nothing uses them yet: nothing
			// to be Ready is "not checked", never ✅.
			want := gate.StatusOK
			if p.Name == "flux" || p.Name == "storage" { // neither Longhorn nor CNPG installed
				want = gate.StatusNotChecked
			}
			if p.Status != want {
				t.Errorf("probe %s on a healthy cluster: %s", p.Name, p.Line())
			}
		}
		if got := res.Summary(); !strings.HasPrefix(got, "health gate passed 7 of 9 probes; 2 not checked: Flux — ") {
			t.Fatalf("summary = %q", got)
		}
		// The server's check lines, as talosctl health prints them: the
		// default check set, Kubernetes checks included, every one settled.
		ch := probe(t, res, "cluster-health")
		if len(ch.Checks) < 10 || !strings.HasPrefix(ch.Checks[0], "discovered nodes: ") ||
			!slices.Contains(ch.Checks, "waiting for etcd to be healthy: OK") ||
			!slices.Contains(ch.Checks, "waiting for all k8s nodes to report ready: OK") {
			t.Fatalf("cluster-health checks:\n%s", strings.Join(ch.Checks, "\n"))
		}
		// Every probe passed or was not checked for a reason it names, so
		// the check lines (kept in the probe) are not repeated under it.
		if len(res.Lines()) != len(gate.Probes()) {
			t.Fatalf("want one line per probe and no check lines under passed probes, got %v", res.Lines())
		}
	})

	t.Run("no etcd leader", func(t *testing.T) {
		inject(t, "cp-1", sim.Fault{NoEtcdLeader: true})
		requireFail(t, runGate(), "etcd-status", "no etcd leader")
		must(t, c.Clear(ctx, "cp-1"))
		waitPass(t, cl, inv)
	})

	t.Run("control-plane service unhealthy", func(t *testing.T) {
		inject(t, "cp-2", sim.Fault{UnhealthyService: "kubelet"})
		requireFail(t, runGate(), "controlplane-services", "cp-2: kubelet unhealthy")
		must(t, c.Clear(ctx, "cp-2"))
		waitPass(t, cl, inv)
	})

	t.Run("etcd stopped on a control plane", func(t *testing.T) {
		inject(t, "cp-3", sim.Fault{EtcdStopped: true})
		res := runGate()
		requireFail(t, res, "controlplane-services", "cp-3: etcd")
		if p := probe(t, res, "etcd-status"); p.Status != gate.StatusFail || !strings.Contains(p.Detail, "cp-3") {
			t.Fatalf("etcd status should name cp-3: %s", p.Line())
		}
		must(t, c.Clear(ctx, "cp-3"))
		waitPass(t, cl, inv)
	})

	t.Run("node unreachable", func(t *testing.T) {
		inject(t, "worker-1", sim.Fault{Unreachable: true})
		res := runGate()
		requireFail(t, res, "talos-version", "unreachable: worker-1")
		if !slices.Equal(res.Unreachable, []string{"worker-1"}) {
			t.Fatalf("Unreachable = %v, want [worker-1]", res.Unreachable)
		}
		must(t, c.Clear(ctx, "worker-1"))
		waitPass(t, cl, inv)
	})

	t.Run("control-plane endpoint unreachable", func(t *testing.T) {
		// cp-1 is also a client endpoint: the client must fail over and
		// still name cp-1 as the problem.
		inject(t, "cp-1", sim.Fault{Unreachable: true})
		res := runGate()
		requireFail(t, res, "talos-version", "unreachable: cp-1")
		requireFail(t, res, "etcd-status", "cp-1")
		must(t, c.Clear(ctx, "cp-1"))
		waitPass(t, cl, inv)
	})

	t.Run("kubernetes node NotReady", func(t *testing.T) {
		setNodeReady(t, ctx, kube, "worker-2", corev1.ConditionFalse)
		requireFail(t, runGate(), "kube-nodes", "worker-2 NotReady")
		setNodeReady(t, ctx, kube, "worker-2", corev1.ConditionTrue)
		waitPass(t, cl, inv)
	})

	t.Run("stalled Kustomization", func(t *testing.T) {
		createFlux(t, ctx, kube, "Kustomization", "apps")
		must(t, testenv.SetKustomizationReady(ctx, kube.Dynamic, testenv.FluxNamespace, "apps", false, "BuildFailed"))
		requireFail(t, runGate(), "flux", "Kustomization flux-system/apps not Ready (BuildFailed")
		must(t, testenv.SetKustomizationReady(ctx, kube.Dynamic, testenv.FluxNamespace, "apps", true, ""))
		waitPass(t, cl, inv)
	})

	t.Run("failed HelmRelease", func(t *testing.T) {
		createFlux(t, ctx, kube, "HelmRelease", "podinfo")
		must(t, testenv.SetHelmReleaseReady(ctx, kube.Dynamic, testenv.FluxNamespace, "podinfo", false, "UpgradeFailed"))
		requireFail(t, runGate(), "flux", "HelmRelease flux-system/podinfo not Ready (UpgradeFailed")
		must(t, testenv.SetHelmReleaseReady(ctx, kube.Dynamic, testenv.FluxNamespace, "podinfo", true, ""))
		res := waitPass(t, cl, inv)
		if p := probe(t, res, "flux"); !strings.Contains(p.Detail, "1 Kustomization(s), 1 HelmRelease(s), all Ready") {
			t.Fatalf("flux line: %s", p.Line())
		}
	})

	t.Run("blocking PDB", func(t *testing.T) {
		createBlockingPDB(t, ctx, kube, "worker-1")
		res := runGate()
		requireFail(t, res, "pdb", "PDB shop/web allows 0 disruptions and covers web-0 on worker-1")

		// Draining only cp-1 is not blocked by a budget whose pods are on worker-1.
		o := gateOpts
		o.DrainNodes = []string{"cp-1"}
		if p := probe(t, gate.Run(ctx, cl, inv, o), "pdb"); p.Status != gate.StatusOK {
			t.Fatalf("PDB on worker-1 must not block draining cp-1: %s", p.Line())
		}
		must(t, testenv.SetPDBStatus(ctx, kube.Client, "shop", "web", 1))
		res = waitPass(t, cl, inv)
		if p := probe(t, res, "pods"); !strings.Contains(p.Detail, "1 Running") {
			t.Fatalf("pods line should count the running pod: %s", p.Line())
		}
	})
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// setNodeReady plays the kubelet for one node's Ready condition.
func setNodeReady(t *testing.T, ctx context.Context, kube *testenv.Kube, name string, st corev1.ConditionStatus) {
	t.Helper()
	nodes := kube.Client.CoreV1().Nodes()
	must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := nodes.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for i := range n.Status.Conditions {
			if n.Status.Conditions[i].Type == corev1.NodeReady {
				n.Status.Conditions[i].Status = st
				n.Status.Conditions[i].Reason = "KubeletNotReady"
				if st == corev1.ConditionTrue {
					n.Status.Conditions[i].Reason = "KubeletReady"
				}
			}
		}
		_, err = nodes.UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err
	}))
}

func createFlux(t *testing.T, ctx context.Context, kube *testenv.Kube, kind, name string) {
	t.Helper()
	gvr, api := testenv.KustomizationGVR, "kustomize.toolkit.fluxcd.io/v1"
	spec := map[string]any{"interval": "10m", "path": "./apps", "prune": true,
		"sourceRef": map[string]any{"kind": "GitRepository", "name": "flux-system"}}
	if kind == "HelmRelease" {
		gvr, api = testenv.HelmReleaseGVR, "helm.toolkit.fluxcd.io/v2"
		spec = map[string]any{"interval": "10m", "chart": map[string]any{"spec": map[string]any{"chart": name,
			"sourceRef": map[string]any{"kind": "HelmRepository", "name": name}}}}
	}
	obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": api, "kind": kind,
		"metadata": map[string]any{"name": name, "namespace": testenv.FluxNamespace}, "spec": spec}}
	_, err := kube.Dynamic.Resource(gvr).Namespace(testenv.FluxNamespace).Create(ctx, obj, metav1.CreateOptions{})
	must(t, err)
}

// createBlockingPDB creates shop/web-0 running on node and a PDB over it
// that allows no disruption.
func createBlockingPDB(t *testing.T, ctx context.Context, kube *testenv.Kube, node string) {
	t.Helper()
	_, err := kube.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}, metav1.CreateOptions{})
	must(t, err)
	labels := map[string]string{"app": "web"}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-0", Namespace: "shop", Labels: labels},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "web", Image: "nginx"}}}}
	_, err = kube.Client.CoreV1().Pods("shop").Create(ctx, pod, metav1.CreateOptions{})
	must(t, err)
	must(t, testenv.SetPodRunningReady(ctx, kube.Client, "shop", "web-0"))
	one := intstr.FromInt32(1)
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: &one, Selector: &metav1.LabelSelector{MatchLabels: labels}}}
	_, err = kube.Client.PolicyV1().PodDisruptionBudgets("shop").Create(ctx, pdb, metav1.CreateOptions{})
	must(t, err)
	must(t, testenv.SetPDBStatus(ctx, kube.Client, "shop", "web", 0))
}

// TestEtcdCallsTargetEveryControlPlane checks R4 on what the sim received:
// one etcd status call per control plane (the single one on a 1-CP
// cluster), none on workers.
func TestEtcdCallsTargetEveryControlPlane(t *testing.T) {
	t.Parallel()
	for _, cps := range []int{1, 3} {
		t.Run(fmt.Sprintf("%d control plane(s)", cps), func(t *testing.T) {
			c := simtest.Start(t, sim.Options{ControlPlanes: cps, Workers: 1})
			inv, cl := simtest.Connect(t, c, nil)
			if got := cluster.EtcdTargets(inv); len(got) != cps {
				t.Fatalf("EtcdTargets = %v, want %d addresses", got, cps)
			}
			before := c.CallCounts()
			res := gate.Run(simtest.Ctx(t, time.Minute), cl, inv, gateOpts)
			if !res.Passed {
				t.Fatalf("gate failed on a healthy sim: %v", res.Reasons)
			}
			after := c.CallCounts()
			// The server-side health check goes to one control plane only
			// (the first, which answers); a worker is never asked.
			for i, n := range c.Nodes() {
				got := after[n.Name]["/cluster.ClusterService/HealthCheck"] - before[n.Name]["/cluster.ClusterService/HealthCheck"]
				if want := map[bool]int{true: 1, false: 0}[i == 0]; got != want {
					t.Errorf("%s (%s) received %d HealthCheck calls, want %d", n.Name, n.Role, got, want)
				}
			}
			for _, n := range c.Nodes() {
				for _, m := range []string{"/machine.MachineService/EtcdStatus", "/machine.MachineService/ServiceList"} {
					got := after[n.Name][m] - before[n.Name][m]
					want := 0
					if n.Role == sim.RoleControlPlane {
						want = 1
					}
					if got != want {
						t.Errorf("%s received %d %s calls, want %d", n.Name, got, m, want)
					}
				}
			}
		})
	}
}

// TestGateClusterDown: with every node down the gate fails within its
// timeout and names every node.
func TestGateClusterDown(t *testing.T) {
	t.Parallel()
	c := simtest.Start(t, sim.Options{ControlPlanes: 3, Workers: 2})
	inv, cl := simtest.Connect(t, c, nil)
	ctx := simtest.Ctx(t, time.Minute)
	if res := gate.Run(ctx, cl, inv, gateOpts); !res.Passed {
		t.Fatalf("gate should pass before the outage: %v", res.Reasons)
	}
	for _, n := range c.Nodes() {
		must(t, c.Inject(ctx, n.Name, sim.Fault{Unreachable: true}))
	}
	const timeout = 3 * time.Second
	start := time.Now()
	res := gate.Run(ctx, cl, inv, gate.Options{Timeout: timeout})
	elapsed := time.Since(start)
	if res.Passed {
		t.Fatal("gate passed with the whole cluster down")
	}
	// Bounded by the timeout (plus scheduling slack on a loaded machine).
	if elapsed > timeout+2*time.Second {
		t.Fatalf("gate took %s, timeout was %s", elapsed, timeout)
	}
	want := cluster.Names(inv.Nodes)
	if !slices.Equal(res.Unreachable, want) {
		t.Fatalf("Unreachable = %v, want every node %v", res.Unreachable, want)
	}
	reasons := strings.Join(res.Reasons, "\n")
	for _, n := range want {
		if !strings.Contains(reasons, n) {
			t.Errorf("reasons do not name %s:\n%s", n, reasons)
		}
	}
}

// TestGateHungNode: a node that accepts calls but never answers in time is
// named, and the gate still returns within its timeout.
func TestGateHungNode(t *testing.T) {
	t.Parallel()
	c := simtest.Start(t, sim.Options{ControlPlanes: 1, Workers: 2})
	inv, cl := simtest.Connect(t, c, nil)
	ctx := simtest.Ctx(t, time.Minute)
	must(t, c.Inject(ctx, "worker-2", sim.Fault{Latency: time.Minute}))
	const timeout = 2 * time.Second
	start := time.Now()
	res := gate.Run(ctx, cl, inv, gate.Options{Timeout: timeout})
	if elapsed := time.Since(start); elapsed > timeout+2*time.Second {
		t.Fatalf("gate took %s, timeout was %s", elapsed, timeout)
	}
	requireFail(t, res, "talos-version", "worker-2")
	if p := probe(t, res, "etcd-status"); p.Status != gate.StatusOK {
		t.Fatalf("a hung worker must not fail etcd status: %s", p.Line())
	}
}
