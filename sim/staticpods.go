package sim

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/resource/meta"
	talosconfig "github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
)

// DefaultStaticPodReadyDelay is how long a recreated control-plane static pod takes to become Ready.
const DefaultStaticPodReadyDelay = 200 * time.Millisecond

// Control-plane components Talos runs as static pods on every control plane. The kubelet
// publishes each as the mirror pod kube-system/<component>-<node>.
const (
	ComponentAPIServer         = "kube-apiserver"
	ComponentControllerManager = "kube-controller-manager"
	ComponentScheduler         = "kube-scheduler"
)

// StaticPodComponents lists the control-plane static pods in the order Talos starts them.
func StaticPodComponents() []string {
	return []string{ComponentAPIServer, ComponentControllerManager, ComponentScheduler}
}

const staticPodNamespace = "kube-system"

// StaticPodName is the mirror pod name of a component on a node, as the kubelet names it.
func StaticPodName(component, node string) string { return component + "-" + node }

func (img images) forComponent(component string) string {
	switch component {
	case ComponentAPIServer:
		return img.APIServer
	case ComponentControllerManager:
		return img.ControllerManager
	case ComponentScheduler:
		return img.Scheduler
	}

	return ""
}

func staticPodHash(image string) string {
	s := sha256.Sum256([]byte(image))

	return hex.EncodeToString(s[:16])
}

// syncStaticPods plays the kubelet for the node's control-plane static pods: a component whose
// image in the machine config differs from its mirror pod gets a new mirror pod (the kubelet
// deletes and recreates it, as a static pod's spec is immutable), not Ready; initial pods (a
// cluster that was already running) are Ready at once. It returns the components recreated.
func (n *node) syncStaticPods(ctx context.Context, initial bool) ([]string, error) {
	k := n.c.kube
	if !n.hasStaticPods() {
		return nil, nil
	}

	n.staticMu.Lock()
	defer n.staticMu.Unlock()

	n.mu.Lock()
	img := n.img
	n.mu.Unlock()

	pods := k.client.CoreV1().Pods(staticPodNamespace)

	var changed []string

	versions, commands := n.staticPodConfigVersions(ctx)

	for _, comp := range StaticPodComponents() {
		want := img.forComponent(comp)
		name := StaticPodName(comp, n.info.NodeName)

		cur, err := pods.Get(ctx, name, metav1.GetOptions{})

		switch {
		case err == nil && len(cur.Spec.Containers) > 0 && cur.Spec.Containers[0].Image == want &&
			cur.Annotations[annotationConfigVersion] == versions[comp]:
			if initial { // a new sim over an apiserver that kept the pod: the kubelet reports afresh
				if err := n.setStaticPodReady(ctx, comp, n.currentFault().StaticPodNotReady != comp); err != nil {
					return changed, err
				}
			}

			continue
		case err == nil:
			zero := int64(0)
			if derr := pods.Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); derr != nil && !apierrors.IsNotFound(derr) {
				return changed, fmt.Errorf("kube: delete mirror pod %s: %w", name, derr)
			}
		case !apierrors.IsNotFound(err):
			return changed, fmt.Errorf("kube: get mirror pod %s: %w", name, err)
		}

		hash := staticPodHash(want + "/" + versions[comp])
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Name: name, Namespace: staticPodNamespace,
				Labels: map[string]string{"k8s-app": comp, "tier": "control-plane"},
				Annotations: map[string]string{
					corev1.MirrorPodAnnotationKey: hash,
					"kubernetes.io/config.hash":   hash,
					"kubernetes.io/config.source": "file",
					annotationConfigVersion:       versions[comp],
				},
			},
			Spec: corev1.PodSpec{
				NodeName:    n.info.NodeName,
				HostNetwork: true,
				Containers:  []corev1.Container{{Name: comp, Image: want, Command: commands[comp]}},
				Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			},
		}

		if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			return changed, fmt.Errorf("kube: create mirror pod %s: %w", name, err)
		}

		changed = append(changed, comp)

		if err := n.setStaticPodReady(ctx, comp, initial && n.currentFault().StaticPodNotReady != comp); err != nil {
			return changed, err
		}
	}

	return changed, nil
}

// setStaticPodReady writes the mirror pod's status: Running and Ready, or still starting
// (Running, container not ready) when ready is false.
func (n *node) setStaticPodReady(ctx context.Context, comp string, ready bool) error {
	pods := n.c.kube.client.CoreV1().Pods(staticPodNamespace)
	name := StaticPodName(comp, n.info.NodeName)

	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pod, err := pods.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}

		now := metav1.NewTime(n.c.now())
		st := corev1.ConditionFalse
		reason, msg := "ContainersNotReady", "containers with unready status: ["+comp+"]"

		if ready {
			st, reason, msg = corev1.ConditionTrue, "", ""
		}

		image := ""
		if len(pod.Spec.Containers) > 0 {
			image = pod.Spec.Containers[0].Image
		}

		pod.Status = corev1.PodStatus{
			Phase:     corev1.PodRunning,
			HostIP:    n.info.IP,
			PodIP:     n.info.IP,
			StartTime: &now,
			Conditions: []corev1.PodCondition{
				{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
				{Type: corev1.ContainersReady, Status: st, Reason: reason, Message: msg, LastTransitionTime: now},
				{Type: corev1.PodReady, Status: st, Reason: reason, Message: msg, LastTransitionTime: now},
			},
			ContainerStatuses: []corev1.ContainerStatus{{
				Name: comp, Image: image, Ready: ready, Started: &ready,
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
			}},
		}

		_, err = pods.UpdateStatus(ctx, pod, metav1.UpdateOptions{})

		return err
	})
	if err != nil {
		return fmt.Errorf("kube: status of mirror pod %s: %w", name, err)
	}

	return nil
}

// settleStaticPods is the background half of a config change on a control plane: recreate the
// mirror pods whose image changed, wait StaticPodReadyDelay, then mark every static pod Ready
// that is at the configured image, except the component named by Fault.StaticPodNotReady.
func (n *node) settleStaticPods(ctx context.Context) {
	if _, err := n.syncStaticPods(ctx, false); err != nil {
		n.c.log.Warn("static pods", "node", n.info.Name, "err", err)

		return
	}

	t := time.NewTimer(n.c.opts.StaticPodReadyDelay)
	defer t.Stop()

	select {
	case <-ctx.Done():
		return
	case <-t.C:
	}

	n.markStaticPods(ctx)
}

// markStaticPods sets each static pod's readiness from the node's fault.
func (n *node) markStaticPods(ctx context.Context) {
	n.staticMu.Lock()
	defer n.staticMu.Unlock()

	n.mu.Lock()
	img := n.img
	n.mu.Unlock()

	faulty := n.currentFault().StaticPodNotReady

	for _, comp := range StaticPodComponents() {
		pod, err := n.c.kube.client.CoreV1().Pods(staticPodNamespace).Get(ctx, StaticPodName(comp, n.info.NodeName), metav1.GetOptions{})
		if err != nil || len(pod.Spec.Containers) == 0 || pod.Spec.Containers[0].Image != img.forComponent(comp) {
			continue // a newer config change is on its way; its own settle marks it
		}

		if err := n.setStaticPodReady(ctx, comp, comp != faulty); err != nil {
			n.c.log.Warn("static pods", "node", n.info.Name, "err", err)
		}
	}
}

// hasStaticPods: the sim plays the kubelet's static pods for this node.
func (n *node) hasStaticPods() bool {
	return n.c.kube != nil && n.c.opts.StaticPods && n.info.Role == RoleControlPlane
}

// staticPodsChanged reacts to a config apply.
func (n *node) staticPodsChanged() {
	if !n.hasStaticPods() {
		return
	}

	n.c.goBackground(n.settleStaticPods)
}

// annotationConfigVersion is the static pod annotation carrying the version of the component's
// config resource (APIServerConfig, ...) the pod was rendered from; `talosctl upgrade-k8s`
// waits for the mirror pod to carry the version it saw the config resource reach
// (pkg/cluster/kubernetes/talos_managed.go checkPodStatus).
const annotationConfigVersion = constants.AnnotationStaticPodConfigVersion

// staticPodCommand is the command line of a component's container: enough flags for
// go-kubernetes' upgrade checks (removed flags and feature gates) to read a real one.
func staticPodCommand(comp string) []string {
	switch comp {
	case ComponentAPIServer:
		return []string{"/usr/local/bin/kube-apiserver", "--etcd-servers=https://127.0.0.1:2379",
			"--secure-port=6443", "--service-cluster-ip-range=10.96.0.0/12", "--authorization-mode=Node,RBAC"}
	case ComponentControllerManager:
		return []string{"/usr/local/bin/kube-controller-manager", "--allocate-node-cidrs=true",
			"--cluster-cidr=10.244.0.0/16", "--use-service-account-credentials"}
	case ComponentScheduler:
		return []string{"/usr/local/bin/kube-scheduler", "--config=/system/config/kubernetes/kube-scheduler/scheduler-config.yaml"}
	}

	return nil
}

// configResourceType is the controlplane-namespace config resource a component is rendered from.
func configResourceType(comp string) resource.Type {
	switch comp {
	case ComponentAPIServer:
		return k8s.APIServerConfigType
	case ComponentControllerManager:
		return k8s.ControllerManagerConfigType
	default:
		return k8s.SchedulerConfigType
	}
}

// staticPodConfigVersions refreshes the node's resources (the config just changed) and returns
// each component's config resource version, as ControlPlaneStaticPodController stamps it on
// the static pod (internal/app/machined/pkg/controllers/k8s/control_plane_static_pod.go), and
// the command line of its StaticPod resource (extraArgs merged), which the kubelet runs.
func (n *node) staticPodConfigVersions(ctx context.Context) (versions map[string]string, commands map[string][]string) {
	versions, commands = map[string]string{}, map[string][]string{}

	for _, comp := range StaticPodComponents() {
		commands[comp] = staticPodCommand(comp)
	}

	if n.cosi == nil {
		return versions, commands
	}

	st, err := n.cosi.current(ctx)
	if err != nil {
		n.c.log.Warn("static pods: read config resources", "node", n.info.Name, "err", err)

		return versions, commands
	}

	for _, comp := range StaticPodComponents() {
		r, err := st.Get(ctx, resource.NewMetadata(k8s.ControlPlaneNamespaceName, configResourceType(comp), comp, resource.VersionUndefined))
		if err == nil {
			versions[comp] = r.Metadata().Version().String()
		}

		sp, err := st.Get(ctx, resource.NewMetadata(k8s.NamespaceName, k8s.StaticPodType, comp, resource.VersionUndefined))
		if err != nil {
			continue
		}

		if pod, ok := sp.(*k8s.StaticPod); ok {
			if cmd := podCommand(pod.TypedSpec().Pod); len(cmd) > 0 {
				commands[comp] = cmd
			}
		}
	}

	return versions, commands
}

// podCommand is the first container's command of a StaticPod resource's pod document.
func podCommand(pod map[string]any) []string {
	spec, _ := pod["spec"].(map[string]any)
	containers, _ := spec["containers"].([]any)

	if len(containers) == 0 {
		return nil
	}

	c, _ := containers[0].(map[string]any)
	raw, _ := c["command"].([]any)

	out := make([]string, 0, len(raw))

	for _, a := range raw {
		if s, ok := a.(string); ok {
			out = append(out, s)
		}
	}

	return out
}

// kubeResourceTypes are the Kubernetes resource types this file serves (see kubeResources).
func kubeResourceTypes() []meta.ResourceWithRD {
	return []meta.ResourceWithRD{
		&k8s.APIServerConfig{},
		&k8s.ControllerManagerConfig{},
		&k8s.SchedulerConfig{},
		&k8s.BootstrapManifestsConfig{},
		&k8s.Manifest{},
		&k8s.StaticPod{},
		&k8s.KubeletSpec{},
		&k8s.KubeletConfig{},
	}
}

// kubeResources are the Kubernetes resources Talos's controllers derive from the machine
// config (internal/app/machined/pkg/controllers/k8s/): on control planes the config of each
// control-plane component (control_plane.go), the bootstrap manifests config
// (control_plane.go) and the static pods rendered from them (control_plane_static_pod.go); on
// every node the kubelet spec (kubelet_spec.go). Of the bootstrap manifests (manifest.go) the
// sim renders them with Options.BootstrapManifests (bootstrap_manifests.go, kube-proxy's in
// kubeproxy.go). See docs/SIMULATOR.md.
//
// The extraArgs of the machine config (cluster.apiServer/controllerManager/scheduler and
// machine.kubelet) go into the components' command lines and the kubelet's arguments, and
// machine.kubelet.extraConfig into the kubelet's configuration, as Talos merges them
// (control_plane_static_pod.go, kubelet_spec.go; see extraArgs for how far). cfg may be nil
// (a config that does not load): then there are none.
func (n *node) kubeResources(img images, cfg talosconfig.Provider) []desiredResource {
	var out []desiredResource

	add := func(owner string, r resource.Resource) { out = append(out, desiredResource{res: r, owner: owner}) }

	extra := extraArgsOf(cfg)

	ks := k8s.NewKubeletSpec(k8s.NamespaceName, k8s.KubeletID)
	ks.TypedSpec().Image = img.Kubelet
	ks.TypedSpec().ExpectedNodename = n.cosiNodename()
	ks.TypedSpec().Args = withExtraArgs([]string{
		"--config=/etc/kubernetes/kubelet.yaml",
		"--hostname-override=" + n.cosiNodename(),
		"--node-ip=" + n.info.IP,
	}, extra.kubelet)
	ks.TypedSpec().Config = kubeletConfiguration(extra.kubeletConfig)
	add("k8s.KubeletSpecController", ks)

	// KubeletConfig (kubelet_config.go, v1.13.9): talosctl v1.14.1's health reads it to tell
	// whether the kubelet runs at all (pkg/cluster/check/default.go kubeletDisabled).
	kc := k8s.NewKubeletConfig(k8s.NamespaceName, k8s.KubeletID)
	*kc.TypedSpec() = k8s.KubeletConfigSpec{Image: img.Kubelet, ClusterDNS: []string{"10.96.0.10"}, ClusterDomain: "cluster.local",
		ExtraArgs: argValues(extra.kubelet), ExtraConfig: extra.kubeletConfig}
	add("k8s.KubeletConfigController", kc)

	if n.info.Role != RoleControlPlane {
		return out
	}

	endpoint := "https://" + n.c.firstCPIP() + ":6443"

	api := k8s.NewAPIServerConfig(k8s.APIServerConfigID)
	*api.TypedSpec() = k8s.APIServerConfigSpec{
		Image:                img.APIServer,
		ControlPlaneEndpoint: endpoint,
		EtcdServers:          []string{"https://127.0.0.1:2379"},
		LocalPort:            6443,
		ServiceCIDRs:         []string{"10.96.0.0/12"},
		AdvertisedAddress:    n.info.IP,
		ExtraArgs:            argValues(extra.byComponent[ComponentAPIServer]),
	}
	add("k8s.ControlPlaneAPIServerController", api)

	cm := k8s.NewControllerManagerConfig(k8s.ControllerManagerConfigID)
	*cm.TypedSpec() = k8s.ControllerManagerConfigSpec{Enabled: true, Image: img.ControllerManager,
		PodCIDRs: []string{"10.244.0.0/16"}, ServiceCIDRs: []string{"10.96.0.0/12"},
		ExtraArgs: argValues(extra.byComponent[ComponentControllerManager])}
	add("k8s.ControlPlaneControllerManagerController", cm)

	sc := k8s.NewSchedulerConfig(k8s.SchedulerConfigID)
	*sc.TypedSpec() = k8s.SchedulerConfigSpec{Enabled: true, Image: img.Scheduler,
		ExtraArgs: argValues(extra.byComponent[ComponentScheduler])}
	add("k8s.ControlPlaneSchedulerController", sc)

	coreDNSImage, flannelImage := addonImages(n.talosVersion()) // bootstrap_manifests.go
	bm := k8s.NewBootstrapManifestsConfig()
	*bm.TypedSpec() = k8s.BootstrapManifestsConfigSpec{
		Server: endpoint, ClusterDomain: "cluster.local", PodCIDRs: []string{"10.244.0.0/16"},
		ProxyEnabled: true, ProxyImage: img.Proxy,
		CoreDNSEnabled: true, CoreDNSImage: coreDNSImage, DNSServiceIP: dnsServiceIP,
		FlannelEnabled: true, FlannelImage: flannelImage, CNIName: "flannel",
		TalosAPIServiceEnabled: true,
	}
	add("k8s.ControlPlaneBootstrapManifestsController", bm)

	if n.c.bootstrapManifests() {
		for _, m := range bootstrapManifestResources(n.talosVersion(), img.Proxy, endpoint) { // bootstrap_manifests.go
			add("k8s.ManifestController", m)
		}
	}

	for _, comp := range StaticPodComponents() {
		sp := k8s.NewStaticPod(k8s.NamespaceName, comp)
		sp.TypedSpec().Pod = map[string]any{
			"apiVersion": "v1",
			"kind":       "Pod",
			"metadata": map[string]any{
				"name": comp, "namespace": staticPodNamespace,
				"labels": map[string]any{"k8s-app": comp, "tier": "control-plane"},
			},
			"spec": map[string]any{
				"hostNetwork": true,
				"containers": []any{map[string]any{
					"name": comp, "image": img.forComponent(comp), "command": toAny(withExtraArgs(staticPodCommand(comp), extra.byComponent[comp])),
				}},
			},
		}
		add("k8s.ControlPlaneStaticPodController", sp)
	}

	return out
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}

	return out
}
