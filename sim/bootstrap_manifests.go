package sim

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
)

// This file is the rest of Talos's bootstrap manifests (Options.BootstrapManifests): what
// ManifestController renders from BootstrapManifestsConfig
// (internal/app/machined/pkg/controllers/k8s/manifest.go, templates in
// internal/k8stemplates/, Talos v1.13.9) besides kube-proxy (kubeproxy.go), served as one
// k8s.Manifest resource per manifest id on the control planes and server-side applied at
// bootstrap as ManifestApplyController does (manifest_apply.go). The objects carry the
// fields that identify them and that an upgrade changes (names, labels, images, replicas,
// the data of ConfigMaps and Secrets); volumes, probes and resource requests are left out
// because no process runs. The Talos ServiceAccount CRD (13-talos-service-account-crd) is
// not rendered: the sim's Kubernetes client has no apiextensions API (docs/SIMULATOR.md).

// Add-on images Talos renders by default, per Talos minor: CoreDNS is
// constants.CoreDNSImage:constants.DefaultCoreDNSVersion (v1alpha1_provider.go CoreDNSImage) and
// flannel pkg/images/list.go's ghcr.io/siderolabs/flannel:constants.FlannelVersion, read at
// v1.12.6, v1.13.9 and v1.14.1. They follow the Talos version, not the Kubernetes one, which
// is why a Talos upgrade followed by upgrade-k8s's manifest sync changes them.
var addonImagesByMinor = map[string][2]string{
	"1.12": {"registry.k8s.io/coredns/coredns:v1.13.2", "ghcr.io/siderolabs/flannel:v0.27.4"},
	"1.13": {"registry.k8s.io/coredns/coredns:v1.14.6", "ghcr.io/siderolabs/flannel:0.28.8"},
	"1.14": {"registry.k8s.io/coredns/coredns:v1.14.7", "ghcr.io/siderolabs/flannel:0.28.9"},
}

// addonImages are the CoreDNS and flannel images Talos talosVersion renders (the newest
// known minor's for a version the table does not name).
func addonImages(talosVersion string) (coreDNS, flannel string) {
	minor := strings.TrimPrefix(talosVersion, "v")
	if parts := strings.SplitN(minor, ".", 3); len(parts) >= 2 {
		minor = parts[0] + "." + parts[1]
	}

	imgs, ok := addonImagesByMinor[minor]
	if !ok {
		imgs = addonImagesByMinor["1.14"]
	}

	return imgs[0], imgs[1]
}

// Bootstrap token of the sim's machine config (cluster.token "simsim.simulatortoken02",
// config.go): ManifestController renders it as the kubelet bootstrapping Secret.
const (
	simBootstrapTokenID     = "simsim"
	simBootstrapTokenSecret = "simulatortoken02"
	coreDNSName             = "coredns"
	coreDNSAppLabel         = "kube-dns"
	flannelName             = "kube-flannel"
	dnsServiceIP            = "10.96.0.10"
)

// bootstrapManifest is one rendered manifest: its id (the Manifest resource's) and objects.
type bootstrapManifest struct {
	id      string
	objects []map[string]any
}

// renderBootstrapManifests renders every bootstrap manifest of a control plane running
// talosVersion with kube-proxy image proxyImage, in manifest.go's id order (the order
// ManifestApplyController applies them).
func renderBootstrapManifests(talosVersion, proxyImage, server string) []bootstrapManifest {
	coreDNSImage, flannelImage := addonImages(talosVersion)
	ks := kubeProxyNamespace
	rbac := "rbac.authorization.k8s.io/v1"
	group := func(name string) map[string]any {
		return map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": name}
	}
	sa := func(name string) map[string]any {
		return map[string]any{"kind": "ServiceAccount", "name": name, "namespace": ks}
	}
	crb := func(name, role string, labels map[string]any, subjects ...map[string]any) map[string]any {
		md := map[string]any{"name": name}
		if labels != nil {
			md["labels"] = labels
		}

		return map[string]any{"apiVersion": rbac, "kind": "ClusterRoleBinding", "metadata": md,
			"roleRef":  map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
			"subjects": toAnySlice(subjects)}
	}
	rule := func(groups, resources, verbs []string) map[string]any {
		return map[string]any{"apiGroups": toAny(groups), "resources": toAny(resources), "verbs": toAny(verbs)}
	}
	read := []string{"get", "list", "watch"}
	defaults := map[string]any{"kubernetes.io/bootstrapping": "rbac-defaults"}

	out := []bootstrapManifest{
		{"00-kubelet-bootstrapping-token", []map[string]any{{
			"apiVersion": "v1", "kind": "Secret", "type": "bootstrap.kubernetes.io/token",
			"metadata": map[string]any{"name": "bootstrap-token-" + simBootstrapTokenID, "namespace": ks},
			"stringData": map[string]any{
				"token-id": simBootstrapTokenID, "token-secret": simBootstrapTokenSecret,
				"usage-bootstrap-authentication": "true", "auth-extra-groups": "system:bootstrappers:nodes",
			},
		}}},
		{"01-csr-approver-role-binding", []map[string]any{crb("system-bootstrap-approve-node-client-csr",
			"system:certificates.k8s.io:certificatesigningrequests:nodeclient", nil, group("system:bootstrappers:nodes"))}},
		{"01-csr-node-bootstrap", []map[string]any{crb("system-bootstrap-node-bootstrapper", "system:node-bootstrapper", nil,
			group("system:bootstrappers:nodes"), group("system:nodes"))}},
		{"01-csr-renewal-role-binding", []map[string]any{crb("system-bootstrap-node-renewal",
			"system:certificates.k8s.io:certificatesigningrequests:selfnodeclient", nil, group("system:nodes"))}},
		{"05-flannel", flannelObjects(flannelImage, rule, crb, sa, read)},
		{kubeProxyManifestID, typedToUnstructured(kubeProxyObjects(proxyImage))},
		{"11-core-dns", coreDNSObjects(coreDNSImage, rule, crb, sa, read, defaults)},
		{"11-core-dns-svc", []map[string]any{{
			"apiVersion": "v1", "kind": "Service",
			"metadata": map[string]any{"name": coreDNSAppLabel, "namespace": ks,
				"labels": map[string]any{"k8s-app": coreDNSAppLabel, "kubernetes.io/cluster-service": "true", "kubernetes.io/name": "CoreDNS"}},
			"spec": map[string]any{
				"clusterIP": dnsServiceIP, "selector": map[string]any{"k8s-app": coreDNSAppLabel},
				"ports": []any{
					map[string]any{"name": "dns", "port": int64(53), "protocol": "UDP", "targetPort": int64(53)},
					map[string]any{"name": "dns-tcp", "port": int64(53), "protocol": "TCP", "targetPort": int64(53)},
					map[string]any{"name": "metrics", "port": int64(9153), "protocol": "TCP", "targetPort": int64(9153)},
				},
			},
		}}},
		{"11-kube-config-in-cluster", []map[string]any{{
			"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": "kubeconfig-in-cluster", "namespace": ks},
			"data": map[string]any{"kubeconfig": "apiVersion: v1\nkind: Config\nclusters:\n- name: local\n  cluster:\n" +
				"    server: https://localhost:" + fmt.Sprint(constants.DefaultControlPlanePort) + "\n" +
				"    certificate-authority: /var/run/secrets/kubernetes.io/serviceaccount/ca.crt\n" +
				"users:\n- name: service-account\n  user:\n    tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token\n" +
				"contexts:\n- name: local\n  context: {cluster: local, user: service-account}\ncurrent-context: local\n"},
		}}},
		{"11-talos-node-rbac-template", []map[string]any{
			crb("system:talos-nodes", "system:talos-nodes", defaults, group("system:nodes")),
			{"apiVersion": rbac, "kind": "ClusterRole", "metadata": map[string]any{"name": "system:talos-nodes", "labels": defaults},
				"rules": []any{rule([]string{"discovery.k8s.io"}, []string{"endpointslices"}, read)}},
		}},
	}

	_ = server // the in-cluster kubeconfig talks to localhost (KubePrism), as Talos renders it

	sort.SliceStable(out, func(i, j int) bool { return out[i].id < out[j].id })

	return out
}

func flannelObjects(image string, rule func(g, r, v []string) map[string]any,
	crb func(string, string, map[string]any, ...map[string]any) map[string]any, sa func(string) map[string]any, read []string,
) []map[string]any {
	labels := map[string]any{"k8s-app": "flannel", "tier": "node"}
	app := map[string]any{"k8s-app": "flannel"}

	return []map[string]any{
		{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": map[string]any{"name": "flannel", "labels": app},
			"rules": []any{
				rule([]string{""}, []string{"pods", "nodes", "namespaces"}, read),
				rule([]string{""}, []string{"nodes/status"}, []string{"patch"}),
			}},
		crb("flannel", "flannel", app, sa("flannel")),
		{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": map[string]any{"name": "flannel", "namespace": kubeProxyNamespace, "labels": app}},
		{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "kube-flannel-cfg", "namespace": kubeProxyNamespace, "labels": labels},
			"data": map[string]any{
				"cni-conf.json": `{"name": "cbr0", "cniVersion": "1.0.0", "plugins": [{"type": "flannel", "delegate": {"hairpinMode": true, "isDefaultGateway": true}}, {"type": "portmap", "capabilities": {"portMappings": true}}]}`,
				"net-conf.json": `{"Network": "10.244.0.0/16", "Backend": {"Type": "vxlan", "Port": 4789}}`,
			}},
		{"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": map[string]any{"name": flannelName, "namespace": kubeProxyNamespace, "labels": labels},
			"spec": map[string]any{
				"selector": map[string]any{"matchLabels": labels},
				"template": map[string]any{
					"metadata": map[string]any{"labels": labels},
					"spec": map[string]any{
						"containers": []any{map[string]any{"name": flannelName, "image": image,
							"command": []any{"/opt/bin/flanneld"}, "args": []any{"--ip-masq", "--kube-subnet-mgr"}}},
						"hostNetwork": true, "priorityClassName": "system-node-critical", "serviceAccountName": "flannel",
						"tolerations": []any{map[string]any{"effect": "NoSchedule", "operator": "Exists"}, map[string]any{"effect": "NoExecute", "operator": "Exists"}},
					},
				},
			}},
	}
}

func coreDNSObjects(image string, rule func(g, r, v []string) map[string]any,
	crb func(string, string, map[string]any, ...map[string]any) map[string]any, sa func(string) map[string]any, read []string, defaults map[string]any,
) []map[string]any {
	labels := map[string]any{"k8s-app": coreDNSAppLabel}
	corefile := ".:53 {\n    errors\n    health {\n        lameduck 5s\n    }\n    ready\n    log . {\n        class error\n    }\n    prometheus :9153\n\n" +
		"    kubernetes cluster.local in-addr.arpa ip6.arpa {\n        pods insecure\n        fallthrough in-addr.arpa ip6.arpa\n        ttl 30\n    }\n" +
		"    forward . /etc/resolv.conf {\n       max_concurrent 1000\n    }\n    cache 30 {\n       disable success cluster.local\n       disable denial cluster.local\n    }\n" +
		"    loop\n    reload\n    loadbalance\n}\n"

	return []map[string]any{
		{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": map[string]any{"name": coreDNSName, "namespace": kubeProxyNamespace}},
		{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": map[string]any{"name": "system:coredns", "labels": defaults},
			"rules": []any{
				rule([]string{""}, []string{"endpoints", "services", "pods", "namespaces"}, read),
				rule([]string{"discovery.k8s.io"}, []string{"endpointslices"}, read),
			}},
		crb("system:coredns", "system:coredns", defaults, sa(coreDNSName)),
		{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": coreDNSName, "namespace": kubeProxyNamespace},
			"data": map[string]any{"Corefile": corefile}},
		{"apiVersion": "apps/v1", "kind": "Deployment",
			"metadata": map[string]any{"name": coreDNSName, "namespace": kubeProxyNamespace,
				"labels": map[string]any{"k8s-app": coreDNSAppLabel, "kubernetes.io/name": "CoreDNS"}},
			"spec": map[string]any{
				"replicas": int64(2),
				"selector": map[string]any{"matchLabels": labels},
				"strategy": map[string]any{"type": "RollingUpdate", "rollingUpdate": map[string]any{"maxUnavailable": int64(1)}},
				"template": map[string]any{
					"metadata": map[string]any{"labels": labels},
					"spec": map[string]any{
						"containers": []any{map[string]any{"name": coreDNSName, "image": image, "args": []any{"-conf", "/etc/coredns/Corefile"},
							"ports": []any{
								map[string]any{"containerPort": int64(53), "name": "dns", "protocol": "UDP"},
								map[string]any{"containerPort": int64(53), "name": "dns-tcp", "protocol": "TCP"},
								map[string]any{"containerPort": int64(9153), "name": "metrics", "protocol": "TCP"},
							}}},
						"dnsPolicy": "Default", "priorityClassName": "system-cluster-critical", "serviceAccountName": coreDNSName,
						"tolerations": []any{
							map[string]any{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"},
							map[string]any{"key": "CriticalAddonsOnly", "operator": "Exists"},
						},
					},
				},
			}},
	}
}

// typedToUnstructured converts typed objects to their unstructured form, without status.
func typedToUnstructured(objs []k8sruntime.Object) []map[string]any {
	out := make([]map[string]any, 0, len(objs))

	for _, o := range objs {
		u, err := k8sruntime.DefaultUnstructuredConverter.ToUnstructured(o)
		if err != nil {
			continue // cannot happen for these typed objects
		}

		delete(u, "status")
		out = append(out, u)
	}

	return out
}

func toAnySlice(in []map[string]any) []any {
	out := make([]any, len(in))
	for i, m := range in {
		out[i] = m
	}

	return out
}

// bootstrapManifestResources are the k8s.Manifest resources of a control plane (namespace
// controlplane), one per manifest id, as ManifestController writes them.
func bootstrapManifestResources(talosVersion, proxyImage, server string) []*k8s.Manifest {
	rendered := renderBootstrapManifests(talosVersion, proxyImage, server)
	out := make([]*k8s.Manifest, 0, len(rendered))

	for _, bm := range rendered {
		m := k8s.NewManifest(k8s.ControlPlaneNamespaceName, bm.id)
		for _, o := range bm.objects {
			m.TypedSpec().Items = append(m.TypedSpec().Items, k8s.SingleManifest{Object: o})
		}

		out = append(out, m)
	}

	return out
}

// applyTarget is where a kind is applied: its API group's REST client and plural resource.
type applyTarget struct {
	client     rest.Interface
	resource   string
	namespaced bool
}

func (k *kubeSide) applyTargetFor(kind string) (applyTarget, bool) {
	core, apps, rbac := k.client.CoreV1().RESTClient(), k.client.AppsV1().RESTClient(), k.client.RbacV1().RESTClient()

	t, ok := map[string]applyTarget{
		"Secret": {core, "secrets", true}, "ServiceAccount": {core, "serviceaccounts", true},
		"ConfigMap": {core, "configmaps", true}, "Service": {core, "services", true},
		"ClusterRole": {rbac, "clusterroles", false}, "ClusterRoleBinding": {rbac, "clusterrolebindings", false},
		"Deployment": {apps, "deployments", true}, "DaemonSet": {apps, "daemonsets", true},
	}[kind]

	if ok && (t.client == nil || reflect.ValueOf(t.client).IsNil()) {
		return t, false // a fake clientset has no REST client
	}

	return t, ok
}

// objectRef is an object's kind, namespace and name, as a manifest carries them.
func objectRef(obj map[string]any) (kind, ns, name string) {
	kind, _ = obj["kind"].(string)
	md, _ := obj["metadata"].(map[string]any)
	name, _ = md["name"].(string)
	ns, _ = md["namespace"].(string)

	return kind, ns, name
}

// applyObject writes one bootstrap object as the given Talos's ManifestApplyController does
// (internal/app/machined/pkg/controllers/k8s/manifest_apply.go). Before v1.13 (v1.12.6):
// create it with field manager "talos" unless it exists. From v1.13 (v1.13.9): server-side
// apply with field manager "talos" (no forced ownership).
func (k *kubeSide) applyObject(ctx context.Context, obj map[string]any, ssa bool) error {
	kind, ns, name := objectRef(obj)

	t, ok := k.applyTargetFor(kind)
	if !ok {
		return fmt.Errorf("kube: apply %s %s: kind not served by the sim", kind, name)
	}

	body, err := json.Marshal(obj)
	if err != nil {
		return fmt.Errorf("kube: encode %s %s: %w", kind, name, err)
	}

	var req *rest.Request

	if ssa {
		req = t.client.Patch(types.ApplyPatchType).Resource(t.resource).Name(name).Body(body)
	} else {
		req = t.client.Post().Resource(t.resource).Body(body)
	}

	req = req.Param("fieldManager", constants.KubernetesFieldManagerName)
	if t.namespaced {
		req = req.Namespace(ns)
	}

	if err := req.Do(ctx).Error(); err != nil && !(!ssa && apierrors.IsAlreadyExists(err)) {
		return fmt.Errorf("kube: apply bootstrap manifest %s %s: %w", kind, name, err)
	}

	return nil
}

// inventoryKey is an object's key in the inventory ConfigMap: go-kubernetes' ssa inventory
// (kubernetes/ssa/internal/inventory/configmap, v0.2.38, which Talos v1.13.9 uses) stores one
// data key per object, cli-utils' ObjMetadata string "<namespace>_<name>_<group>_<Kind>",
// colons in RBAC names written as "__".
func inventoryKey(obj map[string]any) string {
	kind, ns, name := objectRef(obj)
	group := ""

	if av, _ := obj["apiVersion"].(string); strings.Contains(av, "/") {
		group = av[:strings.Index(av, "/")]
	}

	return ns + "_" + strings.ReplaceAll(name, ":", "__") + "_" + group + "_" + kind
}

// applyBootstrapManifests is ManifestApplyController's apply at bootstrap
// (internal/app/machined/pkg/controllers/k8s/manifest_apply.go), as the first control plane's
// Talos does it: every manifest in id order. Talos v1.13 and later server-side apply each
// object with the bootstrap inventory annotation and record them in the inventory ConfigMap
// kube-system/talos-bootstrap-manifests-inventory; Talos v1.12 creates them with no
// annotation and no inventory (upgrade-k8s's sync adopts them later).
func (k *kubeSide) applyBootstrapManifests(ctx context.Context, talosVersion, proxyImage, server string) error {
	ssa := talosMinorAtLeast(talosVersion, 13)
	inventory := map[string]string{}

	for _, bm := range renderBootstrapManifests(talosVersion, proxyImage, server) {
		for _, o := range bm.objects {
			if ssa {
				md, _ := o["metadata"].(map[string]any)
				ann, _ := md["annotations"].(map[string]any)

				if ann == nil {
					ann = map[string]any{}
				}

				ann[inventoryAnnotation] = constants.KubernetesBootstrapManifestsInventoryName
				md["annotations"] = ann
				inventory[inventoryKey(o)] = ""
			}

			if err := k.applyObject(ctx, o, ssa); err != nil {
				return err
			}
		}
	}

	if !ssa {
		return nil
	}

	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: constants.KubernetesBootstrapManifestsInventoryName, Namespace: constants.KubernetesInventoryNamespace},
		Data:       inventory,
	}
	if _, err := k.client.CoreV1().ConfigMaps(cm.Namespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("kube: write the bootstrap manifests inventory: %w", err)
	}

	return nil
}

// talosMinorAtLeast reports whether Talos version v ("v1.13.9") is 1.minor or later.
func talosMinorAtLeast(v string, minor int) bool {
	var maj, mnr int

	if _, err := fmt.Sscanf(strings.TrimPrefix(v, "v"), "%d.%d", &maj, &mnr); err != nil {
		return true // an unparsable version is taken as current
	}

	return maj > 1 || mnr >= minor
}

// reconcileCoreDNS plays the Deployment and ReplicaSet controllers, the scheduler and the
// kubelets for the CoreDNS Deployment (11-core-dns): spec.replicas pods at the template's
// image, Running and Ready, each on a schedulable node (not cordoned, not reset), spread
// over nodes as the template's preferred anti-affinity asks; a pod at an old image, or on a
// node that is gone, is replaced; an evicted pod (a drain) comes back on another node. The
// Deployment's status says so for its generation.
func (k *kubeSide) reconcileCoreDNS(ctx context.Context) error {
	deps := k.client.AppsV1().Deployments(kubeProxyNamespace)

	d, err := deps.Get(ctx, coreDNSName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}

	if err != nil {
		return err
	}

	replicas := int32(1)
	if d.Spec.Replicas != nil {
		replicas = *d.Spec.Replicas
	}

	image := ""
	if cs := d.Spec.Template.Spec.Containers; len(cs) > 0 {
		image = cs[0].Image
	}

	nodeList, err := k.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}

	cordoned := map[string]bool{}
	for _, kn := range nodeList.Items {
		cordoned[kn.Name] = kn.Spec.Unschedulable
	}

	alive := map[string]*node{}

	for _, n := range k.c.nodes {
		if _, registered := cordoned[n.info.NodeName]; registered && !n.isReset() {
			alive[n.info.NodeName] = n
		}
	}

	pods := k.client.CoreV1().Pods(kubeProxyNamespace)

	list, err := pods.List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=" + coreDNSAppLabel})
	if err != nil {
		return err
	}

	zero := int64(0)
	perNode := map[string]int{}
	names := map[string]bool{}

	var kept []corev1.Pod

	for _, p := range list.Items {
		names[p.Name] = true

		if p.DeletionTimestamp != nil {
			continue // the kubelet (runKubelet) finishes it
		}

		if len(p.Spec.Containers) == 0 || p.Spec.Containers[0].Image != image || alive[p.Spec.NodeName] == nil || int32(len(kept)) >= replicas {
			if derr := pods.Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); derr != nil && !apierrors.IsNotFound(derr) {
				return derr
			}

			continue
		}

		kept = append(kept, p)
		perNode[p.Spec.NodeName]++
	}

	ready := int32(0)

	for _, p := range kept {
		if !podReady(&p) {
			if err := k.setPodRunning(ctx, p.Name, alive[p.Spec.NodeName].info.IP); err != nil {
				return err
			}
		}

		ready++
	}

	h := sha256.Sum256([]byte(image))
	rs := coreDNSName + "-" + hex.EncodeToString(h[:5])

	for i := 0; int32(len(kept)) < replicas; i++ {
		target := k.scheduleCoreDNS(alive, cordoned, perNode)
		if target == nil {
			break // nowhere to run: the status says so
		}

		name := ""

		for j := 0; name == "" || names[name]; j++ {
			s := sha256.Sum256([]byte(fmt.Sprintf("%s/%d/%d", target.info.NodeName, i, j)))
			name = rs + "-" + hex.EncodeToString(s[:3])
		}

		names[name] = true
		controller := true
		spec := *d.Spec.Template.Spec.DeepCopy()
		spec.NodeName = target.info.NodeName

		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Name: name, Namespace: kubeProxyNamespace, Labels: d.Spec.Template.Labels,
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs, UID: d.UID, Controller: &controller}},
			},
			Spec: spec,
		}

		if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create %s: %w", name, err)
		}

		if err := k.setPodRunning(ctx, name, target.info.IP); err != nil {
			return err
		}

		kept = append(kept, *pod)
		perNode[target.info.NodeName]++
		ready++
	}

	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := deps.Get(ctx, coreDNSName, metav1.GetOptions{})
		if err != nil {
			return err
		}

		st := appsv1.DeploymentStatus{
			// The generation reconciled (d), not the latest: see reconcileDaemonSet.
			ObservedGeneration: d.Generation, Replicas: int32(len(kept)), UpdatedReplicas: int32(len(kept)),
			ReadyReplicas: ready, AvailableReplicas: ready, UnavailableReplicas: max(0, replicas-ready),
		}

		// The conditions the Deployment controller keeps, which kstatus (talosctl's manifest
		// sync waits with it) reads: Available, and Progressing with NewReplicaSetAvailable
		// once the rollout is done.
		avail, progress := corev1.ConditionFalse, "ReplicaSetUpdated"
		if ready >= replicas {
			avail, progress = corev1.ConditionTrue, "NewReplicaSetAvailable"
		}

		st.Conditions = []appsv1.DeploymentCondition{
			{Type: appsv1.DeploymentAvailable, Status: avail, Reason: "MinimumReplicasAvailable"},
			{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, Reason: progress},
		}

		if sameDeploymentStatus(cur.Status, st) {
			return nil
		}

		now := metav1.Now()
		for i := range st.Conditions {
			st.Conditions[i].LastUpdateTime, st.Conditions[i].LastTransitionTime = now, now
		}

		cur.Status = st
		_, err = deps.UpdateStatus(ctx, cur, metav1.UpdateOptions{})

		return err
	})
}

// scheduleCoreDNS picks the schedulable node with the fewest CoreDNS pods (the template's
// preferred pod anti-affinity on kubernetes.io/hostname), the first in inventory order on a
// tie. Its tolerations cover the control planes' NoSchedule taint.
func (k *kubeSide) scheduleCoreDNS(alive map[string]*node, cordoned map[string]bool, perNode map[string]int) *node {
	var best *node

	for _, n := range k.c.nodes {
		if alive[n.info.NodeName] == nil || cordoned[n.info.NodeName] {
			continue
		}

		if best == nil || perNode[n.info.NodeName] < perNode[best.info.NodeName] {
			best = n
		}
	}

	return best
}

// sameDeploymentStatus compares two statuses without the conditions' timestamps.
func sameDeploymentStatus(a, b appsv1.DeploymentStatus) bool {
	strip := func(s appsv1.DeploymentStatus) appsv1.DeploymentStatus {
		s = *s.DeepCopy()
		for i := range s.Conditions {
			s.Conditions[i].LastUpdateTime, s.Conditions[i].LastTransitionTime = metav1.Time{}, metav1.Time{}
		}

		return s
	}

	return equality.Semantic.DeepEqual(strip(a), strip(b))
}
