package sim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// Label and taint Talos/kubeadm put on control-plane nodes.
const controlPlaneLabel = "node-role.kubernetes.io/control-plane"

// kubeSide plays the kubelet and Talos's Kubernetes tasks against a real (or fake) API server.
type kubeSide struct {
	c            *Cluster // the sim's nodes (runKubelet, byNodeName)
	client       kubernetes.Interface
	hostLabel    string
	drainTimeout time.Duration
	log          *slog.Logger

	mu         sync.Mutex
	restarting map[string]bool // Node name → its kubelet is restarting after a config change
}

func readyCondition(ready bool, reason, msg string, now time.Time) corev1.NodeCondition {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}

	return corev1.NodeCondition{
		Type:               corev1.NodeReady,
		Status:             st,
		Reason:             reason,
		Message:            msg,
		LastHeartbeatTime:  metav1.NewTime(now),
		LastTransitionTime: metav1.NewTime(now),
	}
}

// byNodeName is the sim node whose Kubernetes Node is name (nil when unknown).
func (k *kubeSide) byNodeName(name string) *node {
	if k.c == nil {
		return nil
	}

	for _, n := range k.c.nodes {
		if n.info.NodeName == name {
			return n
		}
	}

	return nil
}

// register creates (or refreshes) the Node object of a sim node, Ready.
func (k *kubeSide) register(ctx context.Context, info NodeInfo, kubeletVersion, talosVersion string) error {
	labels := map[string]string{
		"kubernetes.io/hostname": info.NodeName,
		"kubernetes.io/os":       "linux",
		"kubernetes.io/arch":     "amd64",
		k.hostLabel:              info.Host,
	}

	var taints []corev1.Taint

	if info.Role == RoleControlPlane {
		labels[controlPlaneLabel] = ""
		taints = append(taints, corev1.Taint{Key: controlPlaneLabel, Effect: corev1.TaintEffectNoSchedule})
	}

	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: info.NodeName, Labels: labels},
		Spec:       corev1.NodeSpec{Taints: taints},
	}

	_, err := k.client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cur, gerr := k.client.CoreV1().Nodes().Get(ctx, info.NodeName, metav1.GetOptions{})
			if gerr != nil {
				return gerr
			}

			for key, v := range labels {
				if cur.Labels == nil {
					cur.Labels = map[string]string{}
				}

				cur.Labels[key] = v
			}

			_, uerr := k.client.CoreV1().Nodes().Update(ctx, cur, metav1.UpdateOptions{})

			return uerr
		})
	}

	if err != nil {
		return fmt.Errorf("kube: register node %s: %w", info.NodeName, err)
	}

	return k.updateStatus(ctx, info.NodeName, func(st *corev1.NodeStatus) {
		st.Conditions = []corev1.NodeCondition{readyCondition(true, "KubeletReady", "kubelet is posting ready status", time.Now())}
		st.Addresses = []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: info.IP},
			{Type: corev1.NodeHostName, Address: info.Hostname},
		}
		st.NodeInfo.KubeletVersion = kubeletVersion
		st.NodeInfo.KubeProxyVersion = kubeletVersion //nolint:staticcheck // still shown by kubectl
		st.NodeInfo.OSImage = "Talos (" + talosVersion + ")"
		st.NodeInfo.OperatingSystem = "linux"
		st.NodeInfo.Architecture = "amd64"
		st.NodeInfo.ContainerRuntimeVersion = "containerd://2.1.0"
	})
}

func (k *kubeSide) updateStatus(ctx context.Context, name string, mutate func(*corev1.NodeStatus)) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := k.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}

		mutate(&cur.Status)

		_, err = k.client.CoreV1().Nodes().UpdateStatus(ctx, cur, metav1.UpdateOptions{})

		return err
	})
}

// setReady flips the Ready condition (the kubelet stops posting during a reboot).
func (k *kubeSide) setReady(ctx context.Context, name string, ready bool, reason, msg string) error {
	return k.updateStatus(ctx, name, func(st *corev1.NodeStatus) {
		cond := readyCondition(ready, reason, msg, time.Now())

		for i := range st.Conditions {
			if st.Conditions[i].Type == corev1.NodeReady {
				st.Conditions[i] = cond

				return
			}
		}

		st.Conditions = append(st.Conditions, cond)
	})
}

// setVersions records the kubelet and Talos versions the node reports.
func (k *kubeSide) setVersions(ctx context.Context, name, kubeletVersion, talosVersion string) error {
	return k.updateStatus(ctx, name, func(st *corev1.NodeStatus) {
		st.NodeInfo.KubeletVersion = kubeletVersion
		st.NodeInfo.KubeProxyVersion = kubeletVersion //nolint:staticcheck // still shown by kubectl
		st.NodeInfo.OSImage = "Talos (" + talosVersion + ")"
	})
}

// booted is what happens on the Kubernetes side when a node finishes booting: versions
// refreshed and Ready. Uncordoning is uncordonOwned's.
func (k *kubeSide) booted(ctx context.Context, name, kubeletVersion, talosVersion string) error {
	err := k.setVersions(ctx, name, kubeletVersion, talosVersion)
	if err == nil {
		err = k.setReady(ctx, name, true, "KubeletReady", "kubelet is posting ready status")
	}

	// The boot renders the static pods afresh (their config resources start a new version
	// history with the node's new resource state): the kubelet recreates the mirror pods.
	if n := k.byNodeName(name); n != nil {
		n.staticPodsChanged()
	}

	return err
}

// cordonedAnnotation marks nodes Talos cordoned (constants.AnnotationCordonedKey).
const cordonedAnnotation = "talos.dev/cordoned"

// cordonOwned is NodeApplyController.ApplyCordoned cordoning: a schedulable node becomes
// unschedulable and carries Talos's annotation; an already cordoned node is left as it is.
func (k *kubeSide) cordonOwned(ctx context.Context, name string) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := k.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil || cur.Spec.Unschedulable {
			return err
		}

		cur.Spec.Unschedulable = true
		if cur.Annotations == nil {
			cur.Annotations = map[string]string{}
		}

		cur.Annotations[cordonedAnnotation] = "true"
		_, err = k.client.CoreV1().Nodes().Update(ctx, cur, metav1.UpdateOptions{})

		return err
	})
}

// uncordonOwned is ApplyCordoned uncordoning: only a node carrying Talos's annotation is
// uncordoned (and loses it); a node cordoned by anyone else stays cordoned.
func (k *kubeSide) uncordonOwned(ctx context.Context, name string) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := k.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil || !cur.Spec.Unschedulable {
			return err
		}

		if _, owned := cur.Annotations[cordonedAnnotation]; !owned {
			return nil
		}

		cur.Spec.Unschedulable = false
		delete(cur.Annotations, cordonedAnnotation)
		_, err = k.client.CoreV1().Nodes().Update(ctx, cur, metav1.UpdateOptions{})

		return err
	})
}

// cordonAndDrain is Talos's server-side cordon + drain: mark unschedulable, then evict every
// pod on the node through the eviction API (so PodDisruptionBudgets apply), skipping
// DaemonSet and mirror pods, retrying refused evictions until DrainTimeout.
func (k *kubeSide) cordonAndDrain(ctx context.Context, name string) error {
	if err := k.cordonOwned(ctx, name); err != nil {
		return fmt.Errorf("cordon %s: %w", name, err)
	}

	ctx, cancel := context.WithTimeout(ctx, k.drainTimeout)
	defer cancel()

	pods, err := k.client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + name})
	if err != nil {
		return fmt.Errorf("list pods on %s: %w", name, err)
	}

	var errs []error

	for i := range pods.Items {
		p := &pods.Items[i]
		if skipDrain(p) {
			continue
		}

		if err := k.evict(ctx, p); err != nil {
			errs = append(errs, err)
		}
	}

	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("drain %s: %w", name, err)
	}

	return nil
}

func skipDrain(p *corev1.Pod) bool {
	if _, mirror := p.Annotations[corev1.MirrorPodAnnotationKey]; mirror {
		return true
	}

	for _, o := range p.OwnerReferences {
		if o.Kind == "DaemonSet" {
			return true
		}
	}

	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

// evict evicts one pod, retrying while a PodDisruptionBudget refuses (HTTP 429), and then
// finishes the deletion the way the node's kubelet would (grace period 0).
func (k *kubeSide) evict(ctx context.Context, p *corev1.Pod) error {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()

	for {
		err := k.client.PolicyV1().Evictions(p.Namespace).Evict(ctx, &policyv1.Eviction{
			ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace},
		})

		switch {
		case err == nil:
			zero := int64(0)

			derr := k.client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
			if derr != nil && !apierrors.IsNotFound(derr) {
				return fmt.Errorf("delete evicted pod %s/%s: %w", p.Namespace, p.Name, derr)
			}

			return nil
		case apierrors.IsNotFound(err):
			return nil
		case apierrors.IsTooManyRequests(err):
			// Refused by a PodDisruptionBudget: retry until the budget allows or time runs out.
		default:
			return fmt.Errorf("evict pod %s/%s: %w", p.Namespace, p.Name, err)
		}

		select {
		case <-ctx.Done():
			return fmt.Errorf("evict pod %s/%s: %w (last refusal: %v)", p.Namespace, p.Name, ctx.Err(), err)
		case <-t.C:
		}
	}
}

// KubeBackend is a Kubernetes API server started by Options.KubeOnEtcd.
type KubeBackend struct {
	// Client talks to it: the sim writes Node objects and mirror pods through it.
	Client kubernetes.Interface
	// Kubeconfig is what the Kubeconfig RPC serves (a secret).
	Kubeconfig []byte
	// Stop stops the server; the sim's Close calls it before stopping etcd. Nil: nothing to stop.
	Stop func()
	// Restart, optional, replaces the server process by a new one at the same address with the
	// same credentials (testenv.Kube.Restart). The sim calls it once etcd was bootstrapped
	// again (disaster recovery), as Talos's ControlPlaneStaticPodController recreates the
	// kube-apiserver static pod once etcd is healthy again: a process that kept running would
	// serve its watch cache, newer than the restored data. Nil: the apiserver keeps running.
	Restart func(ctx context.Context) error
}

// startKubeOnEtcd runs Options.KubeOnEtcd against the control planes' etcd members. On Talos
// each control plane runs its own kube-apiserver against its local member only
// (internal/app/machined/pkg/controllers/k8s/control_plane.go: EtcdServers
// https://127.0.0.1:2379); the sim runs one apiserver for the cluster, so it gets every member.
func (c *Cluster) startKubeOnEtcd(ctx context.Context) error {
	if c.opts.KubeOnEtcd == nil {
		return nil
	}

	var servers []string

	for _, m := range c.etcd.Members() {
		servers = append(servers, m.ClientURL())
	}

	kb, err := c.opts.KubeOnEtcd(ctx, servers)
	if err != nil {
		return fmt.Errorf("start kube-apiserver on the sim's etcd: %w", err)
	}

	if kb.Client == nil {
		if kb.Stop != nil {
			kb.Stop()
		}

		return errors.New("sim: Options.KubeOnEtcd returned no Client")
	}

	c.kubeStop = kb.Stop
	c.kubeRestart = kb.Restart
	c.opts.Kube = kb.Client

	if len(c.opts.Kubeconfig) == 0 {
		c.opts.Kubeconfig = kb.Kubeconfig
	}

	c.kube = &kubeSide{c: c, client: kb.Client, hostLabel: c.opts.HostLabel, drainTimeout: c.opts.DrainTimeout, log: c.log}

	return nil
}

// kubeletRestarting reports whether the node's kubelet is restarting: the service is down, so
// it is not Running (and so has no Service resource) until restartKubelet brings it back.
func (n *node) kubeletRestarting() bool {
	k := n.c.kube
	if k == nil {
		return false
	}

	k.mu.Lock()
	defer k.mu.Unlock()

	return k.restarting[n.info.NodeName]
}

func (k *kubeSide) setRestarting(name string, v bool) {
	k.mu.Lock()
	defer k.mu.Unlock()

	if k.restarting == nil {
		k.restarting = map[string]bool{}
	}

	k.restarting[name] = v
}

// kubeConfigApplied is the Kubernetes side of a configuration applied without a reboot
// (MachineService.ApplyConfiguration): a new kubelet image restarts the kubelet, which then
// registers with its new version; changed control-plane images recreate the static pods.
func (n *node) kubeConfigApplied(prev, cur images) {
	if n.c.kube == nil {
		return
	}

	if prev.Kubelet != cur.Kubelet {
		n.c.goBackground(func(ctx context.Context) { n.restartKubelet(ctx, cur.Kubelet) })
	}

	n.staticPodsChanged()
}

// restartKubelet follows what Talos does when KubeletSpec changes
// (internal/app/machined/pkg/controllers/k8s/kubelet_service.go: the kubelet service is
// restarted): the service stops, so its v1alpha1.Service resource is destroyed, and starts
// again; the new kubelet then posts its version to the Node. The node's resources are refreshed
// at each step, so that a watcher (talosctl upgrade-k8s) sees both transitions however
// briefly the kubelet is down.
func (n *node) restartKubelet(ctx context.Context, image string) {
	k := n.c.kube

	k.setRestarting(n.info.NodeName, true)
	n.refreshResources(ctx)

	t := time.NewTimer(n.c.opts.StaticPodReadyDelay)
	defer t.Stop()

	select {
	case <-ctx.Done():
	case <-t.C:
	}

	// The new kubelet registers (posting its version) as it comes up; its service turns
	// healthy at the same time.
	if ctx.Err() == nil {
		if err := k.setVersions(ctx, n.info.NodeName, kubeletVersionOf(image), n.talosVersion()); err != nil {
			n.c.log.Warn("kube: update kubelet version", "node", n.info.Name, "err", err)
		}
	}

	k.setRestarting(n.info.NodeName, false)
	n.refreshResources(ctx)
}

// refreshResources brings the node's COSI resources up to date now.
func (n *node) refreshResources(ctx context.Context) {
	if n.cosi == nil {
		return
	}

	if _, err := n.cosi.current(ctx); err != nil {
		n.c.log.Warn("refresh resources", "node", n.info.Name, "err", err)
	}
}

// runKubelet plays the part of every sim node's kubelet that the API server waits for: a pod
// bound to a sim node that is being deleted (evicted, drained) is gone once its containers
// stop, which the kubelet confirms by deleting it with grace period 0. Without this a drain
// would wait for ever on Terminating pods. It runs until ctx ends, re-watching after errors.
func (k *kubeSide) runKubelet(ctx context.Context) {
	nodes := map[string]bool{}
	for _, n := range k.c.nodes {
		nodes[n.info.NodeName] = true
	}

	retryT := time.NewTimer(0)
	defer retryT.Stop()

	for {
		select {
		case <-ctx.Done():
			return
		case <-retryT.C:
		}

		w, err := k.client.CoreV1().Pods(metav1.NamespaceAll).Watch(ctx, metav1.ListOptions{})
		if err == nil {
			for ev := range w.ResultChan() {
				p, ok := ev.Object.(*corev1.Pod)
				if !ok || p.DeletionTimestamp == nil || !nodes[p.Spec.NodeName] {
					continue
				}

				zero := int64(0)

				err := k.client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{
					GracePeriodSeconds: &zero,
					Preconditions:      &metav1.Preconditions{UID: &p.UID},
				})
				if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
					k.log.Warn("kubelet: finish pod deletion", "pod", p.Namespace+"/"+p.Name, "err", err)
				}
			}

			w.Stop()
		}

		retryT.Reset(time.Second)
	}
}
