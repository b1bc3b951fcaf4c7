package k8supgrade

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"go.yaml.in/yaml/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/talosbot/talosbot/internal/testenv"
	"github.com/talosbot/talosbot/plugins/cluster"
	"github.com/talosbot/talosbot/plugins/sdk/sdktest"
	"github.com/talosbot/talosbot/sim"
)

// envTalosctl names the real talosctl the side-by-side test runs (see ../shared/tools/README.md).
const envTalosctl = "TALOSBOT_TALOSCTL"

// endState is what an upgrade leaves behind, per inventory node name.
type endState struct {
	// configChanges are the machine config's changed leaves ("cluster.apiServer.image" →
	// new value), relative to the config before the upgrade.
	configChanges map[string]map[string]string
	// staticPods are the mirror pods' images ("kube-apiserver/cp-1" → image).
	staticPods map[string]string
	// kubelets are the KubeletSpec image and the Node's kubelet version.
	kubelets map[string]string
	// kubeProxy is the kube-proxy DaemonSet's image.
	kubeProxy string
	// addons are the CoreDNS Deployment's and the flannel DaemonSet's images (the manifest sync's).
	addons string
	// order is the order Kubernetes saw the components change in.
	order []string
}

// startSideEnv is one sim of 3 control planes and a worker with a kube-apiserver on its etcd
// and Talos's kube-proxy DaemonSet (what talosctl's manifest sync manages), the worker on a
// -fat kubelet.
func startSideEnv(t testing.TB) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	e := &env{dir: t.TempDir()}
	startKube := testenv.KubeStarter(t)
	c, err := sim.Start(ctx, sim.Options{ControlPlanes: 3, Workers: 1, TalosVersion: supportsTarget, KubernetesVersion: from,
		StaticPods: true, BootstrapManifests: true, StaticPodReadyDelay: 100 * time.Millisecond, Dir: filepath.Join(e.dir, "sim"),
		Naming: sim.DistinctNames, // inventory names, hostnames, Node names and etcd members all differ
		KubeOnEtcd: func(ctx context.Context, servers []string) (sim.KubeBackend, error) {
			k, err := startKube(ctx, servers)
			if err != nil {
				return sim.KubeBackend{}, err
			}
			e.kube = k
			return sim.KubeBackend{Client: k.Client, Kubeconfig: k.Kubeconfig, Stop: k.Stop}, nil
		}})
	if err != nil {
		t.Fatalf("start sim: %v", err)
	}
	e.c = c
	patchNode(t, e, "worker-1", func(c *v1alpha1.Config) {
		c.MachineConfig.MachineKubelet.KubeletImage = "ghcr.io/siderolabs/kubelet:" + from + "-fat"
	})
	ageAddons(t, e)
	return e
}

// Add-on images of Talos v1.12.6 (what an older Talos bootstrapped) and v1.13.9 (what the
// sim's Talos renders now: docs/SIMULATOR.md "Bootstrap manifests").
const (
	oldAddons = "registry.k8s.io/coredns/coredns:v1.13.2 ghcr.io/siderolabs/flannel:v0.27.4"
	newAddons = "registry.k8s.io/coredns/coredns:v1.14.6 ghcr.io/siderolabs/flannel:0.28.8"
)

// ageAddons makes the cluster look bootstrapped by Talos v1.12 and upgraded since: the
// CoreDNS Deployment and the flannel DaemonSet are set back to Talos v1.12.6's images, applied
// by field manager "talos" as that Talos's ManifestApplyController did. The manifests the
// node's Talos renders now have newer ones, which only a manifest sync applies.
func ageAddons(t testing.TB, e *env) {
	t.Helper()
	ctx := ctxFor(t, time.Minute)
	force := true
	opts := metav1.PatchOptions{FieldManager: "talos", Force: &force}
	old := strings.Fields(oldAddons)
	dep := fmt.Sprintf(`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"coredns","namespace":"kube-system"},`+
		`"spec":{"selector":{"matchLabels":{"k8s-app":"kube-dns"}},"template":{"metadata":{"labels":{"k8s-app":"kube-dns"}},"spec":{"containers":[{"name":"coredns","image":%q}]}}}}`, old[0])
	if _, err := e.kube.Client.AppsV1().Deployments("kube-system").Patch(ctx, "coredns", types.ApplyPatchType, []byte(dep), opts); err != nil {
		t.Fatal(err)
	}
	ds := fmt.Sprintf(`{"apiVersion":"apps/v1","kind":"DaemonSet","metadata":{"name":"kube-flannel","namespace":"kube-system"},`+
		`"spec":{"selector":{"matchLabels":{"k8s-app":"flannel","tier":"node"}},"template":{"metadata":{"labels":{"k8s-app":"flannel","tier":"node"}},"spec":{"containers":[{"name":"kube-flannel","image":%q}]}}}}`, old[1])
	if _, err := e.kube.Client.AppsV1().DaemonSets("kube-system").Patch(ctx, "kube-flannel", types.ApplyPatchType, []byte(ds), opts); err != nil {
		t.Fatal(err)
	}
	if got := addonImages(t, e); got != oldAddons {
		t.Fatalf("add-ons after ageing: %s", got)
	}
}

// addonImages are the CoreDNS Deployment's and flannel DaemonSet's images, space-separated.
func addonImages(t testing.TB, e *env) string {
	t.Helper()
	ctx := ctxFor(t, time.Minute)
	d, err := e.kube.Client.AppsV1().Deployments("kube-system").Get(ctx, "coredns", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ds, err := e.kube.Client.AppsV1().DaemonSets("kube-system").Get(ctx, "kube-flannel", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return d.Spec.Template.Spec.Containers[0].Image + " " + ds.Spec.Template.Spec.Containers[0].Image
}

// configs reads every node's machine config as a document tree.
func configs(t *testing.T, e *env) map[string]map[string]any {
	t.Helper()
	ctx := ctxFor(t, time.Minute)
	req := e.request(target)
	inv, _ := cluster.InventoryFrom(&req.Cluster)
	c, err := cluster.Connect(ctx, inv, &req.Credentials)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	out := map[string]map[string]any{}
	for _, n := range inv.Nodes {
		mc, err := safe.StateGetByID[*config.MachineConfig](client.WithNode(ctx, n.Address), c.COSI, config.ActiveID)
		if err != nil {
			t.Fatal(err)
		}
		data, err := mc.Provider().Bytes()
		if err != nil {
			t.Fatal(err)
		}
		doc := map[string]any{}
		if err := yaml.Unmarshal(data, &doc); err != nil {
			t.Fatal(err)
		}
		out[n.Name] = doc
	}
	return out
}

// flatten turns a document into path → value leaves.
func flatten(prefix string, v any, out map[string]string) {
	switch x := v.(type) {
	case map[string]any:
		for k, vv := range x {
			p := k
			if prefix != "" {
				p = prefix + "." + k
			}
			flatten(p, vv, out)
		}
	case []any:
		for i, vv := range x {
			flatten(fmt.Sprintf("%s[%d]", prefix, i), vv, out)
		}
	default:
		out[prefix] = fmt.Sprint(x)
	}
}

func changes(before, after map[string]any) map[string]string {
	b, a := map[string]string{}, map[string]string{}
	flatten("", before, b)
	flatten("", after, a)
	out := map[string]string{}
	for k, v := range a {
		if b[k] != v {
			out[k] = v
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			out[k] = "<removed>"
		}
	}
	return out
}

// capture reads the end state of e after an upgrade whose configs before were before.
func capture(t *testing.T, e *env, before map[string]map[string]any, order *orderWatch) endState {
	t.Helper()
	ctx := ctxFor(t, time.Minute)
	st := endState{configChanges: map[string]map[string]string{}, staticPods: map[string]string{}, kubelets: map[string]string{}}
	for name, doc := range configs(t, e) {
		st.configChanges[name] = changes(before[name], doc)
	}
	for _, n := range e.c.Nodes() {
		inv, _ := inventoryNode(e, n.Name)
		kn, err := e.kube.Client.CoreV1().Nodes().Get(ctx, n.NodeName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		st.kubelets[n.Name] = kubeletSpecImage(t, e, inv) + " reporting " + kn.Status.NodeInfo.KubeletVersion
		if n.Role != sim.RoleControlPlane {
			continue
		}
		for _, comp := range sim.StaticPodComponents() {
			p, err := e.kube.Client.CoreV1().Pods("kube-system").Get(ctx, sim.StaticPodName(comp, n.NodeName), metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			st.staticPods[comp+"/"+n.Name] = p.Spec.Containers[0].Image
		}
	}
	ds, err := e.kube.Client.AppsV1().DaemonSets("kube-system").Get(ctx, "kube-proxy", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st.kubeProxy = ds.Spec.Template.Spec.Containers[0].Image
	st.addons = addonImages(t, e)
	want := len(talosctlOrder())
	deadline := time.Now().Add(30 * time.Second) // the watch may lag the last Node update
	for len(order.sequence()) < want && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
	st.order = order.sequence()
	return st
}

// talosctl runs the real talosctl against e's sim, with its talosconfig and nothing of the
// user's.
func talosctl(t *testing.T, bin string, e *env, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 6*time.Minute)
	defer cancel()
	tc := filepath.Join(e.dir, "sim", "talosconfig")
	cmd := exec.CommandContext(ctx, bin, append([]string{"--talosconfig", tc}, args...)...)
	cmd.Dir = e.dir
	cmd.Env = append(os.Environ(), "TALOSCONFIG="+tc, "HOME="+e.dir, "KUBECONFIG="+filepath.Join(e.dir, "no-kubeconfig"))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("talosctl %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	return out.String()
}

// TestSideBySideWithTalosctl upgrades one sim with `/talos upgrade k8s` (this plugin) and an
// identical one with the real `talosctl upgrade-k8s`, and compares what they leave behind:
// the machine config changes of every node, the static pods' images, the kubelets (image,
// variant and version), the kube-proxy DaemonSet, and the order Kubernetes saw it all change
// in, and the bootstrap manifest sync: the add-ons (CoreDNS, flannel) set back to an older
// Talos's images come out at the images the nodes' Talos renders.
func TestSideBySideWithTalosctl(t *testing.T) {
	t.Parallel()
	bin := os.Getenv(envTalosctl)
	if bin == "" {
		t.Skipf("skipping: %s is unset; point it at a talosctl v1.13.9 binary, e.g. export %s=\"$(cd ../shared/tools && pwd)/talosctl\" "+
			"(.ci/run does this; ../shared/tools/README.md says how that binary was built)", envTalosctl, envTalosctl)
	}

	var ours, theirs endState

	t.Run("plugin", func(t *testing.T) {
		e := startSideEnv(t)
		defer func() { _ = e.c.Close() }()
		before := configs(t, e)
		order := watchOrder(t, e.kube.Client, target, nodeByNodeName(e))
		ctx := ctxFor(t, 5*time.Minute)
		rec, err := sdktest.Run(ctx, New(), e.request(target), nil)
		if res := rec.FinalResult(); err != nil || !res.OK {
			t.Fatalf("/talos upgrade k8s: %v %v\n%s", res, err, strings.Join(res.Lines, "\n"))
		}
		ours = capture(t, e, before, order)
	})

	t.Run("talosctl", func(t *testing.T) {
		e := startSideEnv(t)
		defer func() { _ = e.c.Close() }()
		before := configs(t, e)
		order := watchOrder(t, e.kube.Client, target, nodeByNodeName(e))
		out := talosctl(t, bin, e, "-n", e.c.Nodes()[0].IP, "upgrade-k8s", "--to", strings.TrimPrefix(target, "v"))
		for _, w := range []string{"pre-pulling registry.k8s.io/kube-apiserver:" + target, "pre-pulling ghcr.io/siderolabs/kubelet:" + target + "-fat"} {
			if !strings.Contains(out, w) {
				t.Fatalf("talosctl output lacks %q (the sim must serve its pre-pull):\n%s", w, out)
			}
		}
		theirs = capture(t, e, before, order)
	})

	if t.Failed() {
		return
	}

	// Both did the expected thing, not merely the same thing.
	wantCP := map[string]string{
		"cluster.apiServer.image":         "registry.k8s.io/kube-apiserver:" + target,
		"cluster.controllerManager.image": "registry.k8s.io/kube-controller-manager:" + target,
		"cluster.scheduler.image":         "registry.k8s.io/kube-scheduler:" + target,
		"cluster.proxy.image":             "registry.k8s.io/kube-proxy:" + target,
		"machine.kubelet.image":           "ghcr.io/siderolabs/kubelet:" + target,
	}
	for _, s := range []struct {
		who string
		st  endState
	}{{"plugin", ours}, {"talosctl", theirs}} {
		if !reflect.DeepEqual(s.st.configChanges["cp-2"], wantCP) {
			t.Errorf("%s: cp-2 config changes %v, want %v", s.who, s.st.configChanges["cp-2"], wantCP)
		}
		if got := s.st.configChanges["worker-1"]; !reflect.DeepEqual(got, map[string]string{"machine.kubelet.image": "ghcr.io/siderolabs/kubelet:" + target + "-fat"}) {
			t.Errorf("%s: worker-1 config changes %v", s.who, got)
		}
		if s.st.kubeProxy != "registry.k8s.io/kube-proxy:"+target {
			t.Errorf("%s: kube-proxy DaemonSet at %s", s.who, s.st.kubeProxy)
		}
		// The manifest sync brought the add-ons to what the nodes' Talos renders.
		if s.st.addons != newAddons {
			t.Errorf("%s: add-ons at %s, want %s", s.who, s.st.addons, newAddons)
		}
	}

	if !reflect.DeepEqual(ours.configChanges, theirs.configChanges) {
		t.Errorf("machine config changes differ:\n ours     %v\n talosctl %v", sorted(ours.configChanges), sorted(theirs.configChanges))
	}
	if !reflect.DeepEqual(ours.staticPods, theirs.staticPods) {
		t.Errorf("static pod images differ:\n ours     %v\n talosctl %v", ours.staticPods, theirs.staticPods)
	}
	if !reflect.DeepEqual(ours.kubelets, theirs.kubelets) {
		t.Errorf("kubelets differ:\n ours     %v\n talosctl %v", ours.kubelets, theirs.kubelets)
	}
	if ours.kubeProxy != theirs.kubeProxy {
		t.Errorf("kube-proxy DaemonSet image: ours %s, talosctl %s", ours.kubeProxy, theirs.kubeProxy)
	}
	if !reflect.DeepEqual(ours.order, theirs.order) || !reflect.DeepEqual(ours.order, talosctlOrder()) {
		t.Errorf("order:\n ours     %v\n talosctl %v\n want     %v", ours.order, theirs.order, talosctlOrder())
	}
	t.Logf("same end state: %d nodes, static pods %v, kubelets %v, kube-proxy %s", len(ours.kubelets), ours.staticPods, ours.kubelets, ours.kubeProxy)
}

// nodeByNodeName maps a Kubernetes Node name back to the inventory name.
func nodeByNodeName(e *env) func(string) string {
	names := map[string]string{}
	for _, n := range e.c.Nodes() {
		names[n.NodeName] = n.Name
	}
	return func(s string) string {
		if n, ok := names[s]; ok {
			return n
		}
		return s
	}
}

func sorted(m map[string]map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "\n  %s: %v", k, m[k])
	}
	return b.String()
}
