package gate

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/talosbot/talosbot/plugins/cluster/k8s"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Why the Flux probe could not run.
const (
	FluxNotInstalled = "Flux is not installed (no Kustomization or HelmRelease API)"
	FluxEmpty        = "no Kustomization or HelmRelease exists; the Flux APIs are served, but nothing is there to be Ready"
)

// kubeErr is a Kubernetes call that failed: the probe could not run. A run
// that requires Kubernetes fails on it; any other run reports it as not
// checked, with the error.
func kubeErr(g *gateRun, what string, err error) ProbeResult {
	return notChecked(g.opts.RequireKubernetes, "Kubernetes API: "+what+": "+err.Error())
}

// probeKubeNodes: every inventory node registered, Ready and schedulable.
func probeKubeNodes(ctx context.Context, g *gateRun) ProbeResult {
	list, err := g.c.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return kubeErr(g, "cannot list nodes", err)
	}
	byName, byIP := nodeIndex(list.Items)
	var problems []string
	seen := map[string]bool{}
	for _, inv := range g.inv.Nodes {
		// The resolved Node first (identity.Map), then by InternalIP, and a
		// Node of the inventory's name only without either.
		var kn *corev1.Node
		if ids := g.opts.Identity; ids != nil {
			kn = byName[ids.KubeNode(inv.Name)]
		}
		if kn == nil {
			kn = byIP[inv.Address]
		}
		if kn == nil {
			kn = byName[inv.Name]
		}
		if kn == nil {
			problems = append(problems, inv.Name+" not registered in Kubernetes")
			continue
		}
		seen[kn.Name] = true
		if ready, why := nodeReady(kn); !ready {
			problems = append(problems, inv.Name+" NotReady"+why)
		}
		if kn.Spec.Unschedulable {
			problems = append(problems, inv.Name+" cordoned (unschedulable)")
		}
	}
	var extra []string
	for name := range byName {
		if !seen[name] {
			extra = append(extra, name)
		}
	}
	sort.Strings(extra)
	if len(problems) > 0 {
		return ProbeResult{Status: StatusFail, Detail: strings.Join(problems, "; ")}
	}
	if len(extra) > 0 {
		return ProbeResult{Status: StatusWarn, Detail: fmt.Sprintf("%d inventory nodes Ready; not in the inventory: %s", len(g.inv.Nodes), strings.Join(extra, ", "))}
	}
	return ProbeResult{Status: StatusOK, Detail: fmt.Sprintf("all %d nodes Ready and schedulable", len(g.inv.Nodes))}
}

func nodeReady(n *corev1.Node) (bool, string) {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			if c.Status == corev1.ConditionTrue {
				return true, ""
			}
			if c.Reason != "" {
				return false, " (" + c.Reason + ")"
			}
			return false, ""
		}
	}
	return false, " (no Ready condition)"
}

// badPod is one unhealthy pod.
type badPod struct {
	ref      string
	why      string
	rank     int // 0 CrashLoopBackOff / image pull, 1 Failed, 2 Pending
	restarts int32
}

// probePods counts pods in all namespaces (paged, so memory does not grow
// with the cluster) and names the worst few. Unhealthy pods warn rather than
// fail: R3 stops for nodes, etcd, Flux and PDBs, and a crash-looping app is
// the operators' call.
func probePods(ctx context.Context, g *gateRun) ProbeResult {
	phases := map[corev1.PodPhase]int{}
	var bad []badPod
	total := 0
	opts := metav1.ListOptions{Limit: 500}
	for {
		list, err := g.c.Kube.CoreV1().Pods(metav1.NamespaceAll).List(ctx, opts)
		if err != nil {
			return kubeErr(g, "cannot list pods", err)
		}
		for i := range list.Items {
			p := &list.Items[i]
			total++
			phases[p.Status.Phase]++
			if b, isBad := classifyPod(p); isBad {
				bad = append(bad, b)
				// Keep only the worst few: memory stays flat on big clusters.
				sortBad(bad)
				if len(bad) > g.opts.WorstPods {
					bad = bad[:g.opts.WorstPods]
				}
			}
		}
		if list.Continue == "" {
			break
		}
		opts.Continue = list.Continue
	}
	counts := renderPhases(phases)
	if len(bad) == 0 {
		return ProbeResult{Status: StatusOK, Detail: fmt.Sprintf("%d pods%s, none crash-looping, pending or failed", total, counts)}
	}
	worst := make([]string, len(bad))
	for i, b := range bad {
		worst[i] = b.ref + " " + b.why
	}
	return ProbeResult{Status: StatusWarn, Detail: fmt.Sprintf("%d pods%s; worst: %s", total, counts, strings.Join(worst, ", "))}
}

func classifyPod(p *corev1.Pod) (badPod, bool) {
	ref := p.Namespace + "/" + p.Name
	var restarts int32
	for _, cs := range append(append([]corev1.ContainerStatus(nil), p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		restarts += cs.RestartCount
		if w := cs.State.Waiting; w != nil {
			switch w.Reason {
			case "CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull", "CreateContainerConfigError":
				return badPod{ref: ref, why: fmt.Sprintf("%s (%d restarts)", w.Reason, cs.RestartCount), rank: 0, restarts: cs.RestartCount}, true
			}
		}
	}
	switch p.Status.Phase {
	case corev1.PodFailed:
		why := "Failed"
		if p.Status.Reason != "" {
			why += " (" + p.Status.Reason + ")"
		}
		return badPod{ref: ref, why: why, rank: 1, restarts: restarts}, true
	case corev1.PodPending:
		return badPod{ref: ref, why: "Pending", rank: 2, restarts: restarts}, true
	}
	return badPod{}, false
}

func sortBad(b []badPod) {
	sort.SliceStable(b, func(i, j int) bool {
		if b[i].rank != b[j].rank {
			return b[i].rank < b[j].rank
		}
		if b[i].restarts != b[j].restarts {
			return b[i].restarts > b[j].restarts
		}
		return b[i].ref < b[j].ref
	})
}

func renderPhases(ph map[corev1.PodPhase]int) string {
	if len(ph) == 0 {
		return ""
	}
	keys := make([]string, 0, len(ph))
	for k := range ph {
		keys = append(keys, string(k))
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%d %s", ph[corev1.PodPhase(k)], k)
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

// probeFlux: every Kustomization and HelmRelease Ready; stalled ones by name.
func probeFlux(ctx context.Context, g *gateRun) ProbeResult {
	objs, installed, err := FluxStatus(ctx, g.c.Dynamic)
	if err != nil {
		return kubeErr(g, "cannot read Flux", err)
	}
	// Nothing to be Ready is not "all Ready": without Flux objects the probe
	// has checked nothing, whatever RequireKubernetes says.
	if !installed {
		return notChecked(false, FluxNotInstalled)
	}
	if len(objs) == 0 {
		return notChecked(false, FluxEmpty)
	}
	var stalled, suspended []string
	ks, hr := 0, 0
	for _, o := range objs {
		if o.Kind == "Kustomization" {
			ks++
		} else {
			hr++
		}
		switch {
		case o.Suspended:
			suspended = append(suspended, o.Ref())
		case !o.Ready:
			why := o.Reason
			if o.Message != "" && o.Message != o.Reason {
				why += ": " + o.Message
			}
			stalled = append(stalled, fmt.Sprintf("%s not Ready (%s)", o.Ref(), why))
		}
	}
	counts := fmt.Sprintf("%d Kustomization(s), %d HelmRelease(s)", ks, hr)
	switch {
	case len(stalled) > 0:
		return ProbeResult{Status: StatusFail, Detail: strings.Join(stalled, "; ")}
	case len(suspended) > 0:
		return ProbeResult{Status: StatusWarn, Detail: counts + " Ready; suspended: " + strings.Join(suspended, ", ")}
	}
	return ProbeResult{Status: StatusOK, Detail: counts + ", all Ready"}
}

// probePDBs finds PodDisruptionBudgets that would block draining a node: 0
// disruptions allowed and a running pod they cover on that node. DaemonSet
// and mirror pods are not evicted by a drain, so they do not count.
func probePDBs(ctx context.Context, g *gateRun) ProbeResult {
	names, err := g.kubeNames(ctx)
	if err != nil {
		// Like every Kubernetes probe: not checked unless Kubernetes is required.
		return kubeErr(g, "cannot list nodes", err)
	}
	// DrainNodes are inventory names; pods name their Kubernetes Node.
	drain := map[string]bool{}
	for _, n := range g.inv.Nodes {
		if g.opts.DrainNodes == nil || slices.Contains(g.opts.DrainNodes, n.Name) {
			if kn := names[n.Name]; kn != "" {
				drain[kn] = true
			}
		}
	}
	blocking, total, err := BlockingPDBs(ctx, g.c.Kube, drain)
	if err != nil {
		return kubeErr(g, "cannot check PodDisruptionBudgets", err)
	}
	blocking, moved, err := excuseMovedPDBs(ctx, g, blocking)
	if err != nil {
		return kubeErr(g, "cannot read CloudNativePG", err)
	}
	if len(blocking) > 0 {
		parts := make([]string, len(blocking))
		for i, b := range blocking {
			parts[i] = b.String()
		}
		return ProbeResult{Status: StatusFail, Detail: strings.Join(parts, "; ")}
	}
	detail := fmt.Sprintf("%d budget(s); none blocks draining %d node(s)", total, len(drain))
	if len(moved) > 0 {
		detail += "; " + strings.Join(moved, "; ")
	}
	return ProbeResult{Status: StatusOK, Detail: detail}
}

// kubeNames maps each inventory node to its Kubernetes Node name: the
// resolved identity when the caller has one (identity.Map), else the Node
// whose InternalIP is the inventory address, else the inventory name itself.
func (g *gateRun) kubeNames(ctx context.Context) (map[string]string, error) {
	out := map[string]string{}
	if ids := g.opts.Identity; ids != nil {
		for _, n := range ids.Nodes() {
			out[n.Name] = n.KubeNode
		}
		return out, nil
	}
	list, err := g.c.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	_, byIP := nodeIndex(list.Items)
	for _, n := range g.inv.Nodes {
		if kn := byIP[n.Address]; kn != nil {
			out[n.Name] = kn.Name
		} else {
			// No Node by InternalIP: only pods that name a Node of the
			// inventory's name can be on it.
			out[n.Name] = n.Name
		}
	}
	return out, nil
}

func nodeIndex(items []corev1.Node) (byName, byIP map[string]*corev1.Node) {
	byName, byIP = map[string]*corev1.Node{}, map[string]*corev1.Node{}
	for i := range items {
		n := &items[i]
		byName[n.Name] = n
		for _, a := range n.Status.Addresses {
			if a.Type == corev1.NodeInternalIP {
				byIP[a.Address] = n
			}
		}
	}
	return byName, byIP
}

// BlockingPDB is a budget that would stop a drain.
type BlockingPDB struct {
	Namespace, Name string
	// Pods maps node name → pods the budget covers there.
	Pods map[string][]string
}

func (b BlockingPDB) String() string {
	nodes := make([]string, 0, len(b.Pods))
	for n := range b.Pods {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	var parts []string
	for _, n := range nodes {
		parts = append(parts, fmt.Sprintf("%s on %s", strings.Join(b.Pods[n], ", "), n))
	}
	return fmt.Sprintf("PDB %s/%s allows 0 disruptions and covers %s: draining would block", b.Namespace, b.Name, strings.Join(parts, ", "))
}

// BlockingPDBs returns the budgets with 0 disruptions allowed that cover a
// running, evictable pod on one of the nodes (by Kubernetes node name), and
// the number of budgets seen. The upgrade and node-removal plugins call it
// for the node they are about to drain.
func BlockingPDBs(ctx context.Context, kube kubernetes.Interface, nodes map[string]bool) ([]BlockingPDB, int, error) {
	pdbs, err := kube.PolicyV1().PodDisruptionBudgets(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, 0, fmt.Errorf("cannot list PodDisruptionBudgets: %w", err)
	}
	var out []BlockingPDB
	for i := range pdbs.Items {
		pdb := &pdbs.Items[i]
		if pdb.Status.DisruptionsAllowed > 0 {
			continue
		}
		b, err := coveredPods(ctx, kube, pdb, nodes)
		if err != nil {
			return nil, 0, err
		}
		if len(b.Pods) > 0 {
			out = append(out, b)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Namespace+"/"+out[i].Name < out[j].Namespace+"/"+out[j].Name
	})
	return out, len(pdbs.Items), nil
}

func coveredPods(ctx context.Context, kube kubernetes.Interface, pdb *policyv1.PodDisruptionBudget, nodes map[string]bool) (BlockingPDB, error) {
	b := BlockingPDB{Namespace: pdb.Namespace, Name: pdb.Name, Pods: map[string][]string{}}
	sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	if err != nil {
		return b, fmt.Errorf("PDB %s/%s has an invalid selector: %w", pdb.Namespace, pdb.Name, err)
	}
	if sel.Empty() && pdb.Spec.Selector == nil {
		return b, nil // a nil selector selects nothing
	}
	pods, err := kube.CoreV1().Pods(pdb.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return b, fmt.Errorf("cannot list pods of PDB %s/%s: %w", pdb.Namespace, pdb.Name, err)
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if !nodes[p.Spec.NodeName] || p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil || !k8s.Evictable(p) {
			continue
		}
		b.Pods[p.Spec.NodeName] = append(b.Pods[p.Spec.NodeName], p.Name)
	}
	return b, nil
}
