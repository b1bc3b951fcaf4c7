package sim_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/talosbot/talosbot/internal/testenv"
	"github.com/talosbot/talosbot/sim"
)

// talosManifestIDs are the ids ManifestController renders with kube-proxy, CoreDNS and
// flannel enabled (internal/app/machined/pkg/controllers/k8s/manifest.go, v1.13.9), less the
// Talos ServiceAccount CRD the sim does not render.
var talosManifestIDs = []string{
	"00-kubelet-bootstrapping-token", "01-csr-approver-role-binding", "01-csr-node-bootstrap", "01-csr-renewal-role-binding",
	"05-flannel", "10-kube-proxy", "11-core-dns", "11-core-dns-svc", "11-kube-config-in-cluster", "11-talos-node-rbac-template",
}

// TestBootstrapManifests: with BootstrapManifests the sim's Kubernetes carries what Talos's
// bootstrap manifests create — the CoreDNS Deployment and Service, the flannel and kube-proxy
// DaemonSets, their ServiceAccounts, ConfigMaps, RBAC and the bootstrap token Secret — server-side
// applied by field manager "talos" with the bootstrap inventory annotation, at the add-on
// images of the Talos version the control plane runs, and served as Manifest resources. CoreDNS
// runs its two replicas Ready, and a drained node's CoreDNS pod comes back on another node.
func TestBootstrapManifests(t *testing.T) {
	kube := testenv.StartKube(t)
	kc := kube.Client

	c, cli := startSim(t, sim.Options{ControlPlanes: 1, Workers: 2, Kube: kc, StaticPods: true, BootstrapManifests: true,
		TalosVersion: "v1.12.6"})
	ctx := t.Context()
	cp := c.Nodes()[0]

	manifests, err := safe.StateListAll[*k8s.Manifest](client.WithNode(ctx, cp.IP), cli.COSI)
	if err != nil {
		t.Fatal(err)
	}

	var ids []string

	for m := range manifests.All() {
		ids = append(ids, m.Metadata().ID())
	}

	if !slices.Equal(ids, talosManifestIDs) {
		t.Fatalf("Manifest ids %v, want %v", ids, talosManifestIDs)
	}

	type object struct{ kind, ns, name string }

	for _, o := range []object{
		{"Secret", "kube-system", "bootstrap-token-simsim"}, {"ServiceAccount", "kube-system", "coredns"},
		{"ServiceAccount", "kube-system", "flannel"}, {"ServiceAccount", "kube-system", "kube-proxy"},
		{"ConfigMap", "kube-system", "coredns"}, {"ConfigMap", "kube-system", "kube-flannel-cfg"},
		{"ConfigMap", "kube-system", "kubeconfig-in-cluster"}, {"Service", "kube-system", "kube-dns"},
		{"ClusterRole", "", "system:coredns"}, {"ClusterRoleBinding", "", "flannel"},
		{"ClusterRoleBinding", "", "system-bootstrap-node-bootstrapper"}, {"Deployment", "kube-system", "coredns"},
		{"DaemonSet", "kube-system", "kube-flannel"}, {"DaemonSet", "kube-system", "kube-proxy"},
	} {
		var (
			meta metav1.Object
			err  error
		)

		switch o.kind {
		case "Secret":
			meta, err = kc.CoreV1().Secrets(o.ns).Get(ctx, o.name, metav1.GetOptions{})
		case "ServiceAccount":
			meta, err = kc.CoreV1().ServiceAccounts(o.ns).Get(ctx, o.name, metav1.GetOptions{})
		case "ConfigMap":
			meta, err = kc.CoreV1().ConfigMaps(o.ns).Get(ctx, o.name, metav1.GetOptions{})
		case "Service":
			meta, err = kc.CoreV1().Services(o.ns).Get(ctx, o.name, metav1.GetOptions{})
		case "ClusterRole":
			meta, err = kc.RbacV1().ClusterRoles().Get(ctx, o.name, metav1.GetOptions{})
		case "ClusterRoleBinding":
			meta, err = kc.RbacV1().ClusterRoleBindings().Get(ctx, o.name, metav1.GetOptions{})
		case "Deployment":
			meta, err = kc.AppsV1().Deployments(o.ns).Get(ctx, o.name, metav1.GetOptions{})
		case "DaemonSet":
			meta, err = kc.AppsV1().DaemonSets(o.ns).Get(ctx, o.name, metav1.GetOptions{})
		}

		if err != nil {
			t.Fatalf("%s %s: %v", o.kind, o.name, err)
		}

		if meta.GetAnnotations()["config.k8s.io/owning-inventory"] != "talos-bootstrap-manifests-inventory" ||
			len(meta.GetManagedFields()) == 0 || meta.GetManagedFields()[0].Manager != "talos" {
			t.Fatalf("%s %s: annotations %v, managers %v", o.kind, o.name, meta.GetAnnotations(), meta.GetManagedFields())
		}
	}

	coreDNSPods := func(want int) []corev1.Pod {
		t.Helper()

		var pods []corev1.Pod

		eventually(t, 30*time.Second, fmt.Sprintf("%d CoreDNS pods Ready", want), func() error {
			d, err := kc.AppsV1().Deployments("kube-system").Get(ctx, "coredns", metav1.GetOptions{})
			if err != nil {
				return err
			}

			if img := d.Spec.Template.Spec.Containers[0].Image; img != "registry.k8s.io/coredns/coredns:v1.13.2" {
				return fmt.Errorf("CoreDNS image %s, want Talos v1.12.6's v1.13.2", img)
			}

			if d.Status.ReadyReplicas != int32(want) || d.Status.ObservedGeneration != d.Generation {
				return fmt.Errorf("status %+v", d.Status)
			}

			list, err := kc.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=kube-dns"})
			if err != nil {
				return err
			}

			pods = pods[:0]

			for _, p := range list.Items {
				if p.DeletionTimestamp == nil && podIsReady(&p) {
					pods = append(pods, p)
				}
			}

			if len(pods) != want {
				return fmt.Errorf("%d Ready pods", len(pods))
			}

			return nil
		})

		return pods
	}

	pods := coreDNSPods(2)
	if pods[0].Spec.NodeName == pods[1].Spec.NodeName {
		t.Fatalf("both CoreDNS replicas on %s: the preferred anti-affinity spreads them", pods[0].Spec.NodeName)
	}

	eventually(t, 30*time.Second, "kube-flannel on every node", func() error {
		ds, err := kc.AppsV1().DaemonSets("kube-system").Get(ctx, "kube-flannel", metav1.GetOptions{})
		if err != nil {
			return err
		}

		if ds.Status.NumberReady != 3 || ds.Spec.Template.Spec.Containers[0].Image != "ghcr.io/siderolabs/flannel:v0.27.4" {
			return fmt.Errorf("status %+v, image %s", ds.Status, ds.Spec.Template.Spec.Containers[0].Image)
		}

		return nil
	})

	// A drained node's CoreDNS pod is evicted and comes back on a node that is schedulable.
	drained := pods[0].Spec.NodeName

	n, err := kc.CoreV1().Nodes().Get(ctx, drained, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	n.Spec.Unschedulable = true
	if _, err := kc.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	if err := kc.CoreV1().Pods("kube-system").Delete(ctx, pods[0].Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	for _, p := range coreDNSPods(2) {
		if p.Spec.NodeName == drained {
			t.Fatalf("CoreDNS pod %s came back on the cordoned node %s", p.Name, drained)
		}
	}
}
