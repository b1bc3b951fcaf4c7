package testenv

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// SetPDBStatus plays the disruption controller (absent: there is no
// kube-controller-manager): it writes the status subresource of a
// PodDisruptionBudget so that the eviction API honours it. It also sets
// observedGeneration, without which every eviction gets 429. The healthy
// counts are left alone: the eviction API consults them only for pods that
// are not Ready.
func SetPDBStatus(ctx context.Context, c kubernetes.Interface, ns, name string, disruptionsAllowed int32) error {
	pdbs := c.PolicyV1().PodDisruptionBudgets(ns)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pdb, err := pdbs.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		pdb.Status.ObservedGeneration = pdb.Generation
		pdb.Status.DisruptionsAllowed = disruptionsAllowed
		_, err = pdbs.UpdateStatus(ctx, pdb, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("set status of PodDisruptionBudget %s/%s: %w", ns, name, err)
	}
	return nil
}

// SetPodRunningReady plays the kubelet: it marks a pod Running and Ready via
// the status subresource. The eviction API ignores PDBs for Pending pods
// (every pod is Pending without a kubelet), so eviction tests need this.
func SetPodRunningReady(ctx context.Context, c kubernetes.Interface, ns, name string) error {
	pods := c.CoreV1().Pods(ns)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pod, err := pods.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		pod.Status.Phase = corev1.PodRunning
		now := metav1.Now()
		ready := corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now}
		found := false
		for i := range pod.Status.Conditions {
			if pod.Status.Conditions[i].Type == corev1.PodReady {
				pod.Status.Conditions[i] = ready
				found = true
			}
		}
		if !found {
			pod.Status.Conditions = append(pod.Status.Conditions, ready)
		}
		_, err = pods.UpdateStatus(ctx, pod, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("mark pod %s/%s running and ready: %w", ns, name, err)
	}
	return nil
}
