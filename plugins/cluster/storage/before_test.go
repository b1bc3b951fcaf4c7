package storage

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"

	"github.com/talosbot/talosbot/plugins/sdk"
)

func obj(kind, name string, fields map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: fields}
	u.SetAPIVersion("longhorn.io/v1beta2")
	u.SetKind(kind)
	u.SetNamespace("longhorn-system")
	u.SetName(name)
	return u
}

// TestBeforeRefusesWhatTheForecastRefuses: Before decides R3 by the
// forecast's rule, so a faulted volume with a replica on the node (which
// the plan refuses) is refused before the drain too, not drained past.
func TestBeforeRefusesWhatTheForecastRefuses(t *testing.T) {
	vol := obj("Volume", "pvc-lost", map[string]any{
		"spec":   map[string]any{"numberOfReplicas": int64(2)},
		"status": map[string]any{"state": "attached", "robustness": "faulted"}})
	rep := obj("Replica", "pvc-lost-r1", map[string]any{"spec": map[string]any{"volumeName": "pvc-lost", "nodeID": "n1"}})
	rep2 := obj("Replica", "pvc-lost-r2", map[string]any{"spec": map[string]any{"volumeName": "pvc-lost", "nodeID": "n2"}})
	eng := obj("Engine", "pvc-lost-e", map[string]any{"spec": map[string]any{"volumeName": "pvc-lost"}})
	dyn := dynfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		volumeGVR: "VolumeList", replicaGVR: "ReplicaList", engineGVR: "EngineList", clusterGVR: "ClusterList",
	}, vol, rep, rep2, eng)
	s := Defaults()
	w := Waiter{Kube: kubefake.NewClientset(), Dyn: dyn, Settings: s}
	st, err := Read(context.Background(), w.Kube, w.Dyn, s)
	if err != nil {
		t.Fatal(err)
	}
	if Build(st, Input{Order: []string{"n1"}}, s).Refusal() == nil {
		t.Fatal("the forecast does not refuse a faulted volume with a replica on n1")
	}
	_, err = w.Before(context.Background(), "n1")
	if re, ok := sdk.AsRefusal(err); !ok || re.Rule != Rule {
		t.Fatalf("Before(n1) = %v, want the forecast's R3 refusal", err)
	}
}
