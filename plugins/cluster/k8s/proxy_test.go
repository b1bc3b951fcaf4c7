package k8s

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func proxyDS(image string, desired, updated int32) *appsv1.DaemonSet {
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy", Namespace: "kube-system"},
		Spec: appsv1.DaemonSetSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "kube-proxy", Image: image}},
		}}},
		Status: appsv1.DaemonSetStatus{DesiredNumberScheduled: desired, UpdatedNumberScheduled: updated, NumberAvailable: updated},
	}
}

func TestUpgradeKubeProxyDaemonSet(t *testing.T) {
	ctx := context.Background()

	detail, skipped, err := UpgradeKubeProxyDaemonSet(ctx, fake.NewClientset(), "v1.36.3", time.Second)
	if err != nil || !skipped || !strings.Contains(detail, "not used") {
		t.Fatalf("no DaemonSet: %q %t %v", detail, skipped, err)
	}

	kc := fake.NewClientset(proxyDS("registry.k8s.io/kube-proxy:v1.35.2", 2, 2))
	detail, skipped, err = UpgradeKubeProxyDaemonSet(ctx, kc, "v1.36.3", time.Second)
	if err != nil || skipped {
		t.Fatalf("upgrade: %q %t %v", detail, skipped, err)
	}
	ds, _ := kc.AppsV1().DaemonSets("kube-system").Get(ctx, "kube-proxy", metav1.GetOptions{})
	if got := ds.Spec.Template.Spec.Containers[0].Image; got != "registry.k8s.io/kube-proxy:v1.36.3" {
		t.Fatalf("image %s", got)
	}
	if _, skipped, _ = UpgradeKubeProxyDaemonSet(ctx, kc, "v1.36.3", time.Second); !skipped {
		t.Fatal("a DaemonSet already rolled out at the target was not skipped")
	}

	// A DaemonSet already newer than the requested version is never downgraded.
	kc = fake.NewClientset(proxyDS("registry.k8s.io/kube-proxy:v1.36.3", 2, 2))
	detail, skipped, err = UpgradeKubeProxyDaemonSet(ctx, kc, "v1.35.9", time.Second)
	if err != nil || !skipped || !strings.Contains(detail, "newer than v1.35.9") {
		t.Fatalf("newer DaemonSet: %q %t %v", detail, skipped, err)
	}
	ds, _ = kc.AppsV1().DaemonSets("kube-system").Get(ctx, "kube-proxy", metav1.GetOptions{})
	if got := ds.Spec.Template.Spec.Containers[0].Image; got != "registry.k8s.io/kube-proxy:v1.36.3" {
		t.Fatalf("a newer kube-proxy was changed to %s", got)
	}

	// A rollout that never completes fails with the counts.
	kc = fake.NewClientset(proxyDS("registry.k8s.io/kube-proxy:v1.35.2", 2, 1))
	_, _, err = UpgradeKubeProxyDaemonSet(ctx, kc, "v1.36.3", 300*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "1 of 2 updated") {
		t.Fatalf("stuck rollout: %v", err)
	}
}
