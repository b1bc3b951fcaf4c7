package testenv

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/util/retry"
)

// FluxNamespace is created by StartKube, as Flux's installer would.
const FluxNamespace = "flux-system"

// GVRs of the Flux resources whose CRDs StartKube installs.
var (
	KustomizationGVR = schema.GroupVersionResource{Group: "kustomize.toolkit.fluxcd.io", Version: "v1", Resource: "kustomizations"}
	HelmReleaseGVR   = schema.GroupVersionResource{Group: "helm.toolkit.fluxcd.io", Version: "v2", Resource: "helmreleases"}
)

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

type crdNames struct {
	gvr                      schema.GroupVersionResource
	kind, listKind, singular string
	shortNames               []any
}

func fluxCRDs() []crdNames {
	return []crdNames{
		{gvr: KustomizationGVR, kind: "Kustomization", listKind: "KustomizationList", singular: "kustomization", shortNames: []any{"ks"}},
		{gvr: HelmReleaseGVR, kind: "HelmRelease", listKind: "HelmReleaseList", singular: "helmrelease", shortNames: []any{"hr"}},
	}
}

// crdObject is a namespaced CRD with one served/storage version, an open
// schema (the tests only need Flux's status.conditions, not its full spec
// validation) and a status subresource, like the real Flux CRDs.
func crdObject(c crdNames) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1",
		"kind":       "CustomResourceDefinition",
		"metadata":   map[string]any{"name": c.gvr.Resource + "." + c.gvr.Group},
		"spec": map[string]any{
			"group": c.gvr.Group,
			"scope": "Namespaced",
			"names": map[string]any{
				"kind":       c.kind,
				"listKind":   c.listKind,
				"plural":     c.gvr.Resource,
				"singular":   c.singular,
				"shortNames": c.shortNames,
			},
			"versions": []any{map[string]any{
				"name":    c.gvr.Version,
				"served":  true,
				"storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{
					"type":                                 "object",
					"x-kubernetes-preserve-unknown-fields": true,
				}},
				"subresources": map[string]any{"status": map[string]any{}},
			}},
		},
	}}
}

// createFluxCRDs creates the CRDs, retrying while the apiserver is still
// starting (connection refused, 503, 404 before the API group is served).
func createFluxCRDs(ctx context.Context, dyn dynamic.Interface) error {
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	pending := fluxCRDs()
	var last error
	for {
		var left []crdNames
		for _, c := range pending {
			_, err := dyn.Resource(crdGVR).Create(ctx, crdObject(c), metav1.CreateOptions{})
			if err != nil && !apierrors.IsAlreadyExists(err) {
				if apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) {
					return fmt.Errorf("create CRD %s.%s: %w", c.gvr.Resource, c.gvr.Group, err)
				}
				last = err
				left = append(left, c)
			}
		}
		if pending = left; len(pending) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("create Flux CRDs (last error: %v): %w", last, ctx.Err())
		case <-tick.C:
		}
	}
}

// createStallWindow is how long after a CRD becomes Established the
// apiserver delays creates of its resources (apiextensions-apiserver's
// customresource_handler, a guard for HA setups).
const createStallWindow = 2 * time.Second

// waitFluxCRDs waits until every Flux CRD is Established, a list of its
// resource succeeds (the handler can lag the condition), and creates no
// longer stall.
func waitFluxCRDs(ctx context.Context, dyn dynamic.Interface) error {
	var latest time.Time
	for _, c := range fluxCRDs() {
		established, err := waitCRDServed(ctx, dyn, c.gvr)
		if err != nil {
			return err
		}
		if established.After(latest) {
			latest = established
		}
	}
	// The condition time has second precision and the apiserver runs on
	// this machine's clock, so this is when its stall check stops matching.
	if d := time.Until(latest.Add(createStallWindow)); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return fmt.Errorf("wait for Flux CRDs to accept creates: %w", ctx.Err())
		}
	}
	return nil
}

// waitCRDServed polls until the CRD is served and returns the time it was
// Established.
func waitCRDServed(ctx context.Context, dyn dynamic.Interface, gvr schema.GroupVersionResource) (time.Time, error) {
	name := gvr.Resource + "." + gvr.Group
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		established, err := crdServed(ctx, dyn, gvr, name)
		if err == nil {
			return established, nil
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("CRD %s not served: %v: %w", name, err, ctx.Err())
		case <-tick.C:
		}
	}
}

func crdServed(ctx context.Context, dyn dynamic.Interface, gvr schema.GroupVersionResource, name string) (time.Time, error) {
	crd, err := dyn.Resource(crdGVR).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return time.Time{}, err
	}
	conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
	var established time.Time
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] != "Established" || m["status"] != "True" {
			continue
		}
		ltt, _ := m["lastTransitionTime"].(string)
		if established, err = time.Parse(time.RFC3339, ltt); err != nil {
			return time.Time{}, fmt.Errorf("parse Established time %q: %w", ltt, err)
		}
	}
	if established.IsZero() {
		return time.Time{}, fmt.Errorf("not Established yet")
	}
	if _, err := dyn.Resource(gvr).Namespace(FluxNamespace).List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
		return time.Time{}, err
	}
	return established, nil
}

// SetKustomizationReady plays kustomize-controller: it sets the Ready
// condition (and observedGeneration) of a Kustomization through the status
// subresource. reason is used as both reason and message.
func SetKustomizationReady(ctx context.Context, dyn dynamic.Interface, ns, name string, ready bool, reason string) error {
	return setReady(ctx, dyn, KustomizationGVR, ns, name, ready, reason)
}

// SetHelmReleaseReady plays helm-controller, like SetKustomizationReady.
func SetHelmReleaseReady(ctx context.Context, dyn dynamic.Interface, ns, name string, ready bool, reason string) error {
	return setReady(ctx, dyn, HelmReleaseGVR, ns, name, ready, reason)
}

func setReady(ctx context.Context, dyn dynamic.Interface, gvr schema.GroupVersionResource, ns, name string, ready bool, reason string) error {
	status := "False"
	if ready {
		status = "True"
	}
	if reason == "" {
		reason = "ReconciliationSucceeded"
		if !ready {
			reason = "ReconciliationFailed"
		}
	}
	res := dyn.Resource(gvr).Namespace(ns)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		obj, err := res.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		gen := obj.GetGeneration()
		cond := map[string]any{
			"type":               "Ready",
			"status":             status,
			"reason":             reason,
			"message":            reason,
			"observedGeneration": gen,
			// A test helper standing in for a controller: wall-clock time
			// is what a controller would write here.
			"lastTransitionTime": time.Now().UTC().Format(time.RFC3339),
		}
		conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
		out := make([]any, 0, len(conds)+1)
		replaced := false
		for _, c := range conds {
			if m, ok := c.(map[string]any); ok && m["type"] == "Ready" {
				if m["status"] == status {
					cond["lastTransitionTime"] = m["lastTransitionTime"]
				}
				out = append(out, cond)
				replaced = true
				continue
			}
			out = append(out, c)
		}
		if !replaced {
			out = append(out, cond)
		}
		if err := unstructured.SetNestedSlice(obj.Object, out, "status", "conditions"); err != nil {
			return err
		}
		if err := unstructured.SetNestedField(obj.Object, gen, "status", "observedGeneration"); err != nil {
			return err
		}
		_, err = res.UpdateStatus(ctx, obj, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("set Ready=%s on %s %s/%s: %w", status, gvr.Resource, ns, name, err)
	}
	return nil
}
