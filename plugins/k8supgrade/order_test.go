package k8supgrade

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/config/types/meta"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	talosk8s "github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	talosv1alpha1 "github.com/siderolabs/talos/pkg/machinery/resources/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/talosbot/talosbot/internal/testenv"
	"github.com/talosbot/talosbot/plugins/cluster"
	"github.com/talosbot/talosbot/plugins/cluster/k8s"
	"github.com/talosbot/talosbot/plugins/cluster/k8s/preflight"
	"github.com/talosbot/talosbot/plugins/sdk"
	"github.com/talosbot/talosbot/plugins/sdk/sdktest"
	"github.com/talosbot/talosbot/sim"
)

// patchNode changes one node's machine config through the Talos API (as an operator's
// `talosctl patch mc --mode=no-reboot` would) and, when the kubelet image changed, waits for
// the kubelet's restart to finish as talosctl does: its Service resource destroyed, then
// running and healthy again.
func patchNode(t testing.TB, e *env, name string, patch func(*v1alpha1.Config)) {
	t.Helper()
	ctx := ctxFor(t, 2*time.Minute)
	req := e.request(target)
	inv, err := cluster.InventoryFrom(&req.Cluster)
	if err != nil {
		t.Fatal(err)
	}
	c, err := cluster.Connect(ctx, inv, &req.Credentials)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	n, _ := inv.Node(name)
	cfg, err := k8s.ReadMachineConfig(ctx, c, n)
	if err != nil {
		t.Fatal(err)
	}
	patched, err := cfg.PatchV1Alpha1(func(c *v1alpha1.Config) error { patch(c); return nil })
	if err != nil {
		t.Fatal(err)
	}
	data, err := patched.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	restart := k8s.ImagesOf(cfg).Kubelet != k8s.ImagesOf(patched).Kubelet

	nctx := client.WithNode(ctx, n.Address)
	events := make(chan safe.WrappedStateEvent[*talosv1alpha1.Service], 16)
	if restart {
		if err := safe.StateWatch(nctx, c.COSI, resource.NewMetadata(talosv1alpha1.NamespaceName, talosv1alpha1.ServiceType, "kubelet", resource.VersionUndefined), events); err != nil {
			t.Fatal(err)
		}
		<-events // the current state
	}
	if err := k8s.ApplyNoReboot(ctx, c, n, data); err != nil {
		t.Fatal(err)
	}
	if !restart {
		return
	}
	down := false
	for {
		select {
		case <-ctx.Done():
			t.Fatalf("kubelet on %s did not restart: %v", name, ctx.Err())
		case ev := <-events:
			if ev.Type() == state.Destroyed {
				down = true
				continue
			}
			if svc, err := ev.Resource(); down && err == nil && svc.TypedSpec().Running && svc.TypedSpec().Healthy {
				return
			}
		}
	}
}

// TestPreflightRefusesAtPlanTime: something the target removed that a node still uses is
// refused when the operation is planned, before any change, naming what and where.
func TestPreflightRefusesAtPlanTime(t *testing.T) {
	t.Parallel()
	kube := testenv.StartKube(t)

	t.Run("a kube-apiserver feature gate removed in 1.36 (real data)", func(t *testing.T) {
		e := startEnv(t, kube, supportsTarget)
		patchNode(t, e, "cp-2", func(c *v1alpha1.Config) {
			c.ClusterConfig.APIServerConfig.ExtraArgsConfig = meta.Args{
				"feature-gates": meta.NewArgValue("WatchFromStorageWithoutResourceVersion=false", nil)}
		})
		refused(t, e, e.request(target), "R20", "Kubernetes v1.36.3 removed what the cluster still uses",
			"kube-apiserver on cp-2 (", "feature gate WatchFromStorageWithoutResourceVersion", "removed in Kubernetes 1.36",
			"cluster.apiServer.extraArgs")
	})

	t.Run("a kube-apiserver flag the target removed", func(t *testing.T) {
		// Neither go-kubernetes v0.2.38 nor the Kubernetes 1.36 changelog lists a kube-apiserver
		// flag removed in 1.36, and the test's apiserver is 1.36.3, so the target must be 1.36:
		// this plugin gets a table in which 1.36 also removed --audit-log-maxbackup.
		e := startEnv(t, kube, supportsTarget)
		table := preflight.Kubernetes()
		for i := range table {
			if table[i].Minor == 36 {
				table[i].Flags = map[preflight.Component][]string{preflight.APIServer: {"audit-log-maxbackup"}}
			}
		}
		patchNode(t, e, "cp-1", func(c *v1alpha1.Config) {
			c.ClusterConfig.APIServerConfig.ExtraArgsConfig = meta.Args{"audit-log-maxbackup": meta.NewArgValue("3", nil)}
		})
		p := &Plugin{removals: table}
		ctx := ctxFor(t, 2*time.Minute)
		before := e.applies()
		plan, err := p.Plan(ctx, e.request(target))
		if err != nil {
			t.Fatal(err)
		}
		r := plan.Refusal
		text := r.Reason + " — " + r.Fix
		for _, w := range []string{"kube-apiserver on cp-1 (" + e.c.Nodes()[0].IP + ") uses flag --audit-log-maxbackup, removed in Kubernetes 1.36",
			"remove it from cluster.apiServer.extraArgs on cp-1"} {
			if r.Rule != "R20" || !strings.Contains(text, w) {
				t.Fatalf("refusal %s %q lacks %q", r.Rule, text, w)
			}
		}
		rec, _ := sdktest.Run(ctx, p, e.request(target), nil)
		if res := rec.FinalResult(); res.OK || res.Refusal.Rule != "R20" {
			t.Fatalf("run result = %v, want the R20 refusal", res)
		}
		wantCounts(t, "after the refusal", delta(e.applies(), before), map[string]int{"cp-1": 0, "cp-2": 0, "cp-3": 0, "worker-1": 0})

		// Without the flag the same plan passes, and says the checks ran.
		patchNode(t, e, "cp-1", func(c *v1alpha1.Config) { c.ClusterConfig.APIServerConfig.ExtraArgsConfig = nil })
		plan, err = p.Plan(ctx, e.request(target))
		if err != nil || plan.Refusal != nil {
			t.Fatalf("plan without the flag: %v %v", plan, err)
		}
		found := false
		for _, pc := range plan.Preconditions {
			found = found || (pc.OK && strings.Contains(pc.Name, "pre-flight") && strings.Contains(pc.Detail, "no objects of workloads.v1alpha1.scheduling.k8s.io"))
		}
		if !found {
			t.Fatalf("no passed pre-flight precondition: %v", plan.Preconditions)
		}
	})

	t.Run("a failed pre-pull stops the run before anything changes", func(t *testing.T) {
		e := startEnv(t, kube, supportsTarget)
		ctx := ctxFor(t, 3*time.Minute)
		if err := e.c.Inject(ctx, "worker-1", sim.Fault{ImagePullFailure: true}); err != nil {
			t.Fatal(err)
		}
		rec, _ := sdktest.Run(ctx, New(), e.request(target), nil)
		res := rec.FinalResult()
		if res.OK || !strings.Contains(res.Summary, "stopped at the pre-pull (nothing was changed)") ||
			!strings.Contains(res.Error, "pull ghcr.io/siderolabs/kubelet:v1.36.3 on worker-1") {
			t.Fatalf("want a stop at the pre-pull naming worker-1's kubelet image, got %v", res)
		}
		// worker-1 pulls last: every control plane pulled, and still nothing was applied.
		wantCounts(t, "after a failed pull", e.applies(), map[string]int{"cp-1": 0, "cp-2": 0, "cp-3": 0, "worker-1": 0})
		if got := e.c.Calls("cp-3", "ImagePull"); got != 4 {
			t.Fatalf("cp-3 ImagePull calls = %d, want 4 (3 control-plane images, the kubelet)", got)
		}
	})
}

// orderWatch records, from the Kubernetes API, the order in which the cluster took the new
// version: a mirror pod recreated at the target ("kube-apiserver/cp-1") and a Node whose
// kubelet reports it ("kubelet/worker-1").
type orderWatch struct {
	mu  sync.Mutex
	seq []string
}

func watchOrder(t *testing.T, kc kubernetes.Interface, version string, nodeName func(string) string) *orderWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	o := &orderWatch{}
	pods, err := kc.CoreV1().Pods("kube-system").Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nodes, err := kc.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	add := func(s string) {
		o.mu.Lock()
		defer o.mu.Unlock()
		if !seen[s] {
			seen[s] = true
			o.seq = append(o.seq, s)
		}
	}
	go func() {
		for ev := range pods.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || ev.Type != watch.Added || len(p.Spec.Containers) == 0 || !strings.HasSuffix(p.Spec.Containers[0].Image, ":"+version) {
				continue
			}
			comp := p.Labels["k8s-app"]
			if slices.Contains(sim.StaticPodComponents(), comp) {
				add(comp + "/" + nodeName(strings.TrimPrefix(p.Name, comp+"-")))
			}
		}
	}()
	go func() {
		for ev := range nodes.ResultChan() {
			if n, ok := ev.Object.(*corev1.Node); ok && ev.Type == watch.Modified && n.Status.NodeInfo.KubeletVersion == version {
				add("kubelet/" + nodeName(n.Name))
			}
		}
	}()
	return o
}

func (o *orderWatch) sequence() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.seq)
}

// talosctlOrder is the order `talosctl upgrade-k8s` changes a 3+1 cluster in
// (pkg/cluster/kubernetes/talos_managed.go Upgrade, kubelet.go upgradeKubelet).
func talosctlOrder() []string {
	var out []string
	for _, comp := range sim.StaticPodComponents() {
		for _, n := range []string{"cp-1", "cp-2", "cp-3"} {
			out = append(out, comp+"/"+n)
		}
	}
	return append(out, "kubelet/cp-1", "kubelet/cp-2", "kubelet/cp-3", "kubelet/worker-1")
}

// TestOrderSeenByKubernetes runs the whole upgrade with a -fat kubelet on two nodes and checks,
// from the cluster's side, talosctl's order (each apiserver, then each controller-manager,
// then each scheduler, then the kubelets, control planes first), the pre-pull of every target
// image before the first change, and that the kubelet's variant is kept.
func TestOrderSeenByKubernetes(t *testing.T) {
	t.Parallel()
	kube := testenv.StartKube(t)
	e := startEnv(t, kube, supportsTarget)
	for _, n := range []string{"cp-1", "worker-1"} {
		patchNode(t, e, n, func(c *v1alpha1.Config) {
			c.MachineConfig.MachineKubelet.KubeletImage = "ghcr.io/siderolabs/kubelet:" + from + "-fat"
		})
	}
	ctx := ctxFor(t, 4*time.Minute)
	req := e.request(target)
	plan, err := New().Plan(ctx, req)
	if err != nil || plan.Refusal != nil {
		t.Fatalf("plan %v %v", plan, err)
	}
	titles := ""
	for _, s := range plan.Steps {
		titles += s.Title + "\n"
	}
	if !strings.Contains(titles, "kubelet on worker-1 v1.35.2 → v1.36.3 (ghcr.io/siderolabs/kubelet:v1.36.3-fat)") ||
		!strings.Contains(titles, "kubelet on cp-2 v1.35.2 → v1.36.3 (ghcr.io/siderolabs/kubelet:v1.36.3)") {
		t.Fatalf("plan does not show the kubelet images:\n%s", titles)
	}

	o := watchOrder(t, kube.Client, target, func(s string) string { return s })
	pullsBefore := map[string]int{}
	for _, n := range e.c.Nodes() {
		pullsBefore[n.Name] = e.c.Calls(n.Name, "ImagePull")
	}
	rec, err := sdktest.Run(ctx, New(), req, nil)
	if res := rec.FinalResult(); err != nil || !res.OK {
		t.Fatalf("run: %v %v\n%s", res, err, strings.Join(res.Lines, "\n"))
	}
	assertOrder(t, rec)

	want := talosctlOrder()
	var got []string
	deadline := time.Now().Add(30 * time.Second) // the watch may lag the last Node update
	for time.Now().Before(deadline) {
		if got = o.sequence(); len(got) >= len(want) {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("order seen by Kubernetes:\n got %v\nwant %v", got, want)
	}

	for _, n := range e.c.Nodes() {
		wantPulls := 1
		if n.Role == sim.RoleControlPlane {
			wantPulls = 4
		}
		if got := e.c.Calls(n.Name, "ImagePull") - pullsBefore[n.Name]; got != wantPulls {
			t.Fatalf("%s: %d ImagePull calls, want %d", n.Name, got, wantPulls)
		}
		kubeletAt(t, e, n.Name, target)
	}
	steps := finalSteps(rec)
	for name, img := range map[string]string{"cp-1": "ghcr.io/siderolabs/kubelet:v1.36.3-fat", "worker-1": "ghcr.io/siderolabs/kubelet:v1.36.3-fat",
		"cp-2": "ghcr.io/siderolabs/kubelet:v1.36.3"} {
		if d := steps[stepKubelet+name].Detail; !strings.Contains(d, "("+img+")") {
			t.Fatalf("kubelet/%s: %q, want %s", name, d, img)
		}
		n, _ := inventoryNode(e, name)
		if spec := kubeletSpecImage(t, e, n); spec != img {
			t.Fatalf("%s runs kubelet image %s, want %s", name, spec, img)
		}
	}
	if s := steps[stepPrePull]; s.Status != sdk.StepOK || !strings.Contains(s.Detail, "13 image pull(s) done") {
		t.Fatalf("pre-pull step = %v", s)
	}
}

func inventoryNode(e *env, name string) (cluster.Node, bool) {
	inv, err := cluster.InventoryFrom(&e.request(target).Cluster)
	if err != nil {
		return cluster.Node{}, false
	}
	return inv.Node(name)
}

// kubeletSpecImage reads the node's KubeletSpec image through the Talos API.
func kubeletSpecImage(t *testing.T, e *env, n cluster.Node) string {
	t.Helper()
	ctx := ctxFor(t, time.Minute)
	req := e.request(target)
	inv, _ := cluster.InventoryFrom(&req.Cluster)
	c, err := cluster.Connect(ctx, inv, &req.Credentials)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ks, err := safe.StateGetByID[*talosk8s.KubeletSpec](client.WithNode(ctx, n.Address), c.COSI, talosk8s.KubeletID)
	if err != nil {
		t.Fatal(err)
	}
	return ks.TypedSpec().Image
}
