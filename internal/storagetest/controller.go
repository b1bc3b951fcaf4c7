package storagetest

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

// GVRs of the objects played here (the fixture CRDs' served versions).
var (
	VolumeGVR  = schema.GroupVersionResource{Group: "longhorn.io", Version: "v1beta2", Resource: "volumes"}
	ReplicaGVR = schema.GroupVersionResource{Group: "longhorn.io", Version: "v1beta2", Resource: "replicas"}
	EngineGVR  = schema.GroupVersionResource{Group: "longhorn.io", Version: "v1beta2", Resource: "engines"}
	ClusterGVR = schema.GroupVersionResource{Group: "postgresql.cnpg.io", Version: "v1", Resource: "clusters"}
)

// LonghornNamespace is where Longhorn keeps its objects.
const LonghornNamespace = "longhorn-system"

// Values from the operators' sources (docs/SIMULATOR.md cites them).
const (
	// longhorn-manager k8s/pkg/apis/longhorn/v1beta2/volume.go (v1.12.1)
	robustHealthy  = "healthy"
	robustDegraded = "degraded"
	robustFaulted  = "faulted"
	// engine.go: ReplicaModeRW / ReplicaModeWO
	modeRW = "RW"
	modeWO = "WO"
	// cloudnative-pg api/v1/cluster_types.go (v1.30.0)
	phaseHealthy    = "Cluster in healthy state"
	phaseSwitchover = "Switchover in progress"
	phaseFailOver   = "Failing over"
	phaseWaiting    = "Waiting for the instances to become active" // PhaseWaitingForInstancesToBeActive
	// pkg/utils/labels_annotations.go
	labelCluster  = "cnpg.io/cluster"
	labelInstance = "cnpg.io/instanceName"
	labelRole     = "cnpg.io/instanceRole"
)

// Controller plays the two operators' status transitions. Call Reconcile
// (or Run) to make it act; it reads Node readiness from the apiserver, as
// Longhorn's and CNPG's controllers learn of a node going down.
type Controller struct {
	Dyn  dynamic.Interface
	Kube kubernetes.Interface
	// Now is the clock. Nil: time.Now.
	Now func() time.Time
	// RebuildTime is how long one replica's rebuild takes, 0 % to 100 %
	// (linear). Zero: 10 s.
	RebuildTime time.Duration
	// SwitchoverTime is how long after status.targetPrimary changes the
	// new primary is promoted (status.currentPrimary follows). Zero: 2 s.
	SwitchoverTime time.Duration

	mu         sync.Mutex
	rebuilding map[string]time.Time  // replica name -> rebuild start
	switching  map[string]time.Time  // cluster ns/name -> switchover start
	faulted    map[string]bool       // volumes that were ever faulted
	failedOver map[string]string     // cluster -> the primary lost without a switchover
	placement  map[string]corev1.Pod // ns/pod -> the instance pod as last seen
}

func (c *Controller) now() time.Time {
	if c.Now == nil {
		return time.Now()
	}
	return c.Now()
}

func (c *Controller) init() {
	if c.rebuilding == nil {
		c.rebuilding, c.switching, c.faulted, c.failedOver, c.placement =
			map[string]time.Time{}, map[string]time.Time{}, map[string]bool{}, map[string]string{}, map[string]corev1.Pod{}
	}
}

// Faulted lists the volumes that were ever faulted (no healthy replica
// left): what a roll must never cause.
func (c *Controller) Faulted() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return sortedKeys(c.faulted)
}

// FailedOver lists the CNPG clusters whose primary went down without a
// switchover first (an uncontrolled failover), as "ns/name: pod".
func (c *Controller) FailedOver() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for k, v := range c.failedOver {
		out = append(out, k+": "+v)
	}
	sort.Strings(out)
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Run reconciles every interval until ctx ends.
func (c *Controller) Run(ctx context.Context, interval time.Duration) {
	_ = wait.PollUntilContextCancel(ctx, interval, true, func(ctx context.Context) (bool, error) {
		_ = c.Reconcile(ctx)
		return false, nil
	})
}

// nodesUp reads which Nodes are Ready. A node with no Node object counts
// as up (a test that does not model Nodes).
func (c *Controller) nodesUp(ctx context.Context) (func(string) bool, error) {
	nodes, err := c.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	down := map[string]bool{}
	for _, n := range nodes.Items {
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status != corev1.ConditionTrue {
				down[n.Name] = true
			}
		}
	}
	return func(name string) bool { return !down[name] }, nil
}

// Reconcile makes one pass of both operators.
func (c *Controller) Reconcile(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.init()
	up, err := c.nodesUp(ctx)
	if err != nil {
		return err
	}
	if err := c.longhorn(ctx, up); err != nil {
		return err
	}
	if err := c.cnpg(ctx, up); err != nil {
		return err
	}
	return c.pdbs(ctx)
}

func (c *Controller) rebuildTime() time.Duration {
	if c.RebuildTime <= 0 {
		return 10 * time.Second
	}
	return c.RebuildTime
}

func (c *Controller) switchoverTime() time.Duration {
	if c.SwitchoverTime <= 0 {
		return 2 * time.Second
	}
	return c.SwitchoverTime
}

// longhorn plays the volume controller's ReconcileEngineReplicaState and
// the engine's rebuild (longhorn-manager controller/volume_controller.go,
// v1.12.1): a replica whose node is down fails (spec.failedAt set,
// spec.healthyAt cleared, dropped from the engine's replicaModeMap); when
// the node is back it is rebuilt from a healthy replica (mode WO, the
// engine's rebuildStatus progress growing) until it is RW again; the
// volume's robustness is healthy with as many RW replicas as
// spec.numberOfReplicas, degraded with fewer, faulted with none.
func (c *Controller) longhorn(ctx context.Context, up func(string) bool) error {
	vols, err := c.Dyn.Resource(VolumeGVR).Namespace(LonghornNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("list volumes: %w", err)
	}
	reps, err := c.Dyn.Resource(ReplicaGVR).Namespace(LonghornNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list replicas: %w", err)
	}
	engs, err := c.Dyn.Resource(EngineGVR).Namespace(LonghornNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list engines: %w", err)
	}
	now := c.now()
	stamp := now.UTC().Format(time.RFC3339)
	for i := range vols.Items {
		v := &vols.Items[i]
		var eng *unstructured.Unstructured
		for j := range engs.Items {
			if s, _, _ := unstructured.NestedString(engs.Items[j].Object, "spec", "volumeName"); s == v.GetName() {
				eng = &engs.Items[j]
			}
		}
		if eng == nil {
			continue
		}
		modes, _, _ := unstructured.NestedStringMap(eng.Object, "status", "replicaModeMap")
		if modes == nil {
			modes = map[string]string{}
		}
		rebuild, _, _ := unstructured.NestedMap(eng.Object, "status", "rebuildStatus")
		if rebuild == nil {
			rebuild = map[string]any{}
		}
		healthySource := false
		for _, m := range modes {
			healthySource = healthySource || m == modeRW
		}
		for j := range reps.Items {
			r := &reps.Items[j]
			if s, _, _ := unstructured.NestedString(r.Object, "spec", "volumeName"); s != v.GetName() {
				continue
			}
			node, _, _ := unstructured.NestedString(r.Object, "spec", "nodeID")
			failedAt, _, _ := unstructured.NestedString(r.Object, "spec", "failedAt")
			addr := Address(r)
			switch {
			case !up(node) && failedAt == "":
				_ = unstructured.SetNestedField(r.Object, stamp, "spec", "failedAt")
				_ = unstructured.SetNestedField(r.Object, stamp, "spec", "lastFailedAt")
				_ = unstructured.SetNestedField(r.Object, "", "spec", "healthyAt")
				if err := c.update(ctx, ReplicaGVR, r, "unknown"); err != nil {
					return err
				}
				delete(modes, r.GetName())
				delete(rebuild, addr)
				delete(c.rebuilding, r.GetName())
			case up(node) && failedAt != "":
				_ = unstructured.SetNestedField(r.Object, "", "spec", "failedAt")
				if err := c.update(ctx, ReplicaGVR, r, "running"); err != nil {
					return err
				}
				if healthySource {
					modes[r.GetName()] = modeWO
					rebuild[addr] = map[string]any{"isRebuilding": true, "progress": int64(0), "state": "in_progress"}
					c.rebuilding[r.GetName()] = now
				} else {
					// No healthy replica to rebuild from: Longhorn
					// salvages the last one (it was faulted meanwhile).
					modes[r.GetName()] = modeRW
				}
			case up(node) && modes[r.GetName()] == modeWO:
				start, ok := c.rebuilding[r.GetName()]
				if !ok {
					start = now
					c.rebuilding[r.GetName()] = now
				}
				p := int64(now.Sub(start) * 100 / c.rebuildTime())
				if p >= 100 {
					modes[r.GetName()] = modeRW
					delete(rebuild, addr)
					delete(c.rebuilding, r.GetName())
					_ = unstructured.SetNestedField(r.Object, stamp, "spec", "healthyAt")
					_ = unstructured.SetNestedField(r.Object, stamp, "spec", "lastHealthyAt")
					if err := c.update(ctx, ReplicaGVR, r, "running"); err != nil {
						return err
					}
				} else {
					rebuild[addr] = map[string]any{"isRebuilding": true, "progress": max(p, 0), "state": "in_progress"}
				}
			}
		}
		rw := int64(0)
		for _, m := range modes {
			if m == modeRW {
				rw++
			}
		}
		want, _, _ := unstructured.NestedInt64(v.Object, "spec", "numberOfReplicas")
		robust := robustDegraded
		switch {
		case rw == 0:
			robust = robustFaulted
			c.faulted[v.GetName()] = true
		case rw >= want:
			robust = robustHealthy
		}
		mm := map[string]any{}
		for k, m := range modes {
			mm[k] = m
		}
		_ = unstructured.SetNestedMap(eng.Object, mm, "status", "replicaModeMap")
		_ = unstructured.SetNestedMap(eng.Object, rebuild, "status", "rebuildStatus")
		if _, err := c.Dyn.Resource(EngineGVR).Namespace(LonghornNamespace).UpdateStatus(ctx, eng, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("update engine %s: %w", eng.GetName(), err)
		}
		if old, _, _ := unstructured.NestedString(v.Object, "status", "robustness"); old != robust {
			_ = unstructured.SetNestedField(v.Object, robust, "status", "robustness")
			if robust == robustDegraded {
				_ = unstructured.SetNestedField(v.Object, stamp, "status", "lastDegradedAt")
			}
			if _, err := c.Dyn.Resource(VolumeGVR).Namespace(LonghornNamespace).UpdateStatus(ctx, v, metav1.UpdateOptions{}); err != nil {
				return fmt.Errorf("update volume %s: %w", v.GetName(), err)
			}
		}
	}
	return nil
}

// Address is a replica's address as the engine keys its rebuildStatus:
// tcp://status.storageIP:status.port (longhorn-manager
// controller/engine_controller.go, v1.12.1).
func Address(r *unstructured.Unstructured) string {
	ip, _, _ := unstructured.NestedString(r.Object, "status", "storageIP")
	port, _, _ := unstructured.NestedInt64(r.Object, "status", "port")
	return fmt.Sprintf("tcp://%s:%d", ip, port)
}

// update writes a replica's spec, then its status.currentState.
func (c *Controller) update(ctx context.Context, gvr schema.GroupVersionResource, r *unstructured.Unstructured, state string) error {
	res := c.Dyn.Resource(gvr).Namespace(r.GetNamespace())
	got, err := res.Update(ctx, r, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("update %s %s: %w", gvr.Resource, r.GetName(), err)
	}
	_ = unstructured.SetNestedField(got.Object, state, "status", "currentState")
	got, err = res.UpdateStatus(ctx, got, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("update status of %s %s: %w", gvr.Resource, r.GetName(), err)
	}
	*r = *got
	return nil
}

// cnpg plays the CloudNativePG operator for the fields the bot reads
// (cloudnative-pg v1.30.0): an instance is ready while its node is;
// status.readyInstances and status.instancesStatus follow; when
// status.targetPrimary differs from status.currentPrimary (a switchover,
// as `kubectl cnpg promote` sets it: internal/cmd/plugin/promote/promote.go)
// the target is promoted after SwitchoverTime, and status.currentPrimary,
// the pods' cnpg.io/instanceRole labels and the phase follow (healthy only
// with every instance ready, else "Waiting for the instances to become
// active"). A primary
// whose node goes down with no switchover is failed over to a ready
// replica: the uncontrolled failover recorded in FailedOver.
func (c *Controller) cnpg(ctx context.Context, up func(string) bool) error {
	cls, err := c.Dyn.Resource(ClusterGVR).Namespace(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("list CNPG clusters: %w", err)
	}
	now := c.now()
	for i := range cls.Items {
		cl := &cls.Items[i]
		key := cl.GetNamespace() + "/" + cl.GetName()
		pods, err := c.Kube.CoreV1().Pods(cl.GetNamespace()).List(ctx, metav1.ListOptions{LabelSelector: labelCluster + "=" + cl.GetName()})
		if err != nil {
			return fmt.Errorf("list pods of %s: %w", key, err)
		}
		if err := c.recreate(ctx, cl.GetNamespace(), cl.GetName(), pods.Items, up); err != nil {
			return err
		}
		if pods, err = c.Kube.CoreV1().Pods(cl.GetNamespace()).List(ctx, metav1.ListOptions{LabelSelector: labelCluster + "=" + cl.GetName()}); err != nil {
			return fmt.Errorf("list pods of %s: %w", key, err)
		}
		ready := map[string]bool{}
		var healthy, failed []any
		for i := range pods.Items {
			p := &pods.Items[i]
			// The node lifecycle controller marks a lost node's pods not
			// Ready (MarkPodsNotReady); the kubelet marks them Ready again.
			if err := c.syncPodReady(ctx, p, up(p.Spec.NodeName)); err != nil {
				return err
			}
			if up(p.Spec.NodeName) {
				ready[p.Name] = true
				healthy = append(healthy, p.Name)
			} else {
				failed = append(failed, p.Name)
			}
		}
		cur, _, _ := unstructured.NestedString(cl.Object, "status", "currentPrimary")
		target, _, _ := unstructured.NestedString(cl.Object, "status", "targetPrimary")
		phase, _, _ := unstructured.NestedString(cl.Object, "status", "phase")
		if cur == target && cur != "" && !ready[cur] {
			// The primary went down with no switchover: fail over.
			c.failedOver[key] = cur
			for _, p := range healthy {
				target = p.(string)
				break
			}
			_ = unstructured.SetNestedField(cl.Object, target, "status", "targetPrimary")
			phase = phaseFailOver
		}
		if target != cur && target != "" {
			start, ok := c.switching[key]
			if !ok {
				start = now
				c.switching[key] = now
			}
			if now.Sub(start) >= c.switchoverTime() && ready[target] {
				cur = target
				delete(c.switching, key)
				_ = unstructured.SetNestedField(cl.Object, cur, "status", "currentPrimary")
				_ = unstructured.SetNestedField(cl.Object, now.UTC().Format(time.RFC3339Nano), "status", "currentPrimaryTimestamp")
				if err := c.labelRoles(ctx, pods.Items, cur); err != nil {
					return err
				}
			} else if phase != phaseFailOver {
				phase = phaseSwitchover
			}
		}
		if cur == target {
			// The operator registers PhaseWaitingForInstancesToBeActive
			// while an instance pod is not active, healthy only with all.
			phase = phaseHealthy
			if len(failed) > 0 {
				phase = phaseWaiting
			}
		}
		_ = unstructured.SetNestedField(cl.Object, int64(len(healthy)), "status", "readyInstances")
		_ = unstructured.SetNestedField(cl.Object, int64(len(pods.Items)), "status", "instances")
		st := map[string]any{"healthy": healthy}
		if len(failed) > 0 {
			st["failed"] = failed
		}
		_ = unstructured.SetNestedMap(cl.Object, st, "status", "instancesStatus")
		_ = unstructured.SetNestedField(cl.Object, phase, "status", "phase")
		if _, err := c.Dyn.Resource(ClusterGVR).Namespace(cl.GetNamespace()).UpdateStatus(ctx, cl, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("update status of %s: %w", key, err)
		}
	}
	return nil
}

// recreate plays the operator recreating an instance pod a drain deleted:
// on the node that holds its PVC, once that node is Ready and schedulable
// again (CNPG docs/src/kubernetes_upgrade.md, reusePVC: the operator waits
// for the node to come back rather than cloning the instance elsewhere).
func (c *Controller) recreate(ctx context.Context, ns, cluster string, pods []corev1.Pod, up func(string) bool) error {
	seen := map[string]bool{}
	for _, p := range pods {
		key := p.Namespace + "/" + p.Name
		seen[key] = true
		if p.DeletionTimestamp == nil {
			c.placement[key] = p
		}
	}
	for key, p := range c.placement {
		if seen[key] || p.Namespace != ns || p.Labels[labelCluster] != cluster || !up(p.Spec.NodeName) {
			continue
		}
		if n, err := c.Kube.CoreV1().Nodes().Get(ctx, p.Spec.NodeName, metav1.GetOptions{}); err == nil && n.Spec.Unschedulable {
			continue
		}
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, Labels: p.Labels}, Spec: p.Spec}
		if _, err := c.Kube.CoreV1().Pods(p.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("recreate pod %s: %w", key, err)
		}
		if err := setPodReady(ctx, c.Kube, p.Namespace, p.Name); err != nil {
			return err
		}
	}
	return nil
}

func (c *Controller) syncPodReady(ctx context.Context, p *corev1.Pod, ready bool) error {
	want := corev1.ConditionFalse
	if ready {
		want = corev1.ConditionTrue
	}
	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.PodReady && cond.Status == want {
			return nil
		}
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: want, LastTransitionTime: metav1.NewTime(c.now())}}
	got, err := c.Kube.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("set readiness of pod %s: %w", p.Name, err)
	}
	*p = *got
	return nil
}

func (c *Controller) labelRoles(ctx context.Context, pods []corev1.Pod, primary string) error {
	for i := range pods {
		p := &pods[i]
		role := "replica"
		if p.Name == primary {
			role = "primary"
		}
		if p.Labels[labelRole] == role {
			continue
		}
		p.Labels[labelRole] = role
		if _, err := c.Kube.CoreV1().Pods(p.Namespace).Update(ctx, p, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("label pod %s: %w", p.Name, err)
		}
	}
	return nil
}
