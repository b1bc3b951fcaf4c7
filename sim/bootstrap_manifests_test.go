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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
	t.Parallel()
	slow(t)
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

		// Talos v1.12 creates the objects (field manager talos) with no inventory annotation.
		// An object that sets no field but its name (a bare ServiceAccount) has no managed
		// fields to record.
		byTalos := slices.ContainsFunc(meta.GetManagedFields(), func(m metav1.ManagedFieldsEntry) bool {
			return m.Manager == "talos" && m.Operation == metav1.ManagedFieldsOperationUpdate
		})
		if _, annotated := meta.GetAnnotations()["config.k8s.io/owning-inventory"]; annotated || !byTalos && o.kind != "ServiceAccount" {
			t.Fatalf("%s %s: annotations %v, managers %v (%+v)", o.kind, o.name, meta.GetAnnotations(), meta.GetManagedFields(), meta)
		}
	}

	if _, err := kc.CoreV1().ConfigMaps("kube-system").Get(ctx, "talos-bootstrap-manifests-inventory", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("Talos v1.12 wrote an inventory: %v", err)
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

// TestBootstrapManifestsInventory: Talos v1.13 server-side applies the bootstrap manifests with
// the inventory annotation and records every object in the inventory ConfigMap, keyed as
// go-kubernetes' ssa inventory keys them (which talosctl upgrade-k8s reads back).
func TestBootstrapManifestsInventory(t *testing.T) {
	t.Parallel()
	slow(t)
	kube := testenv.StartKube(t)
	kc := kube.Client

	startSim(t, sim.Options{ControlPlanes: 1, Workers: 1, Kube: kc, StaticPods: true, BootstrapManifests: true, TalosVersion: "v1.13.9"})
	ctx := t.Context()

	d, err := kc.AppsV1().Deployments("kube-system").Get(ctx, "coredns", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	applied := slices.ContainsFunc(d.ManagedFields, func(m metav1.ManagedFieldsEntry) bool {
		return m.Manager == "talos" && m.Operation == metav1.ManagedFieldsOperationApply
	})
	if d.Annotations["config.k8s.io/owning-inventory"] != "talos-bootstrap-manifests-inventory" || !applied || d.Spec.Template.Spec.Containers[0].Image != "registry.k8s.io/coredns/coredns:v1.14.6" {
		t.Fatalf("CoreDNS Deployment: annotations %v, managed %v, image %s", d.Annotations, d.ManagedFields, d.Spec.Template.Spec.Containers[0].Image)
	}

	inv, err := kc.CoreV1().ConfigMaps("kube-system").Get(ctx, "talos-bootstrap-manifests-inventory", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	for _, key := range []string{
		"kube-system_coredns_apps_Deployment", "_system__coredns_rbac.authorization.k8s.io_ClusterRole",
		"kube-system_bootstrap-token-simsim__Secret", "kube-system_kube-flannel_apps_DaemonSet", "kube-system_kube-dns__Service",
	} {
		if _, ok := inv.Data[key]; !ok {
			t.Fatalf("inventory lacks %q: %v", key, inv.Data)
		}
	}

	if len(inv.Data) != 21 {
		t.Fatalf("inventory has %d objects, want 21: %v", len(inv.Data), inv.Data)
	}
}
