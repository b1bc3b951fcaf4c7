// Package storage makes drains storage-aware: it reads Longhorn volumes and
// CloudNativePG clusters through the dynamic client (own minimal types with
// the fields the bot reads, each cited), forecasts what would block or hurt
// each node's drain (PDBs, last healthy replicas, primaries, local data),
// refuses a roll that cannot finish (R3), and waits before and after each
// node: a primary switched over first, replicas rebuilt elsewhere.
package storage

import (
	"context"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

// The resources read, at the versions of the CRDs in ../shared/fixtures
// (Longhorn v1.12.1 chart/templates/crds.yaml; CNPG v1.30.0
// config/crd/bases/postgresql.cnpg.io_clusters.yaml).
var (
	volumeGVR  = schema.GroupVersionResource{Group: "longhorn.io", Version: "v1beta2", Resource: "volumes"}
	replicaGVR = schema.GroupVersionResource{Group: "longhorn.io", Version: "v1beta2", Resource: "replicas"}
	engineGVR  = schema.GroupVersionResource{Group: "longhorn.io", Version: "v1beta2", Resource: "engines"}
	clusterGVR = schema.GroupVersionResource{Group: "postgresql.cnpg.io", Version: "v1", Resource: "clusters"}
)

// Longhorn's values (longhorn-manager k8s/pkg/apis/longhorn/v1beta2,
// v1.12.1) and CNPG's (api/v1/cluster_types.go, pkg/utils/labels_annotations.go, v1.30.0).
const (
	robustHealthy   = "healthy"  // volume.go VolumeRobustnessHealthy
	robustFaulted   = "faulted"  // VolumeRobustnessFaulted
	volumeAttached  = "attached" // VolumeStateAttached
	modeRW          = "RW"       // engine.go ReplicaModeRW: a healthy replica
	phaseHealthy    = "Cluster in healthy state"
	phaseSwitchover = "Switchover in progress"
	labelCluster    = "cnpg.io/cluster"
)

// Replica is one Longhorn replica of a volume.
type Replica struct {
	Name string
	// Node is spec.nodeID.
	Node string
	// Healthy: the volume's engine has it in status.replicaModeMap as RW,
	// which is what the volume controller counts toward robustness
	// (controller/volume_controller.go ReconcileEngineReplicaState).
	Healthy bool
	// Rebuilding and Progress: the engine's status.rebuildStatus entry
	// for the replica's address (tcp://status.storageIP:status.port).
	Rebuilding bool
	Progress   int
}

// Volume is one Longhorn volume.
type Volume struct {
	Name string
	// PVC is status.kubernetesStatus.namespace/pvcName, when bound.
	PVC string
	// Robustness is status.robustness: healthy, degraded, faulted, unknown.
	Robustness string
	// State is status.state; only an attached volume serves data.
	State string
	// Want is spec.numberOfReplicas.
	Want     int
	Replicas []Replica
}

// Label names the volume in chat: its PVC when it has one.
func (v Volume) Label() string {
	if v.PVC != "" {
		return v.PVC
	}
	return v.Name
}

// HealthyOn lists the nodes holding a healthy replica.
func (v Volume) HealthyOn() []string {
	var out []string
	for _, r := range v.Replicas {
		if r.Healthy {
			out = append(out, r.Node)
		}
	}
	return out
}

// OnlyHealthyOn reports whether every healthy replica is on node.
func (v Volume) OnlyHealthyOn(node string) bool {
	h := v.HealthyOn()
	if len(h) == 0 {
		return false
	}
	for _, n := range h {
		if n != node {
			return false
		}
	}
	return true
}

// HasReplicaOn reports whether any replica is on node.
func (v Volume) HasReplicaOn(node string) bool {
	for _, r := range v.Replicas {
		if r.Node == node {
			return true
		}
	}
	return false
}

// Progress is the mean rebuild progress of the rebuilding replicas, and
// whether any is rebuilding.
func (v Volume) Progress() (int, bool) {
	sum, n := 0, 0
	for _, r := range v.Replicas {
		if r.Rebuilding {
			sum += r.Progress
			n++
		}
	}
	if n == 0 {
		return 0, false
	}
	return sum / n, true
}

// Postgres is one CloudNativePG cluster.
type Postgres struct {
	Namespace, Name string
	// CurrentPrimary and TargetPrimary are status.currentPrimary and
	// status.targetPrimary (they differ during a switchover or failover).
	CurrentPrimary, TargetPrimary string
	// Phase is status.phase.
	Phase string
	// Instances and Ready are status.instances and status.readyInstances.
	Instances, Ready int
	// Pods maps each instance pod (label cnpg.io/cluster) to its node;
	// PodReady says whether its Ready condition is true.
	Pods     map[string]string
	PodReady map[string]bool
}

// Key is namespace/name.
func (p Postgres) Key() string { return p.Namespace + "/" + p.Name }

// PrimaryNode is the node the current primary runs on.
func (p Postgres) PrimaryNode() string { return p.Pods[p.CurrentPrimary] }

// Candidate is a ready instance on a node other than avoid, for a
// switchover ("" when there is none).
func (p Postgres) Candidate(avoid ...string) string {
	names := make([]string, 0, len(p.Pods))
	for n := range p.Pods {
		names = append(names, n)
	}
	sort.Strings(names)
next:
	for _, n := range names {
		if n == p.CurrentPrimary || !p.PodReady[n] {
			continue
		}
		for _, a := range avoid {
			if p.Pods[n] == a {
				continue next
			}
		}
		return n
	}
	return ""
}

// Healthy: every instance ready and the primary settled.
func (p Postgres) Healthy() bool {
	return p.Instances > 0 && p.Ready == p.Instances && p.CurrentPrimary != "" && p.CurrentPrimary == p.TargetPrimary
}

// State is what the storage integration read from one cluster.
type State struct {
	// LonghornInstalled and CNPGInstalled: the CRD is served (and the
	// integration enabled).
	LonghornInstalled, CNPGInstalled bool
	Volumes                          []Volume
	Postgres                         []Postgres
}

// Read reads Longhorn and CNPG as the settings enable them. A CRD that is
// not installed is no error: that integration is simply absent.
func Read(ctx context.Context, kube kubernetes.Interface, dyn dynamic.Interface, s Settings) (State, error) {
	var st State
	if dyn == nil || kube == nil {
		return st, nil
	}
	if s.Longhorn {
		vols, ok, err := readLonghorn(ctx, dyn)
		if err != nil {
			return st, err
		}
		st.LonghornInstalled, st.Volumes = ok, vols
	}
	if s.CNPG {
		pgs, ok, err := readCNPG(ctx, kube, dyn)
		if err != nil {
			return st, err
		}
		st.CNPGInstalled, st.Postgres = ok, pgs
	}
	return st, nil
}

// absent: the API is not served (no CRD).
func absent(err error) bool { return apierrors.IsNotFound(err) || meta.IsNoMatchError(err) }

func readLonghorn(ctx context.Context, dyn dynamic.Interface) ([]Volume, bool, error) {
	vols, err := dyn.Resource(volumeGVR).Namespace(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if absent(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("list Longhorn volumes: %w", err)
	}
	reps, err := dyn.Resource(replicaGVR).Namespace(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, true, fmt.Errorf("list Longhorn replicas: %w", err)
	}
	engs, err := dyn.Resource(engineGVR).Namespace(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, true, fmt.Errorf("list Longhorn engines: %w", err)
	}
	type engineView struct {
		modes   map[string]string
		rebuild map[string]any
	}
	engines := map[string]engineView{} // volume -> its (active) engine
	for _, e := range engs.Items {
		vol, _, _ := unstructured.NestedString(e.Object, "spec", "volumeName")
		if active, ok, _ := unstructured.NestedBool(e.Object, "spec", "active"); ok && !active {
			continue
		}
		modes, _, _ := unstructured.NestedStringMap(e.Object, "status", "replicaModeMap")
		rebuild, _, _ := unstructured.NestedMap(e.Object, "status", "rebuildStatus")
		engines[vol] = engineView{modes: modes, rebuild: rebuild}
	}
	var out []Volume
	for _, v := range vols.Items {
		vol := Volume{Name: v.GetName()}
		vol.Robustness, _, _ = unstructured.NestedString(v.Object, "status", "robustness")
		vol.State, _, _ = unstructured.NestedString(v.Object, "status", "state")
		want, _, _ := unstructured.NestedInt64(v.Object, "spec", "numberOfReplicas")
		vol.Want = int(want)
		if pvc, _, _ := unstructured.NestedString(v.Object, "status", "kubernetesStatus", "pvcName"); pvc != "" {
			ns, _, _ := unstructured.NestedString(v.Object, "status", "kubernetesStatus", "namespace")
			vol.PVC = pvc
			if ns != "" {
				vol.PVC = ns + "/" + pvc
			}
		}
		eng := engines[v.GetName()]
		for _, r := range reps.Items {
			if name, _, _ := unstructured.NestedString(r.Object, "spec", "volumeName"); name != v.GetName() {
				continue
			}
			rep := Replica{Name: r.GetName()}
			rep.Node, _, _ = unstructured.NestedString(r.Object, "spec", "nodeID")
			rep.Healthy = eng.modes[r.GetName()] == modeRW
			ip, _, _ := unstructured.NestedString(r.Object, "status", "storageIP")
			port, _, _ := unstructured.NestedInt64(r.Object, "status", "port")
			if rs, ok := eng.rebuild[fmt.Sprintf("tcp://%s:%d", ip, port)].(map[string]any); ok {
				rep.Rebuilding, _ = rs["isRebuilding"].(bool)
				p, _ := rs["progress"].(int64)
				rep.Progress = int(p)
			}
			vol.Replicas = append(vol.Replicas, rep)
		}
		sort.Slice(vol.Replicas, func(i, j int) bool { return vol.Replicas[i].Name < vol.Replicas[j].Name })
		out = append(out, vol)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, true, nil
}

func readCNPG(ctx context.Context, kube kubernetes.Interface, dyn dynamic.Interface) ([]Postgres, bool, error) {
	cls, err := dyn.Resource(clusterGVR).Namespace(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if absent(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("list CloudNativePG clusters: %w", err)
	}
	var out []Postgres
	for _, c := range cls.Items {
		p := Postgres{Namespace: c.GetNamespace(), Name: c.GetName(), Pods: map[string]string{}, PodReady: map[string]bool{}}
		p.CurrentPrimary, _, _ = unstructured.NestedString(c.Object, "status", "currentPrimary")
		p.TargetPrimary, _, _ = unstructured.NestedString(c.Object, "status", "targetPrimary")
		p.Phase, _, _ = unstructured.NestedString(c.Object, "status", "phase")
		in, _, _ := unstructured.NestedInt64(c.Object, "status", "instances")
		ready, _, _ := unstructured.NestedInt64(c.Object, "status", "readyInstances")
		p.Instances, p.Ready = int(in), int(ready)
		pods, err := kube.CoreV1().Pods(p.Namespace).List(ctx, metav1.ListOptions{
			LabelSelector: labels.Set{labelCluster: p.Name}.String()})
		if err != nil {
			return nil, true, fmt.Errorf("list the pods of CloudNativePG cluster %s: %w", p.Key(), err)
		}
		for _, pod := range pods.Items {
			p.Pods[pod.Name] = pod.Spec.NodeName
			p.PodReady[pod.Name] = podReady(&pod)
		}
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key() < out[j].Key() })
	return out, true, nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
