package sim

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
)

// This file is the kube-proxy bootstrap manifest (Options.BootstrapManifests) and the parts of
// Kubernetes that keep it running, which the sim plays because it has no
// kube-controller-manager and no kubelets: the DaemonSet controller (one pod per sim node at
// the template's image, the DaemonSet's status) and the kubelet (the pods Running and Ready).

const (
	kubeProxyName        = "kube-proxy"
	kubeProxyManifestID  = "10-kube-proxy" // manifest.go's id for it
	inventoryAnnotation  = "config.k8s.io/owning-inventory"
	kubeProxyNamespace   = "kube-system"
	kubeProxyAppLabelKey = "k8s-app"
)

// kubeProxyObjects renders the kube-proxy manifest as Talos's ManifestController does
// (internal/app/machined/pkg/controllers/k8s/manifest.go "10-kube-proxy", template
// internal/app/machined/pkg/controllers/k8s/internal/k8stemplates/kube-proxy.go): its
// ServiceAccount, the ClusterRoleBinding to system:node-proxier and the DaemonSet at the
// configured proxy image. Volumes and the in-cluster kubeconfig are left out (no process runs).
func kubeProxyObjects(image string) []k8sruntime.Object {
	labels := map[string]string{kubeProxyAppLabelKey: kubeProxyName, "tier": "node"}

	sa := &corev1.ServiceAccount{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"},
		ObjectMeta: metav1.ObjectMeta{Name: kubeProxyName, Namespace: kubeProxyNamespace},
	}

	crb := &rbacv1.ClusterRoleBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRoleBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: kubeProxyName},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "system:node-proxier"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: kubeProxyName, Namespace: kubeProxyNamespace}},
	}

	privileged := true
	maxUnavailable := intOrStringOne()

	ds := &appsv1.DaemonSet{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "DaemonSet"},
		ObjectMeta: metav1.ObjectMeta{Name: kubeProxyName, Namespace: kubeProxyNamespace, Labels: labels},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{{
						Name:            kubeProxyName,
						Image:           image,
						Command:         []string{"/usr/local/bin/kube-proxy", "--proxy-mode=iptables"},
						SecurityContext: &corev1.SecurityContext{Privileged: &privileged},
					}},
					HostNetwork:        true,
					PriorityClassName:  "system-cluster-critical",
					ServiceAccountName: kubeProxyName,
					Tolerations: []corev1.Toleration{
						{Effect: corev1.TaintEffectNoSchedule, Operator: corev1.TolerationOpExists},
						{Effect: corev1.TaintEffectNoExecute, Operator: corev1.TolerationOpExists},
					},
				},
			},
			UpdateStrategy: appsv1.DaemonSetUpdateStrategy{
				Type:          appsv1.RollingUpdateDaemonSetStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: &maxUnavailable},
			},
		},
	}

	return []k8sruntime.Object{sa, crb, ds}
}

// runDaemonSets plays the DaemonSet controller and the kubelets for kube-proxy until ctx ends:
// after every change of the DaemonSet (and every second, which also covers missed events) each
// sim node gets one pod at the template's image, Running and Ready, and the DaemonSet's status
// says so for its current generation.
func (k *kubeSide) runDaemonSets(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()

	for {
		w, err := k.client.AppsV1().DaemonSets(kubeProxyNamespace).Watch(ctx, metav1.ListOptions{})

		var events <-chan watchEvent
		if err == nil {
			events = adaptWatch(w.ResultChan())
		}

		for stop := false; !stop; {
			for _, name := range []string{kubeProxyName, flannelName} {
				if rerr := k.reconcileDaemonSet(ctx, name); rerr != nil && ctx.Err() == nil {
					k.log.Warn("kube: DaemonSet", "name", name, "err", rerr)
				}
			}

			if rerr := k.reconcileCoreDNS(ctx); rerr != nil && ctx.Err() == nil { // bootstrap_manifests.go
				k.log.Warn("kube: CoreDNS Deployment", "err", rerr)
			}

			select {
			case <-ctx.Done():
				if w != nil {
					w.Stop()
				}

				return
			case _, ok := <-events:
				stop = !ok && events != nil
			case <-t.C:
			}
		}

		if w != nil {
			w.Stop()
		}
	}
}

type watchEvent struct{}

// adaptWatch turns a watch channel into a wake-up channel that closes with it.
func adaptWatch[T any](in <-chan T) <-chan watchEvent {
	out := make(chan watchEvent)

	go func() {
		defer close(out)

		for range in {
			select {
			case out <- watchEvent{}:
			default: // a wake-up is already pending
			}
		}
	}()

	return out
}

// daemonSetPodName is the pod of a DaemonSet on a node (the controller's generated name).
func daemonSetPodName(dsName, nodeName string) string {
	h := sha256.Sum256([]byte(nodeName))

	return dsName + "-" + hex.EncodeToString(h[:3])
}

// reconcileDaemonSet is the DaemonSet controller and the kubelets for one bootstrap
// DaemonSet (kube-proxy, kube-flannel): a Ready pod per node at the template's image.
func (k *kubeSide) reconcileDaemonSet(ctx context.Context, dsName string) error {
	ds, err := k.client.AppsV1().DaemonSets(kubeProxyNamespace).Get(ctx, dsName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}

	if err != nil {
		return err
	}

	tmpl := ds.Spec.Template
	image := ""

	if len(tmpl.Spec.Containers) > 0 {
		image = tmpl.Spec.Containers[0].Image
	}

	pods := k.client.CoreV1().Pods(kubeProxyNamespace)
	ready := int32(0)
	nodes := int32(0)

	for _, n := range k.c.nodes {
		if n.isReset() {
			continue // a reset node's Node object is gone from the DaemonSet's view
		}

		nodes++
		name := daemonSetPodName(dsName, n.info.NodeName)

		cur, err := pods.Get(ctx, name, metav1.GetOptions{})

		switch {
		case err == nil && len(cur.Spec.Containers) > 0 && cur.Spec.Containers[0].Image == image && cur.DeletionTimestamp == nil:
			if podReady(cur) {
				ready++

				continue
			}
		case err == nil:
			zero := int64(0)
			if derr := pods.Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); derr != nil && !apierrors.IsNotFound(derr) {
				return derr
			}

			fallthrough
		case apierrors.IsNotFound(err):
			controller := true
			spec := *tmpl.Spec.DeepCopy()
			spec.NodeName = n.info.NodeName

			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{
					Name: name, Namespace: kubeProxyNamespace, Labels: tmpl.Labels,
					OwnerReferences: []metav1.OwnerReference{{
						APIVersion: "apps/v1", Kind: "DaemonSet", Name: ds.Name, UID: ds.UID, Controller: &controller,
					}},
				},
				Spec: spec,
			}

			if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("create %s: %w", name, err)
			}
		default:
			return err
		}

		if err := k.setPodRunning(ctx, name, n.info.IP); err != nil {
			return err
		}

		ready++
	}

	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := k.client.AppsV1().DaemonSets(kubeProxyNamespace).Get(ctx, dsName, metav1.GetOptions{})
		if err != nil {
			return err
		}

		// The generation these pods were reconciled against, not the latest: a template
		// changed meanwhile (talosctl's manifest sync) must not look rolled out with the old
		// pods, as the DaemonSet controller reports only what it has acted on.
		st := appsv1.DaemonSetStatus{
			ObservedGeneration:     ds.Generation,
			DesiredNumberScheduled: nodes,
			CurrentNumberScheduled: nodes,
			UpdatedNumberScheduled: ready,
			NumberReady:            ready,
			NumberAvailable:        ready,
		}

		if equality.Semantic.DeepEqual(cur.Status, st) {
			return nil
		}

		cur.Status = st
		_, err = k.client.AppsV1().DaemonSets(kubeProxyNamespace).UpdateStatus(ctx, cur, metav1.UpdateOptions{})

		return err
	})
}

// setPodRunning is the kubelet reporting a started pod.
func (k *kubeSide) setPodRunning(ctx context.Context, name, hostIP string) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p, err := k.client.CoreV1().Pods(kubeProxyNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}

		now := metav1.Now()
		started := true
		p.Status = corev1.PodStatus{
			Phase: corev1.PodRunning, HostIP: hostIP, PodIP: hostIP, StartTime: &now,
			Conditions: []corev1.PodCondition{
				{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
				{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
				{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
			},
			ContainerStatuses: []corev1.ContainerStatus{{
				Name: p.Spec.Containers[0].Name, Image: p.Spec.Containers[0].Image, Ready: true, Started: &started,
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
			}},
		}

		_, err = k.client.CoreV1().Pods(kubeProxyNamespace).UpdateStatus(ctx, p, metav1.UpdateOptions{})

		return err
	})
}

// isReset: the node was reset and stays down (wiped).
func (n *node) isReset() bool {
	n.mu.Lock()
	defer n.mu.Unlock()

	return n.state == stateReset
}

func intOrStringOne() intstr.IntOrString { return intstr.FromInt32(1) }

// bootstrapManifests: the sim renders and keeps the kube-proxy bootstrap manifest.
func (c *Cluster) bootstrapManifests() bool {
	return c.kube != nil && c.opts.StaticPods && c.opts.BootstrapManifests
}

// startBootstrapManifests applies the manifest once (as at cluster bootstrap, from the first
// control plane's config) and starts the DaemonSet controller.
func (c *Cluster) startBootstrapManifests(ctx context.Context) error {
	if !c.bootstrapManifests() {
		return nil
	}

	var image, version string

	for _, n := range c.nodes {
		if n.info.Role == RoleControlPlane {
			n.mu.Lock()
			image, version = n.img.Proxy, n.version
			n.mu.Unlock()

			break
		}
	}

	if err := c.kube.applyBootstrapManifests(ctx, version, image, "https://"+c.firstCPIP()+":6443"); err != nil {
		return err
	}

	c.goBackground(c.kube.runDaemonSets)

	return nil
}
