package storagetest

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// Volume is a Longhorn volume to create: attached, with one replica on
// each of Nodes (all healthy), for the PVC named PVC in PVCNamespace.
type Volume struct {
	Name         string
	Nodes        []string
	PVC          string
	PVCNamespace string
}

// Postgres is a CNPG cluster to create: one instance pod per node of
// Nodes, named <Name>-1, <Name>-2, ...; the first is the primary.
type Postgres struct {
	Namespace, Name string
	Nodes           []string
	// PDB creates CloudNativePG's PodDisruptionBudgets (pdb.go), as the
	// operator does by default (spec.enablePDB); the Controller keeps
	// their status.
	PDB bool
}

// createRetrying creates obj (then its status), retrying while a CRD just
// established still answers 404 for a moment.
func createRetrying(ctx context.Context, res dynamic.ResourceInterface, obj *unstructured.Unstructured) error {
	status, hasStatus := obj.Object["status"]
	var got *unstructured.Unstructured
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		got, err = res.Create(ctx, obj, metav1.CreateOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		return fmt.Errorf("create %s %s: %w", obj.GetKind(), obj.GetName(), err)
	}
	if hasStatus {
		got.Object["status"] = status
		if _, err := res.UpdateStatus(ctx, got, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("set status of %s %s: %w", obj.GetKind(), obj.GetName(), err)
		}
	}
	return nil
}

func lhObject(kind, name string, spec, status map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "longhorn.io/v1beta2", "kind": kind,
		"metadata": map[string]any{"name": name, "namespace": LonghornNamespace},
		"spec":     spec, "status": status,
	}}
}

// CreateVolume creates the Longhorn namespace (if needed), the Volume, its
// Engine and Replicas, with the fields the fixture CRD defines.
func CreateVolume(ctx context.Context, kube kubernetes.Interface, dyn dynamic.Interface, v Volume) error {
	if err := ensureNamespace(ctx, kube, LonghornNamespace); err != nil {
		return err
	}
	now := time.Now().UTC().Format(time.RFC3339)
	engName := v.Name + "-e-0"
	vol := lhObject("Volume", v.Name,
		map[string]any{"numberOfReplicas": int64(len(v.Nodes)), "size": "1073741824", "frontend": "blockdev", "dataEngine": "v1"},
		map[string]any{"state": "attached", "robustness": robustHealthy, "currentNodeID": v.Nodes[0],
			"kubernetesStatus": map[string]any{"pvcName": v.PVC, "namespace": v.PVCNamespace}})
	if err := createRetrying(ctx, dyn.Resource(VolumeGVR).Namespace(LonghornNamespace), vol); err != nil {
		return err
	}
	modes := map[string]any{}
	for i, n := range v.Nodes {
		rn := fmt.Sprintf("%s-r-%d", v.Name, i)
		modes[rn] = modeRW
		r := lhObject("Replica", rn,
			map[string]any{"volumeName": v.Name, "nodeID": n, "engineName": engName, "active": true, "dataEngine": "v1",
				"healthyAt": now, "lastHealthyAt": now, "desireState": "running"},
			map[string]any{"currentState": "running", "storageIP": fmt.Sprintf("10.244.%d.%d", i, 10+i), "port": int64(10000 + i)})
		if err := createRetrying(ctx, dyn.Resource(ReplicaGVR).Namespace(LonghornNamespace), r); err != nil {
			return err
		}
	}
	e := lhObject("Engine", engName,
		map[string]any{"volumeName": v.Name, "nodeID": v.Nodes[0], "active": true, "dataEngine": "v1", "desireState": "running"},
		map[string]any{"currentState": "running", "replicaModeMap": modes})
	return createRetrying(ctx, dyn.Resource(EngineGVR).Namespace(LonghornNamespace), e)
}

// CreatePostgres creates the CNPG Cluster (spec.instances, spec.storage as
// the CRD requires) and one Running, Ready instance pod per node, labelled
// as the operator labels them.
func CreatePostgres(ctx context.Context, kube kubernetes.Interface, dyn dynamic.Interface, p Postgres) error {
	if err := ensureNamespace(ctx, kube, p.Namespace); err != nil {
		return err
	}
	primary := p.Name + "-1"
	var names []any
	for i, n := range p.Nodes {
		name := fmt.Sprintf("%s-%d", p.Name, i+1)
		names = append(names, name)
		role := "replica"
		if name == primary {
			role = "primary"
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: p.Namespace,
				Labels: map[string]string{labelCluster: p.Name, labelInstance: name, labelRole: role}},
			Spec: corev1.PodSpec{NodeName: n, Containers: []corev1.Container{{Name: "postgres", Image: "ghcr.io/cloudnative-pg/postgresql:17"}}},
		}
		if _, err := kube.CoreV1().Pods(p.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create pod %s: %w", name, err)
		}
		if err := setPodReady(ctx, kube, p.Namespace, name); err != nil {
			return err
		}
	}
	cl := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "postgresql.cnpg.io/v1", "kind": "Cluster",
		"metadata": map[string]any{"name": p.Name, "namespace": p.Namespace},
		"spec":     map[string]any{"instances": int64(len(p.Nodes)), "storage": map[string]any{"size": "1Gi"}},
		"status": map[string]any{"currentPrimary": primary, "targetPrimary": primary, "instances": int64(len(p.Nodes)),
			"readyInstances": int64(len(p.Nodes)), "phase": phaseHealthy, "instancesStatus": map[string]any{"healthy": names}},
	}}
	if err := createRetrying(ctx, dyn.Resource(ClusterGVR).Namespace(p.Namespace), cl); err != nil {
		return err
	}
	if p.PDB {
		return createPDBs(ctx, kube, p)
	}
	return nil
}

func setPodReady(ctx context.Context, kube kubernetes.Interface, ns, name string) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pod, err := kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		pod.Status.Phase = corev1.PodRunning
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
		_, err = kube.CoreV1().Pods(ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
		return err
	})
}

func ensureNamespace(ctx context.Context, kube kubernetes.Interface, ns string) error {
	_, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", ns, err)
	}
	return nil
}

// CreateNodes creates Ready Nodes (a test without the simulator).
func CreateNodes(ctx context.Context, kube kubernetes.Interface, names ...string) error {
	for _, n := range names {
		if _, err := kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create node %s: %w", n, err)
		}
		if err := SetNodeReady(ctx, kube, n, true); err != nil {
			return err
		}
	}
	return nil
}

// SetNodeReady flips a Node's Ready condition, as the kubelet (or its
// silence during a reboot) does.
func SetNodeReady(ctx context.Context, kube kubernetes.Interface, name string, ready bool) error {
	st := corev1.ConditionTrue
	if !ready {
		st = corev1.ConditionUnknown
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: st, LastTransitionTime: metav1.Now()}}
		_, err = kube.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err
	})
}

// Get reads one object (tests assert on the operators' fields).
func Get(ctx context.Context, dyn dynamic.Interface, gvr schema.GroupVersionResource, ns, name string) (*unstructured.Unstructured, error) {
	u, err := dyn.Resource(gvr).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get %s %s/%s: %w", gvr.Resource, ns, name, err)
	}
	return u, nil
}
