package testenv

import (
	"context"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func TestStartKubeNodesAndEviction(t *testing.T) {
	k := StartKube(t)
	ctx := testCtx(t)
	c := k.Client

	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "worker-1", Labels: map[string]string{"node-role.kubernetes.io/worker": ""}}}
	if _, err := c.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create node: %v", err)
	}
	nodes, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list nodes: %v", err)
	}
	if len(nodes.Items) != 1 || nodes.Items[0].Name != "worker-1" {
		t.Fatalf("nodes = %v, want [worker-1]", nodes.Items)
	}

	const ns = "default"
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-0", Namespace: ns, Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{
			NodeName:   "worker-1",
			Containers: []corev1.Container{{Name: "web", Image: "registry.invalid/web:1"}},
		},
	}
	if _, err := c.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod: %v", err)
	}
	if err := SetPodRunningReady(ctx, c, ns, "web-0"); err != nil {
		t.Fatal(err)
	}
	minAvail := intstr.FromInt32(1)
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: &minAvail,
			Selector:     &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
		},
	}
	if _, err := c.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pdb: %v", err)
	}

	zero := int64(0)
	evict := func() error {
		return c.PolicyV1().Evictions(ns).Evict(ctx, &policyv1.Eviction{
			ObjectMeta:    metav1.ObjectMeta{Name: "web-0", Namespace: ns},
			DeleteOptions: &metav1.DeleteOptions{GracePeriodSeconds: &zero},
		})
	}

	// Blocking budget: 429, pod stays.
	if err := SetPDBStatus(ctx, c, ns, "web", 0); err != nil {
		t.Fatal(err)
	}
	err = evict()
	if !apierrors.IsTooManyRequests(err) {
		t.Fatalf("evict with disruptionsAllowed=0: got %v, want 429 TooManyRequests", err)
	}
	if _, err := c.CoreV1().Pods(ns).Get(ctx, "web-0", metav1.GetOptions{}); err != nil {
		t.Fatalf("pod gone after a blocked eviction: %v", err)
	}

	// Budget allows one disruption: evicted.
	if err := SetPDBStatus(ctx, c, ns, "web", 1); err != nil {
		t.Fatal(err)
	}
	if err := evict(); err != nil {
		t.Fatalf("evict with disruptionsAllowed=1: %v", err)
	}
	if _, err := c.CoreV1().Pods(ns).Get(ctx, "web-0", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("pod after eviction: got %v, want NotFound", err)
	}
}

func TestStartKubeFluxCRDs(t *testing.T) {
	k := StartKube(t)
	ctx := testCtx(t)

	for _, c := range fluxCRDs() {
		crd, err := k.Dynamic.Resource(crdGVR).Get(ctx, c.gvr.Resource+"."+c.gvr.Group, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get CRD: %v", err)
		}
		if scope, _, _ := unstructured.NestedString(crd.Object, "spec", "scope"); scope != "Namespaced" {
			t.Fatalf("%s scope = %q", crd.GetName(), scope)
		}
		if kind, _, _ := unstructured.NestedString(crd.Object, "spec", "names", "kind"); kind != c.kind {
			t.Fatalf("%s kind = %q, want %q", crd.GetName(), kind, c.kind)
		}
	}

	cases := []struct {
		gvrName, apiVersion, kind string
		set                       func(ctx context.Context, ns, name string, ready bool, reason string) error
	}{
		{"kustomization", "kustomize.toolkit.fluxcd.io/v1", "Kustomization", func(ctx context.Context, ns, name string, ready bool, reason string) error {
			return SetKustomizationReady(ctx, k.Dynamic, ns, name, ready, reason)
		}},
		{"helmrelease", "helm.toolkit.fluxcd.io/v2", "HelmRelease", func(ctx context.Context, ns, name string, ready bool, reason string) error {
			return SetHelmReleaseReady(ctx, k.Dynamic, ns, name, ready, reason)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.kind, func(t *testing.T) {
			gvr := KustomizationGVR
			if tc.kind == "HelmRelease" {
				gvr = HelmReleaseGVR
			}
			res := k.Dynamic.Resource(gvr).Namespace(FluxNamespace)
			obj := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": tc.apiVersion,
				"kind":       tc.kind,
				"metadata":   map[string]any{"name": "apps", "namespace": FluxNamespace},
				"spec":       map[string]any{"interval": "10m", "anything": map[string]any{"kept": true}},
				// Ignored on create: status is a subresource.
				"status": map[string]any{"observedGeneration": int64(42)},
			}}
			created, err := res.Create(ctx, obj, metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("create %s: %v", tc.kind, err)
			}
			if _, found, _ := unstructured.NestedFieldNoCopy(created.Object, "status"); found {
				t.Fatalf("status was accepted on create, so the status subresource is missing: %v", created.Object["status"])
			}
			if kept, _, _ := unstructured.NestedBool(created.Object, "spec", "anything", "kept"); !kept {
				t.Fatalf("unknown spec fields pruned: %v", created.Object["spec"])
			}

			for _, step := range []struct {
				ready      bool
				reason     string
				wantStatus string
			}{
				{true, "ReconciliationSucceeded", "True"},
				{false, "HealthCheckFailed", "False"},
			} {
				if err := tc.set(ctx, FluxNamespace, "apps", step.ready, step.reason); err != nil {
					t.Fatal(err)
				}
				got, err := res.Get(ctx, "apps", metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
				if len(conds) != 1 {
					t.Fatalf("conditions = %v, want one Ready", conds)
				}
				cond := conds[0].(map[string]any)
				if cond["type"] != "Ready" || cond["status"] != step.wantStatus || cond["reason"] != step.reason {
					t.Fatalf("Ready condition = %v, want status %s reason %s", cond, step.wantStatus, step.reason)
				}
				if og, _, _ := unstructured.NestedInt64(got.Object, "status", "observedGeneration"); og != got.GetGeneration() {
					t.Fatalf("status.observedGeneration = %d, want %d", og, got.GetGeneration())
				}
			}
		})
	}
}

func TestStartKubeProcessKubeconfigAndStop(t *testing.T) {
	_, err := KubeAPIServerPath()
	Require(t, err)
	parent := t.TempDir()
	ctx := testCtx(t)
	k, err := StartKubeProcess(ctx, parent)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Stop)

	// The kubeconfig alone is enough to talk to the apiserver.
	cfg, err := clientcmd.RESTConfigFromKubeConfig(k.Kubeconfig)
	if err != nil {
		t.Fatalf("parse kubeconfig: %v", err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Namespaces().Get(ctx, FluxNamespace, metav1.GetOptions{}); err != nil {
		t.Fatalf("get %s via kubeconfig: %v", FluxNamespace, err)
	}

	// Each credential alone authenticates: the client certificate (what
	// Talos's own Kubernetes client needs) ...
	certOnly := *cfg
	certOnly.BearerToken = ""
	ccs, err := kubernetes.NewForConfig(&certOnly)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ccs.CoreV1().Namespaces().Get(ctx, FluxNamespace, metav1.GetOptions{}); err != nil {
		t.Fatalf("get %s with the client certificate only: %v", FluxNamespace, err)
	}

	// ... and without either the apiserver refuses (anonymous auth is off).
	anon := certOnly
	anon.CertData, anon.KeyData = nil, nil
	acs, err := kubernetes.NewForConfig(&anon)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := acs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); !apierrors.IsUnauthorized(err) {
		t.Fatalf("anonymous list: got %v, want 401", err)
	}

	// Secrets on disk are private to the owner.
	entries, err := os.ReadDir(parent)
	if err != nil || len(entries) != 1 {
		t.Fatalf("work dirs under %s: %v, %v", parent, entries, err)
	}
	work := filepath.Join(parent, entries[0].Name())
	err = filepath.WalkDir(work, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if info.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s has mode %v, want no group/other access", p, info.Mode().Perm())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	k.Stop()
	k.Stop() // idempotent
	if _, err := os.Stat(work); !os.IsNotExist(err) {
		t.Fatalf("work dir after Stop: %v, want removed", err)
	}
	hc := &http.Client{Timeout: 2 * time.Second}
	if resp, err := hc.Get(cfg.Host + "/readyz"); err == nil {
		resp.Body.Close()
		t.Fatalf("apiserver still answering after Stop: %s", resp.Status)
	}
}

// TestKubeRestart: Restart replaces the apiserver process at the same address with the same
// credentials (the old clients keep working, the data is etcd's), and refuses after Stop.
func TestKubeRestart(t *testing.T) {
	k := StartKube(t)
	ctx := testCtx(t)
	cms := k.Client.CoreV1().ConfigMaps(FluxNamespace)
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kept"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A watch on the old process ends when Restart replaces it: a Restart that
	// kept the old process (and its watch caches) would leave it open.
	w, err := cms.Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if err := k.Restart(ctx); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	deadline := time.After(30 * time.Second)
	for closed := false; !closed; {
		select {
		case _, ok := <-w.ResultChan():
			closed = !ok
		case <-deadline:
			t.Fatal("a watch opened before Restart is still open 30 s after it: the old apiserver process was not replaced")
		}
	}
	if _, err := cms.Get(ctx, "kept", metav1.GetOptions{}); err != nil {
		t.Fatalf("the old client after Restart: %v", err)
	}
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "after"}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("write after Restart: %v", err)
	}
	k.Stop()
	if err := k.Restart(ctx); err == nil {
		t.Fatal("Restart after Stop succeeded")
	}
}

// BenchmarkStartKube measures start-to-ready (etcd, apiserver, Flux CRDs);
// stopping is not timed.
func BenchmarkStartKube(b *testing.B) {
	bin, err := KubeAPIServerPath()
	Require(b, err)
	for b.Loop() {
		ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
		k, err := startKube(ctx, b.TempDir(), bin, KubeOptions{})
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		k.Stop()
		b.StartTimer()
	}
}
