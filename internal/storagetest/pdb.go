package storagetest

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
)

// CloudNativePG's PodDisruptionBudgets (cloudnative-pg v1.30.0
// pkg/specs/poddisruptionbudget.go, reconciled by
// internal/controller/cluster_create.go reconcilePodDisruptionBudget while
// spec.enablePDB, which defaults to true): "<cluster>-primary" selects
// the primary (cnpg.io/cluster, cnpg.io/instanceRole=primary) with
// minAvailable 1, so it allows 0 disruptions and blocks a drain of the
// primary's node until the primary moves; "<cluster>" selects the replicas
// with minAvailable instances-2, only for 3 instances or more.
const (
	labelManagedBy = "app.kubernetes.io/managed-by" // utils.KubernetesAppManagedByLabelName
	managerName    = "cloudnative-pg"               // utils.ManagerName
)

func createPDBs(ctx context.Context, kube kubernetes.Interface, p Postgres) error {
	mk := func(name, role string, min int32) *policyv1.PodDisruptionBudget {
		v := intstr.FromInt32(min)
		return &policyv1.PodDisruptionBudget{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: p.Namespace, Labels: map[string]string{
				labelManagedBy: managerName, "app.kubernetes.io/name": "postgresql", "app.kubernetes.io/instance": p.Name,
				"app.kubernetes.io/component": "database"}},
			Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: &v,
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{labelCluster: p.Name, labelRole: role}}},
		}
	}
	pdbs := []*policyv1.PodDisruptionBudget{mk(p.Name+"-primary", "primary", 1)}
	if n := len(p.Nodes); n >= 3 {
		pdbs = append(pdbs, mk(p.Name, "replica", int32(n-2))) //nolint:gosec // a handful of test nodes
	}
	for _, b := range pdbs {
		if _, err := kube.PolicyV1().PodDisruptionBudgets(p.Namespace).Create(ctx, b, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create PodDisruptionBudget %s/%s: %w", b.Namespace, b.Name, err)
		}
	}
	return nil
}

// pdbs plays Kubernetes' disruption controller for CloudNativePG's
// budgets (kubernetes v1.37 pkg/controller/disruption/disruption.go:
// getExpectedPodCount, countHealthyPods — a pod counts when Ready and not
// being deleted —, updatePdbStatus): expectedPods, currentHealthy,
// desiredHealthy = minAvailable, disruptionsAllowed = currentHealthy -
// desiredHealthy (never below 0), observedGeneration. The kube-apiserver's
// eviction reads exactly these fields (pkg/registry/core/pod/storage/eviction.go).
func (c *Controller) pdbs(ctx context.Context) error {
	list, err := c.Kube.PolicyV1().PodDisruptionBudgets(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: labelManagedBy + "=" + managerName})
	if err != nil {
		return fmt.Errorf("list PodDisruptionBudgets: %w", err)
	}
	for i := range list.Items {
		b := &list.Items[i]
		sel, err := metav1.LabelSelectorAsSelector(b.Spec.Selector)
		if err != nil || b.Spec.MinAvailable == nil {
			continue
		}
		pods, err := c.Kube.CoreV1().Pods(b.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
		if err != nil {
			return fmt.Errorf("list pods of PDB %s/%s: %w", b.Namespace, b.Name, err)
		}
		var healthy int32
		for j := range pods.Items {
			if p := &pods.Items[j]; p.DeletionTimestamp == nil && podReady(p) {
				healthy++
			}
		}
		want := b.Spec.MinAvailable.IntVal
		st := policyv1.PodDisruptionBudgetStatus{ObservedGeneration: b.Generation, ExpectedPods: int32(len(pods.Items)), //nolint:gosec // a handful of pods
			CurrentHealthy: healthy, DesiredHealthy: want, DisruptionsAllowed: max(0, healthy-want), DisruptedPods: b.Status.DisruptedPods}
		if b.Status.ObservedGeneration == st.ObservedGeneration && b.Status.ExpectedPods == st.ExpectedPods &&
			b.Status.CurrentHealthy == st.CurrentHealthy && b.Status.DisruptionsAllowed == st.DisruptionsAllowed && b.Status.DesiredHealthy == want {
			continue
		}
		b.Status = st
		if _, err := c.Kube.PolicyV1().PodDisruptionBudgets(b.Namespace).UpdateStatus(ctx, b, metav1.UpdateOptions{}); err != nil && !apierrors.IsConflict(err) {
			return fmt.Errorf("update status of PDB %s/%s: %w", b.Namespace, b.Name, err)
		}
	}
	return nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
