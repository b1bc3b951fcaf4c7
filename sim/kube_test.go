package sim_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/talosbot/talosbot/internal/testenv"
	"github.com/talosbot/talosbot/sim"
)

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}

	return false
}

func createPodWithPDB(ctx context.Context, t *testing.T, kc kubernetes.Interface, node string) {
	t.Helper()

	labels := map[string]string{"app": "critical"}

	_, err := kc.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "critical", Namespace: "default", Labels: labels},
		Spec: corev1.PodSpec{
			NodeName:   node,
			Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	if err := testenv.SetPodRunningReady(ctx, kc, "default", "critical"); err != nil {
		t.Fatal(err)
	}

	minAvailable := intstr.FromInt32(1)

	_, err = kc.PolicyV1().PodDisruptionBudgets("default").Create(ctx, &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "critical", Namespace: "default"},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: &minAvailable,
			Selector:     &metav1.LabelSelector{MatchLabels: labels},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	if err := testenv.SetPDBStatus(ctx, kc, "default", "critical", 0); err != nil {
		t.Fatal(err)
	}
}

// TestKubeSide runs the sim against a real kube-apiserver: Node registration, Ready flips across
// a reboot, and the legacy upgrade's server-side drain through the eviction API, which a
// PodDisruptionBudget blocks until it allows a disruption.
func TestKubeSide(t *testing.T) {
	t.Parallel()
	slow(t)
	kube := testenv.StartKube(t)
	kc := kube.Client

	c, cli := startSim(t, sim.Options{
		ControlPlanes: 1, Workers: 1, Kube: kc, Kubeconfig: kube.Kubeconfig,
		HostLabel: "talosbot.io/proxmox-host", RebootDelay: 300 * time.Millisecond, DrainTimeout: time.Second,
	})
	ctx := t.Context()
	w1 := nodeIP(t, c, "worker-1")

	nodes, err := kc.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil || len(nodes.Items) != 2 {
		t.Fatalf("nodes: %v %v", nodes, err)
	}

	for _, n := range nodes.Items {
		if !nodeReady(&n) || n.Status.NodeInfo.KubeletVersion != sim.DefaultKubernetesVersion || n.Labels["talosbot.io/proxmox-host"] == "" {
			t.Fatalf("node %s: ready=%v kubelet=%s labels=%v", n.Name, nodeReady(&n), n.Status.NodeInfo.KubeletVersion, n.Labels)
		}

		_, cp := n.Labels["node-role.kubernetes.io/control-plane"]
		if cp != (n.Name == "cp-1") {
			t.Fatalf("node %s control-plane label %v", n.Name, cp)
		}
	}

	// The Kubeconfig RPC answers with the apiserver's credentials in Talos's shape (kubeconfig.go).
	kcfg, err := cli.Kubeconfig(client.WithNode(ctx, nodeIP(t, c, "cp-1")))
	if err != nil {
		t.Fatal(err)
	}

	got, err := clientcmd.RESTConfigFromKubeConfig(kcfg)
	if err != nil {
		t.Fatal(err)
	}

	want, err := clientcmd.RESTConfigFromKubeConfig(kube.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}

	if got.Host != want.Host || string(got.CAData) != string(want.CAData) || string(got.CertData) != string(want.CertData) || got.BearerToken != "" {
		t.Fatalf("Kubeconfig RPC: host %s (want %s), same CA %v, same client certificate %v, token %q",
			got.Host, want.Host, string(got.CAData) == string(want.CAData), string(got.CertData) == string(want.CertData), got.BearerToken)
	}

	createPodWithPDB(ctx, t, kc, "worker-1")

	// Blocked by the PDB: the drain times out, the upgrade sequence fails, nothing reboots.
	watch := make(chan client.EventResult, 64)
	if err := cli.EventsWatchV2(client.WithNode(ctx, w1), watch); err != nil {
		t.Fatal(err)
	}

	if _, err := cli.Upgrade(client.WithNode(ctx, w1), upgradeImage, false, false); err != nil {
		t.Fatal(err)
	}

	for failed := false; !failed; {
		ev := <-watch
		if ev.Error != nil {
			t.Fatalf("event stream: %v", ev.Error)
		}

		if s, ok := ev.Event.Payload.(*machineapi.SequenceEvent); ok && s.Sequence == "upgrade" && s.Action == machineapi.SequenceEvent_NOOP {
			if !strings.Contains(s.GetError().GetMessage(), "sequence failed: ") {
				t.Fatalf("upgrade sequence event %v, want the failure a blocked drain gives", s)
			}

			failed = true
		}
	}

	if v, _ := version(ctx, cli, w1); v != sim.DefaultTalosVersion {
		t.Fatalf("version %s after a failed drain", v)
	}

	if _, err := kc.CoreV1().Pods("default").Get(ctx, "critical", metav1.GetOptions{}); err != nil {
		t.Fatalf("protected pod gone: %v", err)
	}

	// A failed sequence is fatal for machined: it reboots (10 s countdown) on the old version,
	// and the boot uncordons the node Talos cordoned.
	eventually(t, 40*time.Second, "worker-1 uncordoned after the failed drain", func() error {
		n, err := kc.CoreV1().Nodes().Get(ctx, "worker-1", metav1.GetOptions{})
		if err == nil && n.Spec.Unschedulable {
			err = errors.New("still cordoned")
		}

		return err
	})

	// The budget allows one disruption: the drain evicts the pod and the upgrade goes through.
	if err := testenv.SetPDBStatus(ctx, kc, "default", "critical", 1); err != nil {
		t.Fatal(err)
	}

	nw, err := kc.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=worker-1"})
	if err != nil {
		t.Fatal(err)
	}
	defer nw.Stop()

	if _, err := cli.Upgrade(client.WithNode(ctx, w1), upgradeImage, false, false); err != nil {
		t.Fatal(err)
	}

	// The kubelet's Ready goes false for the reboot and true again after it.
	var flips []bool

	timeout := time.After(30 * time.Second)

	for len(flips) < 2 {
		select {
		case <-timeout:
			t.Fatalf("Ready flips seen: %v", flips)
		case ev := <-nw.ResultChan():
			n, ok := ev.Object.(*corev1.Node)
			if !ok {
				continue
			}

			if r := nodeReady(n); len(flips) == 0 && !r || len(flips) == 1 && r {
				flips = append(flips, r)
			}
		}
	}

	eventually(t, 30*time.Second, "worker-1 upgraded and Ready", func() error {
		n, err := kc.CoreV1().Nodes().Get(ctx, "worker-1", metav1.GetOptions{})
		if err != nil {
			return err
		}

		if !nodeReady(n) {
			return errors.New("not ready")
		}

		if n.Status.NodeInfo.OSImage != "Talos (v1.13.9)" {
			return fmt.Errorf("os image %q", n.Status.NodeInfo.OSImage)
		}

		if n.Spec.Unschedulable {
			return errors.New("still cordoned")
		}

		return nil
	})

	if _, err := kc.CoreV1().Pods("default").Get(ctx, "critical", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("pod not evicted: %v", err)
	}

	if n := c.Calls("worker-1", "/machine.MachineService/Upgrade"); n != 2 {
		t.Fatalf("upgrade calls %d, want 2", n)
	}
}

// BenchmarkStartWithKube measures a 3+2 sim start (and close) against a running kube-apiserver,
// Node registration included. The apiserver itself starts once, outside the measurement.
func BenchmarkStartWithKube(b *testing.B) {
	kube := testenv.StartKube(b)

	for b.Loop() {
		c, err := sim.Start(b.Context(), sim.Options{Dir: b.TempDir(), ControlPlanes: 3, Workers: 2, Kube: kube.Client})
		if err != nil {
			b.Fatal(err)
		}

		if err := c.Close(); err != nil {
			b.Fatal(err)
		}
	}
}

// TestKubeStoresIntoSimEtcd: with Options.KubeOnEtcd the kube-apiserver stores into the control
// planes' etcd members, so the Node objects the sim registers are /registry keys in that cluster
// (and so in its snapshots), as on a Talos control plane.
func TestKubeStoresIntoSimEtcd(t *testing.T) {
	t.Parallel()
	slow(t)
	startKube := testenv.KubeStarter(t)

	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()

	var kube *testenv.Kube

	c, err := sim.Start(ctx, sim.Options{
		Dir: t.TempDir(), ControlPlanes: 3, Workers: 1,
		KubeOnEtcd: func(ctx context.Context, servers []string) (sim.KubeBackend, error) {
			if len(servers) != 3 {
				return sim.KubeBackend{}, fmt.Errorf("want the 3 control planes' client URLs, got %v", servers)
			}

			k, err := startKube(ctx, servers)
			if err != nil {
				return sim.KubeBackend{}, err
			}

			kube = k

			return sim.KubeBackend{Client: k.Client, Kubeconfig: k.Kubeconfig, Stop: k.Stop}, nil
		},
	})
	if err != nil {
		t.Fatalf("start sim: %v", err)
	}

	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("close sim: %v", err)
		}
	})

	nodes, err := kube.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil || len(nodes.Items) != 4 {
		t.Fatalf("nodes registered through the apiserver: %v (err %v), want 4", len(nodes.Items), err)
	}

	ec, err := c.Etcd().Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer ec.Close()

	// kube-apiserver keeps Nodes under /registry/minions/<name>.
	resp, err := ec.Get(ctx, "/registry/minions/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatalf("read the sim's etcd: %v", err)
	}

	if len(resp.Kvs) != 4 {
		t.Fatalf("the sim's etcd holds %d Node keys under /registry/minions/, want 4", len(resp.Kvs))
	}

	// The apiserver is the sim's to stop: after Close it no longer answers.
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}

	if _, err := kube.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err == nil {
		t.Fatal("kube-apiserver still answers after the sim closed")
	}
}

// TestKubeOnEtcdRefusesBoth: Kube and KubeOnEtcd are two ways to give the sim a Kubernetes side.
func TestKubeOnEtcdRefusesBoth(t *testing.T) {
	t.Parallel()
	_, err := sim.Start(t.Context(), sim.Options{
		ControlPlanes: 1, Kube: fake.NewClientset(),
		KubeOnEtcd: func(context.Context, []string) (sim.KubeBackend, error) { return sim.KubeBackend{}, nil },
	})
	if err == nil || !strings.Contains(err.Error(), "not both") {
		t.Fatalf("Start with Kube and KubeOnEtcd: %v, want a refusal", err)
	}
}

// TestKubeProxyBootstrapManifest: with BootstrapManifests the sim applies Talos's kube-proxy
// DaemonSet at start and serves it as a Manifest resource, and plays the DaemonSet controller:
// one Ready pod per node at the template's image and a status that says so; a new image in
// the DaemonSet rolls every pod.
func TestKubeProxyBootstrapManifest(t *testing.T) {
	t.Parallel()
	slow(t)
	kube := testenv.StartKube(t)
	kc := kube.Client

	c, cli := startSim(t, sim.Options{ControlPlanes: 1, Workers: 2, Kube: kc, StaticPods: true, BootstrapManifests: true})
	ctx := t.Context()
	total := int32(len(c.Nodes()))

	rolledTo := func(image string) {
		t.Helper()

		eventually(t, 30*time.Second, "kube-proxy at "+image, func() error {
			ds, err := kc.AppsV1().DaemonSets("kube-system").Get(ctx, "kube-proxy", metav1.GetOptions{})
			if err != nil {
				return err
			}

			st := ds.Status
			if st.ObservedGeneration != ds.Generation || st.DesiredNumberScheduled != total || st.NumberReady != total || st.UpdatedNumberScheduled != total {
				return fmt.Errorf("status %+v (generation %d)", st, ds.Generation)
			}

			pods, err := kc.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=kube-proxy"})
			if err != nil {
				return err
			}

			if int32(len(pods.Items)) != total {
				return fmt.Errorf("%d pods", len(pods.Items))
			}

			for _, p := range pods.Items {
				if p.Spec.Containers[0].Image != image || !podIsReady(&p) || p.OwnerReferences[0].Kind != "DaemonSet" {
					return fmt.Errorf("pod %s: %s ready=%v", p.Name, p.Spec.Containers[0].Image, podIsReady(&p))
				}
			}

			return nil
		})
	}

	rolledTo("registry.k8s.io/kube-proxy:" + sim.DefaultKubernetesVersion)

	cp := c.Nodes()[0]

	manifests, err := safe.StateListAll[*k8s.Manifest](client.WithNode(ctx, cp.IP), cli.COSI)
	if err != nil || manifests.Len() != len(talosManifestIDs) {
		t.Fatalf("Manifest resources on the control plane: %v %v", manifests, err)
	}

	ds, err := kc.AppsV1().DaemonSets("kube-system").Get(ctx, "kube-proxy", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	ds.Spec.Template.Spec.Containers[0].Image = "registry.k8s.io/kube-proxy:v1.36.3"
	if _, err := kc.AppsV1().DaemonSets("kube-system").Update(ctx, ds, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	rolledTo("registry.k8s.io/kube-proxy:v1.36.3")
}

func podIsReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}

	return false
}
