package storage

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/talosbot/talosbot/plugins/cluster/k8s"
	"github.com/talosbot/talosbot/plugins/sdk"
)

// Rule is the runbook rule a storage refusal cites: R3, "stop if a
// critical workload cannot tolerate a drain".
const Rule = "R3"

// Finding is one thing that would block or hurt a node's drain.
type Finding struct {
	// Kind is "pdb", "longhorn", "cnpg" or "local".
	Kind string
	// Object names the budget, volume, database or pod.
	Object string
	// Detail says what happens, and what the roll does about it.
	Detail string
	// Fix, for a finding that blocks: how the operator unblocks it.
	Fix string
	// Blocks: the roll cannot finish; the plan is refused.
	Blocks bool
}

func (f Finding) String() string {
	mark := "⚠️"
	if f.Blocks {
		mark = "⛔"
	}
	return fmt.Sprintf("%s %s: %s", mark, f.Object, f.Detail)
}

// NodeForecast is a node's findings, in roll order.
type NodeForecast struct {
	Node     string // the Kubernetes Node name
	Findings []Finding
}

// Forecast is the drain forecast of a roll.
type Forecast struct {
	Nodes []NodeForecast
	// Checked says what was read ("Longhorn: 2 volumes; CloudNativePG: 1
	// cluster"), or what was not.
	Checked string
}

// Input is what Build needs besides the storage state: the nodes in roll
// order (Kubernetes Node names), the PodDisruptionBudgets at 0 allowed
// disruptions per node, and the pods with local data per node.
type Input struct {
	Order []string
	PDBs  map[string][]string
	Local map[string][]string
}

// Build forecasts each node's drain, in roll order.
func Build(st State, in Input, s Settings) Forecast {
	f := Forecast{Checked: st.checked()}
	for _, node := range in.Order {
		nf := NodeForecast{Node: node}
		moved := map[string]bool{}
		for key, pod := range st.MovedPDBs(node, s) {
			moved[movedPDBLine(key, pod)] = true
		}
		for _, p := range in.PDBs[node] {
			if moved[p] {
				// CNPG's own budget for the primary: it moves with the
				// primary, which is switched over before the drain.
				nf.Findings = append(nf.Findings, Finding{Kind: "pdb", Object: p,
					Detail: "is CloudNativePG's budget for the primary: it moves with the switchover before the drain and does not block it"})
				continue
			}
			nf.Findings = append(nf.Findings, Finding{Kind: "pdb", Object: p,
				Detail: "allows 0 disruptions: the drain waits for it up to the drain timeout"})
		}
		for _, v := range st.Volumes {
			if fd, ok := volumeFinding(v, node, s); ok {
				nf.Findings = append(nf.Findings, fd)
			}
		}
		for _, p := range st.Postgres {
			if fd, ok := postgresFinding(p, node, s); ok {
				nf.Findings = append(nf.Findings, fd)
			}
		}
		for _, l := range in.Local[node] {
			nf.Findings = append(nf.Findings, Finding{Kind: "local", Object: l,
				Detail: "uses emptyDir or a local volume: its data is lost when the pod is evicted"})
		}
		f.Nodes = append(f.Nodes, nf)
	}
	return f
}

func volumeFinding(v Volume, node string, s Settings) (Finding, bool) {
	if v.State != volumeAttached || !v.HasReplicaOn(node) {
		return Finding{}, false
	}
	name := "Longhorn volume " + v.Label()
	healthy := v.HealthyOn()
	switch {
	case v.Robustness == robustFaulted || len(healthy) == 0:
		return Finding{Kind: "longhorn", Object: name, Blocks: true,
			Detail: "is faulted: no healthy replica left",
			Fix:    "recover the volume in Longhorn (salvage or restore from backup) before the roll"}, true
	case v.Want <= 1 && v.OnlyHealthyOn(node):
		return Finding{Kind: "longhorn", Object: name, Blocks: true,
			Detail: fmt.Sprintf("has its only replica on %s (numberOfReplicas %d): the drain takes it offline", node, v.Want),
			Fix:    "raise the volume's numberOfReplicas to 2 or more and let it rebuild, or detach it for the roll"}, true
	case v.OnlyHealthyOn(node) && s.LastReplica == LastReplicaRefuse:
		return Finding{Kind: "longhorn", Object: name, Blocks: true,
			Detail: fmt.Sprintf("has its last healthy replica on %s (%d of %d healthy)", node, len(healthy), v.Want),
			Fix:    "wait until Longhorn has rebuilt a replica on another node, or set the plugin's storage.last_replica to wait"}, true
	case v.OnlyHealthyOn(node):
		return Finding{Kind: "longhorn", Object: name,
			Detail: fmt.Sprintf("has its last healthy replica on %s: the roll waits for a rebuild elsewhere first (up to %s)", node, s.RebuildWait)}, true
	default:
		return Finding{Kind: "longhorn", Object: name,
			Detail: fmt.Sprintf("has a replica on %s (%d of %d healthy): afterwards the roll waits until it is healthy again (up to %s)",
				node, len(healthy), v.Want, s.RebuildWait)}, true
	}
}

func postgresFinding(p Postgres, node string, s Settings) (Finding, bool) {
	if p.PrimaryNode() != node {
		return Finding{}, false
	}
	name := "CloudNativePG " + p.Key()
	cand := p.Candidate(node)
	switch {
	case cand == "":
		return Finding{Kind: "cnpg", Object: name, Blocks: true,
			Detail: fmt.Sprintf("has its primary %s on %s and no ready replica on another node to switch over to", p.CurrentPrimary, node),
			Fix:    "add an instance (spec.instances ≥ 2) and wait until it is ready, or accept the outage and drain by hand"}, true
	case s.Switchover == SwitchoverRefuse:
		return Finding{Kind: "cnpg", Object: name, Blocks: true,
			Detail: fmt.Sprintf("has its primary %s on %s", p.CurrentPrimary, node),
			Fix:    fmt.Sprintf("switch it over first (kubectl cnpg promote %s %s -n %s), or set the plugin's storage.switchover to switchover", p.Name, cand, p.Namespace)}, true
	default:
		return Finding{Kind: "cnpg", Object: name,
			Detail: fmt.Sprintf("has its primary %s on %s: switched over to %s before the drain", p.CurrentPrimary, node, cand)}, true
	}
}

func (st State) checked() string {
	var parts []string
	if st.LonghornInstalled {
		parts = append(parts, fmt.Sprintf("Longhorn: %d volume(s)", len(st.Volumes)))
	}
	if st.CNPGInstalled {
		parts = append(parts, fmt.Sprintf("CloudNativePG: %d cluster(s)", len(st.Postgres)))
	}
	if len(parts) == 0 {
		return "neither Longhorn nor CloudNativePG is installed (or enabled): not checked"
	}
	return strings.Join(parts, "; ")
}

// Refusal is the R3 refusal of a forecast that cannot finish, naming the
// first node, object and fix; nil when nothing blocks.
func (f Forecast) Refusal() error {
	var reasons, fixes []string
	for _, n := range f.Nodes {
		for _, fd := range n.Findings {
			if fd.Blocks {
				reasons = append(reasons, fmt.Sprintf("draining %s: %s %s", n.Node, fd.Object, fd.Detail))
				fixes = append(fixes, fd.Fix)
			}
		}
	}
	if len(reasons) == 0 {
		return nil
	}
	return sdk.Refuse(Rule, "a critical workload cannot tolerate the drain: "+strings.Join(reasons, "; "), strings.Join(fixes, "; "))
}

// Lines renders the forecast for the plan and the approval card: one line
// per node with findings, "nothing" when no node has any.
func (f Forecast) Lines() []string {
	var out []string
	for _, n := range f.Nodes {
		if len(n.Findings) == 0 {
			continue
		}
		parts := make([]string, len(n.Findings))
		for i, fd := range n.Findings {
			parts[i] = fd.String()
		}
		out = append(out, fmt.Sprintf("drain %s: %s", n.Node, strings.Join(parts, "; ")))
	}
	if len(out) == 0 {
		out = append(out, "drain forecast: nothing blocks or loses data ("+f.Checked+")")
	}
	return out
}

// hasFindings: some node's drain would be blocked or hurt.
func (f Forecast) hasFindings() bool {
	for _, n := range f.Nodes {
		if len(n.Findings) > 0 {
			return true
		}
	}
	return false
}

// AddTo puts the forecast on a plan, as every plugin that drains shows
// it: its lines as warnings when a node has findings (the card shows
// them, Details in full), and the "drain forecast" precondition saying
// what was read.
func (f Forecast) AddTo(plan *sdk.OperationPlan) {
	if f.hasFindings() {
		plan.Warnings = append(plan.Warnings, f.Lines()...)
	}
	plan.Preconditions = append(plan.Preconditions, &sdk.Precondition{Name: "drain forecast", OK: true, Rule: Rule, Detail: f.Checked})
}

// LocalData lists, per node (Kubernetes names), the evictable pods with an
// emptyDir volume or a PVC bound to a local or hostPath PersistentVolume:
// their data does not survive the drain.
func LocalData(ctx context.Context, kube kubernetes.Interface, nodes map[string]bool) (map[string][]string, error) {
	out := map[string][]string{}
	if kube == nil {
		return out, nil
	}
	pods, err := kube.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list pods: %w", err)
	}
	pvs, err := kube.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list persistent volumes: %w", err)
	}
	local := map[string]bool{} // ns/claim bound to a local PV
	for _, pv := range pvs.Items {
		if (pv.Spec.Local != nil || pv.Spec.HostPath != nil) && pv.Spec.ClaimRef != nil {
			local[pv.Spec.ClaimRef.Namespace+"/"+pv.Spec.ClaimRef.Name] = true
		}
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if !nodes[p.Spec.NodeName] || !k8s.Evictable(p) || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		for _, v := range p.Spec.Volumes {
			if v.EmptyDir != nil || (v.PersistentVolumeClaim != nil && local[p.Namespace+"/"+v.PersistentVolumeClaim.ClaimName]) {
				out[p.Spec.NodeName] = append(out[p.Spec.NodeName], "pod "+p.Namespace+"/"+p.Name)
				break
			}
		}
	}
	for n := range out {
		sort.Strings(out[n])
	}
	return out, nil
}

// Plan reads the cluster and forecasts the drains of order (Kubernetes
// Node names, in roll order); pdbs are the budgets at 0 allowed
// disruptions per node (gate.PDBsByNode). installed says whether Longhorn
// or CNPG is there. The error is the forecast's R3 refusal, or a read error.
func Plan(ctx context.Context, kube kubernetes.Interface, dyn dynamic.Interface, order []string, pdbs map[string][]string, s Settings) (Forecast, bool, error) {
	st, err := Read(ctx, kube, dyn, s)
	if err != nil {
		return Forecast{}, false, err
	}
	installed := st.LonghornInstalled || st.CNPGInstalled
	nodes := map[string]bool{}
	for _, n := range order {
		nodes[n] = true
	}
	in := Input{Order: order, PDBs: pdbs}
	if in.Local, err = LocalData(ctx, kube, nodes); err != nil {
		return Forecast{}, installed, err
	}
	f := Build(st, in, s)
	return f, installed, f.Refusal()
}
