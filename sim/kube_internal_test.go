package sim

import (
	"log/slog"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func TestKubeSideFake(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	kc := fake.NewClientset()
	k := &kubeSide{client: kc, hostLabel: DefaultHostLabel, drainTimeout: time.Second, log: slog.New(slog.DiscardHandler)}

	info := NodeInfo{Name: "worker-1", Hostname: "worker-1", NodeName: "worker-1", IP: "127.1.2.3", Role: RoleWorker, Host: "pve2"}
	if err := k.register(ctx, info, "v1.35.2", "v1.12.6"); err != nil {
		t.Fatal(err)
	}

	n, err := kc.CoreV1().Nodes().Get(ctx, "worker-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	if n.Labels[DefaultHostLabel] != "pve2" || n.Status.NodeInfo.KubeletVersion != "v1.35.2" || n.Status.Conditions[0].Status != corev1.ConditionTrue {
		t.Fatalf("registered node: %+v", n)
	}

	if _, cp := n.Labels[controlPlaneLabel]; cp {
		t.Fatal("worker has the control-plane label")
	}

	for _, p := range []*corev1.Pod{
		{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "default"}, Spec: corev1.PodSpec{NodeName: "worker-1"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "ds", Namespace: "kube-system", OwnerReferences: []metav1.OwnerReference{{Kind: "DaemonSet", Name: "x", APIVersion: "apps/v1", UID: "u"}}}, Spec: corev1.PodSpec{NodeName: "worker-1"}},
	} {
		if _, err := kc.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	if err := k.cordonAndDrain(ctx, "worker-1"); err != nil {
		t.Fatal(err)
	}

	n, _ = kc.CoreV1().Nodes().Get(ctx, "worker-1", metav1.GetOptions{})
	if !n.Spec.Unschedulable {
		t.Fatal("not cordoned")
	}

	if _, err := kc.CoreV1().Pods("default").Get(ctx, "app", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("app pod not drained: %v", err)
	}

	if _, err := kc.CoreV1().Pods("kube-system").Get(ctx, "ds", metav1.GetOptions{}); err != nil {
		t.Fatalf("DaemonSet pod must stay: %v", err)
	}

	evicted := false

	for _, a := range kc.Actions() {
		if a.GetSubresource() == "eviction" {
			evicted = true
		}
	}

	if !evicted {
		t.Fatal("drain did not use the eviction API")
	}

	if err := k.setReady(ctx, "worker-1", false, "KubeletNotReady", "rebooting"); err != nil {
		t.Fatal(err)
	}

	if err := k.booted(ctx, "worker-1", "v1.36.0", "v1.13.9"); err != nil {
		t.Fatal(err)
	}

	// The drain cordoned it with Talos's annotation, so the booted node is uncordoned.
	if err := k.uncordonOwned(ctx, "worker-1"); err != nil {
		t.Fatal(err)
	}

	n, _ = kc.CoreV1().Nodes().Get(ctx, "worker-1", metav1.GetOptions{})
	if n.Spec.Unschedulable || n.Status.NodeInfo.KubeletVersion != "v1.36.0" || n.Status.NodeInfo.OSImage != "Talos (v1.13.9)" {
		t.Fatalf("after boot: %+v", n)
	}
}

func TestImageVersions(t *testing.T) {
	t.Parallel()
	for ref, want := range map[string]string{
		"factory.talos.dev/nocloud-installer/abc:v1.13.9": "v1.13.9",
		"registry:5000/installer:v1.12.6@sha256:0123":     "v1.12.6",
		"ghcr.io/siderolabs/installer:1.11.0":             "v1.11.0",
	} {
		got, err := versionFromImage(ref)
		if err != nil || got != want {
			t.Errorf("%s: %q %v, want %q", ref, got, err, want)
		}
	}

	for _, bad := range []string{"registry:5000/installer", "ghcr.io/siderolabs/installer:latest"} {
		if _, err := versionFromImage(bad); err == nil {
			t.Errorf("%s: accepted", bad)
		}
	}
}

func TestMachineConfigRoundTrip(t *testing.T) {
	t.Parallel()
	img := defaultImages(installerImage(DefaultSchematic, "v1.12.6"), "v1.35.2")

	b, err := machineConfig("c", RoleControlPlane, "https://127.0.0.1:6443", []byte("ca"), []byte("k8s-ca"), []byte("etcd-ca"), img)
	if err != nil {
		t.Fatal(err)
	}

	got, typ, err := parseImages(b)
	if err != nil {
		t.Fatal(err)
	}

	if got != img || typ != RoleControlPlane {
		t.Fatalf("round trip: %+v %s, want %+v", got, typ, img)
	}
}
