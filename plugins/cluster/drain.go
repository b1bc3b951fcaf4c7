package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// DefaultDrainTimeout bounds a client-side drain when the caller gives none.
const DefaultDrainTimeout = 5 * time.Minute

// SetUnschedulable cordons (true) or uncordons (false) a Kubernetes node.
func SetUnschedulable(ctx context.Context, kube kubernetes.Interface, node string, v bool) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if n.Spec.Unschedulable == v {
			return nil
		}
		n.Spec.Unschedulable = v
		_, err = kube.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		verb := "uncordon"
		if v {
			verb = "cordon"
		}
		return fmt.Errorf("%s Kubernetes node %s: %w", verb, node, err)
	}
	return nil
}

// CordonAndDrain is the client-side drain of the v1.13+ upgrade path (Talos
// no longer drains for LifecycleService.Upgrade): cordon, then evict every
// evictable pod on the node through the policy/v1 eviction API, so
// PodDisruptionBudgets apply. A refused eviction (429) is retried until
// timeout; the error then names the pods and the budget's refusal. An
// accepted eviction counts as drained: the kubelet finishes the pod, and
// the reboot that follows stops whatever is left.
func CordonAndDrain(ctx context.Context, kube kubernetes.Interface, node string, timeout time.Duration) error {
	if timeout <= 0 {
		timeout = DefaultDrainTimeout
	}
	if err := SetUnschedulable(ctx, kube, node, true); err != nil {
		return err
	}
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	pods, err := kube.CoreV1().Pods(metav1.NamespaceAll).List(dctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return fmt.Errorf("drain %s: list pods: %w", node, err)
	}
	var errs []error
	for i := range pods.Items {
		p := &pods.Items[i]
		if !evictable(p) || p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		if err := evictPod(dctx, kube, p); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("drain %s did not finish within %s (the node stays cordoned): %w", node, timeout, err)
	}
	return nil
}

func evictPod(ctx context.Context, kube kubernetes.Interface, p *corev1.Pod) error {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		err := kube.PolicyV1().Evictions(p.Namespace).Evict(ctx, &policyv1.Eviction{
			ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace}})
		switch {
		case err == nil, apierrors.IsNotFound(err):
			return nil
		case apierrors.IsTooManyRequests(err):
			// A PodDisruptionBudget refuses for now: retry until the timeout.
		default:
			return fmt.Errorf("evict %s/%s: %w", p.Namespace, p.Name, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("evict %s/%s: refused until the timeout: %s", p.Namespace, p.Name, strings.TrimSpace(err.Error()))
		case <-tick.C:
		}
	}
}
