package k8supgrade

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/talosbot/talosbot/plugins/cluster"
	lifecyclev1 "github.com/talosbot/talosbot/plugins/proto/lifecycle/v1"
	"github.com/talosbot/talosbot/plugins/sdk"
)

// Step ids and prefixes of the plan.
const (
	stepControlPlane = "controlplane/" // + node
	stepKubeProxy    = "kube-proxy"
	stepKubelet      = "kubelet/" // + node
	stepDriftNote    = "drift-note"
	gateBefore       = "gate-before/"
	gateAfter        = "gate-after/"
)

// differences says what this plugin does not do that `talosctl upgrade-k8s` does. It goes
// into the plan warnings, the chat result and docs/K8S-UPGRADE.md.
var differences = []string{
	"bootstrap manifests are not synced (CoreDNS, the CNI, RBAC and other manifests Talos rendered at bootstrap keep their old versions; run `talosctl upgrade-k8s` with the same version afterwards or update them through GitOps)",
	"images are not pre-pulled on the nodes before the switch",
	"the live cluster is not scanned for deprecated API usage (only a link to the deprecation guide is given)",
	"the kube-proxy DaemonSet's image is patched directly instead of through the manifest sync",
}

// assessment is the read-only half of the operation: what runs, what the target is and
// whether the rules allow it. Plan reports it; Run recomputes it before changing anything.
type assessment struct {
	cluster  string
	target   string
	dryRun   bool
	inv      cluster.Inventory
	versions *cluster.K8sVersions
	talos    []cluster.TalosSupport
	refusal  *lifecyclev1.Refusal
	warnings []string
	// snapshotDir is settings.snapshot_dir ("" refuses a real run, R12).
	snapshotDir string
}

// refuse is sdk.Refusal in protocol form, for the assessment's refusal.
func refuse(rule, reason, fix string) *lifecyclev1.Refusal {
	return sdk.Refuse(rule, reason, fix).Proto()
}

// assess reads the cluster and applies rules R20 and R21. A nil error with a refusal means
// the cluster answered and the rules say no.
func assess(ctx context.Context, c *cluster.Clients, inv cluster.Inventory, req *lifecyclev1.OperationRequest, target string) (*assessment, error) {
	a := &assessment{cluster: inv.Name, target: target, inv: inv, dryRun: req.GetArgs()["dry-run"] == "true",
		snapshotDir: req.GetSettings().GetSnapshotDir()}
	v, err := cluster.ReadK8sVersions(ctx, c, inv)
	if err != nil {
		return nil, err
	}
	a.versions = v
	if rule, reason, fix := cluster.K8sPathRefusal(v, target); rule != "" {
		a.refusal = refuse(rule, reason, fix)
		return a, nil
	}
	all, bad, err := cluster.CheckTalosSupportsK8s(ctx, c, inv, target)
	if err != nil {
		return nil, err
	}
	a.talos = all
	if len(bad) > 0 {
		a.refusal = refuse("R20", fmt.Sprintf("the running Talos does not support Kubernetes %s on %d node(s): %s",
			target, len(bad), cluster.DescribeTalosSupport(bad)),
			"upgrade Talos first (/talos upgrade talos …, a separate operation: R11) to a version whose compatibility covers "+target+", then run this again")
		return a, nil
	}
	lo := v.Lowest()
	_, t, _ := cluster.ParseK8sVersion(target)
	_, l, _ := cluster.ParseK8sVersion(lo.Version)
	if t.Minor > l.Minor {
		a.warnings = append(a.warnings, fmt.Sprintf("Kubernetes v%d.%d may remove deprecated APIs: check manifests, Helm charts and Flux sources for removed API versions before upgrading: %s",
			t.Major, t.Minor, cluster.K8sDeprecationGuide))
	}
	if err := cluster.CheckSnapshotDir(a.snapshotDir, "the Kubernetes upgrade (a --dry-run works without it)"); err != nil && !a.dryRun {
		re, _ := sdk.AsRefusal(err)
		a.refusal = re.Proto()
		return a, nil
	}
	for _, d := range differences {
		a.warnings = append(a.warnings, "not done (unlike talosctl upgrade-k8s): "+d)
	}
	return a, nil
}

// cpDone reports whether a control plane's static pods already run the target.
func (a *assessment) cpDone(node string) bool {
	for _, comp := range cluster.StaticPodComponents() {
		if !sameVersion(a.versions.StaticPods[node][comp], a.target) {
			return false
		}
	}
	return true
}

func (a *assessment) kubeletDone(node string) bool {
	return sameVersion(a.versions.Kubelets[node], a.target)
}

func sameVersion(a, b string) bool {
	return a != "" && strings.TrimPrefix(a, "v") == strings.TrimPrefix(b, "v")
}

// kubeletOrder is control planes first, then workers (inventory order within each).
func (a *assessment) kubeletOrder() []cluster.Node {
	return append(a.inv.ControlPlanes(), a.inv.Workers()...)
}

// plan renders the assessment as the operation plan (which is also the dry run).
func (a *assessment) plan() *lifecyclev1.OperationPlan {
	lo := a.versions.Lowest()
	p := &lifecyclev1.OperationPlan{Target: a.target, Refusal: a.refusal, Warnings: a.warnings}
	mode := ""
	if a.dryRun {
		mode = " (dry run: nothing will be changed)"
	}
	p.Summary = fmt.Sprintf("Kubernetes upgrade of %s from %s to %s%s: snapshot and gate, %d control plane(s) one at a time, kube-proxy, %d kubelet(s), gate",
		a.cluster, lo.Version, a.target, mode, len(a.inv.ControlPlanes()), len(a.inv.Nodes))
	for _, s := range cluster.SnapshotSteps() {
		p.Steps = append(p.Steps, &lifecyclev1.Step{Id: s[0], Title: "etcd snapshot: " + s[1], Kind: "snapshot"})
	}
	for _, pr := range cluster.Probes() {
		p.Steps = append(p.Steps, &lifecyclev1.Step{Id: gateBefore + pr.Name, Title: "gate before: " + pr.Title, Kind: "gate"})
	}
	for _, cp := range a.inv.ControlPlanes() {
		from := a.versions.StaticPods[cp.Name][cluster.ComponentAPIServer]
		title := fmt.Sprintf("%s: apiserver, controller-manager, scheduler %s → %s (NO_REBOOT), wait for static pods Ready", cp.Name, orUnknown(from), a.target)
		if a.cpDone(cp.Name) {
			title = cp.Name + ": control plane already at " + a.target + " (skip)"
		}
		p.Steps = append(p.Steps, &lifecyclev1.Step{Id: stepControlPlane + cp.Name, Title: title, Node: cp.Name,
			FromVersion: from, ToVersion: a.target, Kind: "upgrade"})
	}
	p.Steps = append(p.Steps, &lifecyclev1.Step{Id: stepKubeProxy, Title: "kube-proxy image → " + a.target + " (machine config and DaemonSet, where used)",
		ToVersion: a.target, Kind: "upgrade"})
	for _, n := range a.kubeletOrder() {
		from := a.versions.Kubelets[n.Name]
		title := fmt.Sprintf("kubelet on %s %s → %s", n.Name, orUnknown(from), a.target)
		if a.kubeletDone(n.Name) {
			title = "kubelet on " + n.Name + " already at " + a.target + " (skip)"
		}
		p.Steps = append(p.Steps, &lifecyclev1.Step{Id: stepKubelet + n.Name, Title: title, Node: n.Name,
			FromVersion: from, ToVersion: a.target, Kind: "upgrade"})
	}
	for _, pr := range cluster.Probes() {
		p.Steps = append(p.Steps, &lifecyclev1.Step{Id: gateAfter + pr.Name, Title: "gate after: " + pr.Title, Kind: "gate"})
	}
	p.Steps = append(p.Steps, &lifecyclev1.Step{Id: stepDriftNote, Title: fmt.Sprintf("Terraform: talos_kubernetes_version = %q", a.target), Kind: "note"})
	if a.refusal == nil {
		var pre []*lifecyclev1.Precondition
		pre = append(pre, &lifecyclev1.Precondition{Name: "version step", Ok: true, Rule: "R20",
			Detail: fmt.Sprintf("%s → %s (lowest running: %s)", lo.Version, a.target, lo.Where)})
		pre = append(pre, &lifecyclev1.Precondition{Name: "not a downgrade", Ok: true, Rule: "R21",
			Detail: "highest running: " + a.versions.Highest().Version + " (" + a.versions.Highest().Where + ")"})
		for _, t := range a.talos {
			pre = append(pre, &lifecyclev1.Precondition{Name: "Talos supports " + a.target + " on " + t.Node, Ok: true, Rule: "R20", Detail: "Talos " + t.Talos})
		}
		p.Preconditions = pre
	}
	p.CanonicalInputs = a.canonical()
	return p
}

// canonical is everything that changes what Run does: target, mode, nodes and what they run.
func (a *assessment) canonical() []byte {
	c := sdk.CanonicalFor(Command, a.cluster).
		Str("target", a.target).Bool("dry-run", a.dryRun)
	for i, n := range a.inv.Nodes {
		c.Sub("node", i).Str("name", n.Name).Str("address", n.Address).Str("role", n.Role).Str("kubelet", a.versions.Kubelets[n.Name])
	}
	cps := make([]string, 0, len(a.versions.StaticPods))
	for cp := range a.versions.StaticPods {
		cps = append(cps, cp)
	}
	sort.Strings(cps)
	for i, cp := range cps {
		s := c.Sub("static", i).Str("node", cp)
		for _, comp := range cluster.StaticPodComponents() {
			s.Str(comp, a.versions.StaticPods[cp][comp])
		}
	}
	for i, t := range a.talos {
		c.Sub("talos", i).Str("node", t.Node).Str("version", t.Talos)
	}
	if a.refusal != nil {
		c.Str("refusal.rule", a.refusal.GetRule()).Str("refusal.reason", a.refusal.GetReason())
	}
	return c.Bytes()
}

// dryRunLines is the dry run's chat output: what would change, and what is not done.
func (a *assessment) dryRunLines() []string {
	var out []string
	for _, cp := range a.inv.ControlPlanes() {
		if a.cpDone(cp.Name) {
			out = append(out, "⏭️ "+cp.Name+": control plane already at "+a.target)
			continue
		}
		out = append(out, fmt.Sprintf("🔜 %s: control plane %s → %s", cp.Name,
			orUnknown(a.versions.StaticPods[cp.Name][cluster.ComponentAPIServer]), a.target))
	}
	for _, n := range a.kubeletOrder() {
		if a.kubeletDone(n.Name) {
			out = append(out, "⏭️ kubelet on "+n.Name+" already at "+a.target)
			continue
		}
		out = append(out, fmt.Sprintf("🔜 kubelet on %s %s → %s", n.Name, orUnknown(a.versions.Kubelets[n.Name]), a.target))
	}
	for _, t := range a.talos {
		out = append(out, fmt.Sprintf("✅ Talos %s on %s supports Kubernetes %s (R20)", t.Talos, t.Node, a.target))
	}
	for _, w := range a.warnings {
		out = append(out, "⚠️ "+w)
	}
	return out
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
