package sim

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

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

	for _, comp := range StaticPodComponents() {
		want := img.forComponent(comp)
		name := StaticPodName(comp, n.info.NodeName)

		cur, err := pods.Get(ctx, name, metav1.GetOptions{})

		switch {
		case err == nil && len(cur.Spec.Containers) > 0 && cur.Spec.Containers[0].Image == want:
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

		hash := staticPodHash(want)
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Name: name, Namespace: staticPodNamespace,
				Labels: map[string]string{"k8s-app": comp, "tier": "control-plane"},
				Annotations: map[string]string{
					corev1.MirrorPodAnnotationKey: hash,
					"kubernetes.io/config.hash":   hash,
					"kubernetes.io/config.source": "file",
				},
			},
			Spec: corev1.PodSpec{
				NodeName:    n.info.NodeName,
				HostNetwork: true,
				Containers:  []corev1.Container{{Name: comp, Image: want}},
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
