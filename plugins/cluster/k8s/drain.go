package k8s

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/kubectl/pkg/drain"
)

// DefaultDrainTimeout bounds a drain when the caller gives none: talosctl's
// `upgrade --drain-timeout` default (cmd/talosctl/pkg/talos/nodedrain).
const DefaultDrainTimeout = 5 * time.Minute

// DefaultEvictRetry is the pause after an eviction a PodDisruptionBudget
// refused (429), kubectl drain's default. talosctl leaves it at zero, which
// retries as fast as the API answers; we keep kubectl's pace.
const DefaultEvictRetry = 5 * time.Second

// DrainOptions tune Drain.
type DrainOptions struct {
	// Timeout bounds the evictions and the wait until the evicted pods are
	// gone (default DefaultDrainTimeout).
	Timeout time.Duration
	// EvictRetry is the pause after a refused eviction (default DefaultEvictRetry).
	EvictRetry time.Duration
	// Log hears one line per pod evicted or failed.
	Log func(msg string)
}

// DrainError is a drain that did not finish: the pods still on the node and
// the budgets that cover them.
type DrainError struct {
	Node string
	// Pods are namespace/name of the pods the drain could not remove.
	Pods []string
	// PDBs describe the PodDisruptionBudgets covering those pods.
	PDBs []string
	Err  error
}

func (e *DrainError) Error() string {
	s := fmt.Sprintf("drain of Kubernetes node %s did not finish", e.Node)
	if len(e.Pods) > 0 {
		s += ": still there: " + strings.Join(e.Pods, ", ")
	}
	if len(e.PDBs) > 0 {
		s += "; eviction blocked by " + strings.Join(e.PDBs, "; ")
	}
	if e.Err != nil {
		s += " (" + oneLine(e.Err) + ")"
	}
	return s
}

func (e *DrainError) Unwrap() error { return e.Err }

// helper is kubectl's drain helper configured as talosctl configures it
// (cmd/talosctl/pkg/talos/nodedrain.CordonAndDrain): unmanaged pods too
// (Force), DaemonSet pods left to their controller, emptyDir data dropped
// (the node reboots), each pod's own grace period, evictions so budgets apply.
func helper(ctx context.Context, kube kubernetes.Interface, o DrainOptions) *drain.Helper {
	logf := func(format string, a ...any) {
		if o.Log != nil {
			o.Log(fmt.Sprintf(format, a...))
		}
	}
	return &drain.Helper{
		Ctx:                  ctx,
		Client:               kube,
		Force:                true,
		GracePeriodSeconds:   -1,
		IgnoreAllDaemonSets:  true,
		DeleteEmptyDirData:   true,
		Timeout:              o.Timeout,
		EvictErrorRetryDelay: o.EvictRetry,
		Out:                  io.Discard,
		ErrOut:               io.Discard,
		OnPodDeletionOrEvictionFinished: func(p *corev1.Pod, _ bool, err error) {
			if err != nil {
				logf("evicting %s/%s failed: %s", p.Namespace, p.Name, oneLine(err))
				return
			}
			logf("evicted %s/%s", p.Namespace, p.Name)
		},
	}
}

// Cordon marks a Kubernetes node unschedulable (kubectl cordon).
func Cordon(ctx context.Context, kube kubernetes.Interface, node string) error {
	return setCordon(ctx, kube, node, true)
}

// Uncordon marks a Kubernetes node schedulable again (kubectl uncordon).
func Uncordon(ctx context.Context, kube kubernetes.Interface, node string) error {
	return setCordon(ctx, kube, node, false)
}

func setCordon(ctx context.Context, kube kubernetes.Interface, node string, v bool) error {
	verb := map[bool]string{true: "cordon", false: "uncordon"}[v]
	n, err := kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("%s Kubernetes node %s: %w", verb, node, err)
	}
	if err := drain.RunCordonOrUncordon(&drain.Helper{Ctx: ctx, Client: kube}, n, v); err != nil {
		return fmt.Errorf("%s Kubernetes node %s: %w", verb, node, err)
	}
	return nil
}

// Cordoned reports whether the Kubernetes node is unschedulable now.
func Cordoned(ctx context.Context, kube kubernetes.Interface, node string) (bool, error) {
	n, err := kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return false, fmt.Errorf("read Kubernetes node %s: %w", node, err)
	}
	return n.Spec.Unschedulable, nil
}

// Drain evicts every pod kubectl drain would from a cordoned node, through
// the eviction API (PodDisruptionBudgets apply), and waits until they are
// gone, all within o.Timeout. A drain that does not finish is a *DrainError
// naming the pods left and the budgets that cover them; the node stays
// cordoned (the caller decides).
func Drain(ctx context.Context, kube kubernetes.Interface, node string, o DrainOptions) error {
	if o.Timeout <= 0 {
		o.Timeout = DefaultDrainTimeout
	}
	if o.EvictRetry <= 0 {
		o.EvictRetry = DefaultEvictRetry
	}
	dctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	h := helper(dctx, kube, o)
	list, errs := h.GetPodsForDeletion(node)
	if len(errs) > 0 {
		return &DrainError{Node: node, Err: errors.Join(errs...)}
	}
	err := h.DeleteOrEvictPods(list.Pods())
	if err == nil {
		return nil
	}
	// Say what is left and why, from a fresh reading (the drain context is spent).
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer rcancel()
	left, pdbs := remaining(rctx, kube, node, o)
	return &DrainError{Node: node, Pods: left, PDBs: pdbs, Err: err}
}

// remaining lists the pods a drain would still evict from node and the
// budgets that select them.
func remaining(ctx context.Context, kube kubernetes.Interface, node string, o DrainOptions) ([]string, []string) {
	list, _ := helper(ctx, kube, o).GetPodsForDeletion(node)
	if list == nil {
		return nil, nil
	}
	var pods, pdbs []string
	seen := map[string]bool{}
	// The budgets of each namespace, listed once (nil: the list failed).
	budgets := map[string][]policyv1.PodDisruptionBudget{}
	for _, p := range list.Pods() {
		pods = append(pods, p.Namespace+"/"+p.Name)
		inNS, listed := budgets[p.Namespace]
		if !listed {
			if l, err := kube.PolicyV1().PodDisruptionBudgets(p.Namespace).List(ctx, metav1.ListOptions{}); err == nil {
				inNS = l.Items
			}
			budgets[p.Namespace] = inNS
		}
		for _, b := range inNS {
			sel, err := metav1.LabelSelectorAsSelector(b.Spec.Selector)
			if err != nil || b.Spec.Selector == nil || !sel.Matches(labels.Set(p.Labels)) {
				continue
			}
			ref := b.Namespace + "/" + b.Name
			if !seen[ref] {
				seen[ref] = true
				pdbs = append(pdbs, fmt.Sprintf("PDB %s (%d disruption(s) allowed)", ref, b.Status.DisruptionsAllowed))
			}
		}
	}
	sort.Strings(pods)
	sort.Strings(pdbs)
	return pods, pdbs
}

// CordonAndDrain cordons the node and drains it (talosctl upgrade --drain).
func CordonAndDrain(ctx context.Context, kube kubernetes.Interface, node string, o DrainOptions) error {
	if err := Cordon(ctx, kube, node); err != nil {
		return err
	}
	return Drain(ctx, kube, node, o)
}

// WaitReady waits until the Kubernetes node reports Ready, within timeout:
// talosctl uncordons only then (nodedrain.WaitForNodeReady), so a node that
// came back without its kubelet does not take new pods. Read errors while
// the API itself restarts (a control plane) are waited through.
func WaitReady(ctx context.Context, kube kubernetes.Interface, node string, interval, timeout time.Duration) error {
	if interval <= 0 {
		interval = time.Second
	}
	var last string
	err := wait.PollUntilContextTimeout(ctx, interval, timeout, true, func(ctx context.Context) (bool, error) {
		n, err := kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			if apierrors.IsNotFound(err) {
				last = "not registered"
			} else {
				last = oneLine(err)
			}
			return false, nil
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				last = fmt.Sprintf("Ready=%s (%s)", c.Status, c.Reason)
				return c.Status == corev1.ConditionTrue, nil
			}
		}
		last = "no Ready condition"
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("node %s: not Ready in Kubernetes within %s (last: %s): %w", node, timeout, last, err)
	}
	return nil
}

func oneLine(err error) string { return strings.Join(strings.Fields(err.Error()), " ") }

// Evictable is false for pods a drain leaves alone: mirror pods and pods a
// DaemonSet controls (kubectl drain's filters with IgnoreAllDaemonSets). The
// gate's PDB probe counts only the pods a drain would evict.
func Evictable(p *corev1.Pod) bool {
	if _, mirror := p.Annotations[corev1.MirrorPodAnnotationKey]; mirror {
		return false
	}
	for _, o := range p.OwnerReferences {
		if o.Kind == "DaemonSet" && o.Controller != nil && *o.Controller {
			return false
		}
	}
	return true
}
