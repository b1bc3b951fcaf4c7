package sim

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DefaultPodGCQuarantine is kube-controller-manager's quarantine of a missing node before
// PodGC deletes the pods bound to it (k8s.io/kubernetes v1.36.3
// pkg/controller/podgc/gc_controller.go: quarantineTime 40 s, checked every gcCheckPeriod
// 20 s).
const DefaultPodGCQuarantine = 40 * time.Second

// runPodGC plays kube-controller-manager's pod garbage collector for orphaned pods, which the
// sim's Kubernetes (an API server alone) otherwise lacks. A removed node's kubelet is gone, so
// nothing deletes its mirror pods; once its Node object is deleted, PodGC does
// (gc_controller.go gcOrphaned, v1.36.3): every check period (half the quarantine, as 20 s is
// of 40 s) it lists the pods bound to a node; a node missing from the API is quarantined, and
// one still missing after the quarantine (read again from the API, discoverDeletedNodes) has
// each of its pods marked Failed with the DisruptionTarget condition "DeletionByPodGC" and
// deleted with grace period 0 (markFailedAndDeletePodWithCondition). Without it a removed
// control plane's kube-apiserver, controller-manager and scheduler pods stay, and Talos's
// health check counts them ("expected number of pods for kube-apiserver to be 2, got 3").
func (k *kubeSide) runPodGC(ctx context.Context, quarantine time.Duration) {
	t := time.NewTicker(max(quarantine/2, 10*time.Millisecond))
	defer t.Stop()

	missing := map[string]time.Time{} // node name → when it was first found missing

	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}

		k.gcOrphaned(ctx, missing, quarantine)
	}
}

// gcOrphaned is one pass of runPodGC.
func (k *kubeSide) gcOrphaned(ctx context.Context, missing map[string]time.Time, quarantine time.Duration) {
	pods, err := k.client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}

	nodes, err := k.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}

	existing := map[string]bool{}
	for _, n := range nodes.Items {
		existing[n.Name] = true
	}

	now := time.Now()

	for _, p := range pods.Items {
		if n := p.Spec.NodeName; n != "" && !existing[n] {
			if _, ok := missing[n]; !ok {
				missing[n] = now
			}
		}
	}

	deleted := map[string]bool{}

	for n, since := range missing {
		if existing[n] {
			delete(missing, n)

			continue
		}

		if now.Sub(since) < quarantine {
			continue
		}

		_, err := k.client.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			deleted[n] = true
		}

		if err == nil || deleted[n] {
			delete(missing, n)
		}
	}

	for i := range pods.Items {
		p := &pods.Items[i]
		if !deleted[p.Spec.NodeName] {
			continue
		}

		if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			p.Status.Phase = corev1.PodFailed
			p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue,
				Reason: "DeletionByPodGC", Message: "PodGC: node no longer exists", LastTransitionTime: metav1.NewTime(now)})

			if _, err := k.client.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) {
				k.log.Warn("podgc: mark orphaned pod failed", "pod", p.Namespace+"/"+p.Name, "err", err)
			}
		}

		err := k.client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, *metav1.NewDeleteOptions(0))
		if err != nil && !apierrors.IsNotFound(err) {
			k.log.Warn("podgc: delete orphaned pod", "pod", p.Namespace+"/"+p.Name, "err", err)
		}
	}
}
