package k8s

import (
	"context"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
)

// TestRemainingListsBudgetsOncePerNamespace: the pods left after a drain
// are named with the budgets that cover them, and each namespace's budgets
// are listed once, however many of its pods are left.
func TestRemainingListsBudgetsOncePerNamespace(t *testing.T) {
	pod := func(ns, name string) runtime.Object {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": "web"}},
			Spec: corev1.PodSpec{NodeName: "n1"}}
	}
	kube := fake.NewClientset(
		pod("apps", "web-1"), pod("apps", "web-2"), pod("apps", "web-3"), pod("db", "pg-1"),
		&policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "web"},
			Spec: policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}},
	)
	pods, pdbs := remaining(context.Background(), kube, "n1", DrainOptions{})
	if want := []string{"apps/web-1", "apps/web-2", "apps/web-3", "db/pg-1"}; !slices.Equal(pods, want) {
		t.Fatalf("pods %v, want %v", pods, want)
	}
	if want := []string{"PDB apps/web (0 disruption(s) allowed)"}; !slices.Equal(pdbs, want) {
		t.Fatalf("budgets %v, want %v", pdbs, want)
	}
	lists := map[string]int{}
	for _, a := range kube.Actions() {
		if a.GetVerb() == "list" && a.GetResource().Resource == "poddisruptionbudgets" {
			lists[a.GetNamespace()]++
		}
	}
	if lists["apps"] != 1 || lists["db"] != 1 || len(lists) != 2 {
		t.Fatalf("budget lists per namespace %v; want one for each of apps and db", lists)
	}
}
