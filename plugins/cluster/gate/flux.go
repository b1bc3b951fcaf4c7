package gate

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

// Flux resources read by the gate.
var (
	KustomizationGVR = schema.GroupVersionResource{Group: "kustomize.toolkit.fluxcd.io", Version: "v1", Resource: "kustomizations"}
	HelmReleaseGVR   = schema.GroupVersionResource{Group: "helm.toolkit.fluxcd.io", Version: "v2", Resource: "helmreleases"}
)

// FluxObject is the readiness of one Kustomization or HelmRelease.
type FluxObject struct {
	Kind      string // "Kustomization" or "HelmRelease"
	Namespace string
	Name      string
	Ready     bool
	Suspended bool
	Reason    string
	Message   string
}

// Ref is "Kind ns/name".
func (o FluxObject) Ref() string { return o.Kind + " " + o.Namespace + "/" + o.Name }

// FluxStatus lists every Kustomization and HelmRelease in all namespaces with
// its Ready condition. installed is false when the Flux CRDs are absent.
func FluxStatus(ctx context.Context, dyn dynamic.Interface) (objs []FluxObject, installed bool, err error) {
	installed = false
	for _, k := range []struct {
		kind string
		gvr  schema.GroupVersionResource
	}{{"Kustomization", KustomizationGVR}, {"HelmRelease", HelmReleaseGVR}} {
		got, ok, err := listFlux(ctx, dyn, k.kind, k.gvr)
		if err != nil {
			return nil, false, err
		}
		installed = installed || ok
		objs = append(objs, got...)
	}
	return objs, installed, nil
}

func listFlux(ctx context.Context, dyn dynamic.Interface, kind string, gvr schema.GroupVersionResource) ([]FluxObject, bool, error) {
	var out []FluxObject
	opts := metav1.ListOptions{Limit: 500}
	for {
		list, err := dyn.Resource(gvr).Namespace(metav1.NamespaceAll).List(ctx, opts)
		if apierrors.IsNotFound(err) {
			return nil, false, nil
		}
		if err != nil {
			return nil, false, fmt.Errorf("list %s: %w", gvr.Resource, err)
		}
		for i := range list.Items {
			out = append(out, fluxObject(kind, &list.Items[i]))
		}
		if list.GetContinue() == "" {
			return out, true, nil
		}
		opts.Continue = list.GetContinue()
	}
}

func fluxObject(kind string, u *unstructured.Unstructured) FluxObject {
	o := FluxObject{Kind: kind, Namespace: u.GetNamespace(), Name: u.GetName(), Reason: "NoStatus", Message: "no Ready condition yet"}
	o.Suspended, _, _ = unstructured.NestedBool(u.Object, "spec", "suspend")
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, ok := c.(map[string]any)
		if !ok || m["type"] != "Ready" {
			continue
		}
		o.Ready = m["status"] == "True"
		o.Reason, _ = m["reason"].(string)
		o.Message, _ = m["message"].(string)
		// A Ready condition from an older generation describes an old spec.
		if og, ok := m["observedGeneration"].(int64); ok && og > 0 && og < u.GetGeneration() {
			o.Ready = false
			o.Reason, o.Message = "Progressing", "status is for an older generation"
		}
	}
	return o
}
