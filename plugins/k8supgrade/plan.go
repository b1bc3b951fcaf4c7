package k8supgrade

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/talosbot/talosbot/plugins/cluster"
	"github.com/talosbot/talosbot/plugins/cluster/etcd"
	"github.com/talosbot/talosbot/plugins/cluster/gate"
	"github.com/talosbot/talosbot/plugins/cluster/identity"
	"github.com/talosbot/talosbot/plugins/cluster/k8s"
	"github.com/talosbot/talosbot/plugins/cluster/k8s/preflight"
	"github.com/talosbot/talosbot/plugins/cluster/planguard"
	"github.com/talosbot/talosbot/plugins/sdk"
)

// Step ids and prefixes of the plan. A static pod step is "<component>/<node>", e.g.
// "kube-apiserver/cp-1".
const (
	stepPrePull   = "pre-pull"
	stepKubeProxy = "kube-proxy"
	stepKubelet   = "kubelet/" // + node
	stepManifests = "bootstrap-manifests"
	stepDriftNote = "drift-note"
	gateBefore    = "gate-before/"
	gateAfter     = "gate-after/"
)

func stepStaticPod(component, node string) string { return component + "/" + node }

// differences says what this plugin does not do that `talosctl upgrade-k8s` does. It goes
// into the plan warnings, the chat result and docs/K8S-UPGRADE.md.
func differences() []string {
	return []string{
		"the kube-proxy DaemonSet's image is patched directly before the kubelets, not only through the manifest sync after them",
	}
}

// assessment is the read-only half of the operation: what runs, what the target is and
// whether the rules allow it. Plan reports it; Run recomputes it before changing anything.
type assessment struct {
	cluster  string
	target   string
	dryRun   bool
	inv      cluster.Inventory
	versions *k8s.Versions
	talos    []k8s.TalosSupport
	// ids are the names every inventory node goes by on the cluster.
	ids *identity.Map
	// pre is what the pre-flight checks read and found (nil when a rule refused first).
	pre      *preflightResult
	refusal  *sdk.Refusal
	warnings []string
	// snapshotDir is settings.snapshot_dir ("" refuses a real run, R12).
	snapshotDir string
	// planGuard: plugins.k8supgrade.plan_before_upgrade lists the cluster:
	// the R5 Terraform plan guard runs before the upgrade.
	planGuard bool
	// hop places the assessment in its path (hops.go): 1/1 for one minor.
	hop hopSpec
	// manifests is the bootstrap manifest sync's dry run as planned (manifests.go); nil when
	// it could not be computed (a warning says why).
	manifests []k8s.ManifestChange
}

// assess reads the cluster and applies rules R20 and R21. A nil error with a refusal means
// the cluster answered and the rules say no.
//
// h is the hop (one minor: single(target)); ids and v, when set, are the names resolved
// and the versions read (or, for a later hop of the plan, assumed) already.
func assess(ctx context.Context, c *cluster.Clients, inv cluster.Inventory, req *sdk.OperationRequest, h hopSpec,
	ids *identity.Map, v *k8s.Versions, table preflight.Table) (*assessment, error) {
	target := h.target
	cfg, err := decodeConfig(req.Config)
	if err != nil {
		return nil, err
	}
	a := &assessment{cluster: inv.Name, target: target, inv: inv, dryRun: req.Args[sdk.ArgDryRun] == "true",
		snapshotDir: req.Evidence.Backups.GetDir(), planGuard: planguard.Wanted(req.Cluster.Name, cfg.PlanBeforeUpgrade), hop: h}
	// Names are resolved, never assumed: a mirror pod and a Node are found by the Node name
	// the node's kubelet registered, which need not be its inventory name.
	a.ids = ids
	if a.ids == nil {
		a.ids = identity.Resolve(ctx, c, inv, identity.Options{})
	}
	if err := a.ids.Require(identity.Talos | identity.Kubernetes); err != nil {
		a.versions = &k8s.Versions{StaticPods: map[string]map[string]string{}, Kubelets: map[string]string{}}
		re, _ := sdk.AsRefusal(err)
		a.refusal = re
		return a, nil
	}
	if v == nil {
		var err error
		if v, err = k8s.ReadVersions(ctx, c, a.ids); err != nil {
			return nil, err
		}
	}
	a.versions = v
	if rule, reason, fix := versionRule(v, h); rule != "" {
		a.refusal = sdk.Refuse(rule, reason, fix)
		return a, nil
	}
	all, bad, err := k8s.CheckTalosSupport(ctx, c, inv, target)
	if err != nil {
		return nil, err
	}
	a.talos = all
	if len(bad) > 0 {
		a.refusal = sdk.Refuse("R20", fmt.Sprintf("the running Talos does not support Kubernetes %s on %d node(s): %s",
			target, len(bad), k8s.DescribeTalosSupport(bad)),
			"upgrade Talos first (/talos upgrade talos …, a separate operation: R11) to a version whose compatibility covers "+target+", then run this again")
		return a, nil
	}
	lo := v.Lowest()
	// The pre-flight checks of talosctl upgrade-k8s: nothing the target removed may still be
	// in use, or a component would not start after its switch.
	pre, err := runPreflight(ctx, c, inv, lo.Version, target, table)
	if err != nil {
		return nil, fmt.Errorf("pre-flight checks: %w", err)
	}
	a.pre = pre
	if len(pre.findings) > 0 { // rule:R20-preflight
		reason, fix := pre.refusal(target)
		a.refusal = sdk.Refuse("R20", reason, fix)
		return a, nil
	}
	_, t, _ := k8s.ParseVersion(target)
	_, l, _ := k8s.ParseVersion(lo.Version)
	if t.Minor > l.Minor {
		a.warnings = append(a.warnings, fmt.Sprintf("Kubernetes v%d.%d may remove deprecated APIs: check manifests, Helm charts and Flux sources for removed API versions before upgrading: %s",
			t.Major, t.Minor, k8s.DeprecationGuide))
	}
	if err := cluster.CheckSnapshotDir(a.snapshotDir, "the Kubernetes upgrade (a --dry-run works without it)"); err != nil && !a.dryRun {
		re, _ := sdk.AsRefusal(err)
		a.refusal = re
		return a, nil
	}
	a.planManifests(ctx, c)
	for _, d := range differences() {
		a.warnings = append(a.warnings, "not done (unlike talosctl upgrade-k8s): "+d)
	}
	return a, nil
}

// staticPodDone reports whether a control plane's component already runs the target (or,
// in a hop before the last, is past it).
func (a *assessment) staticPodDone(node, component string) bool {
	return a.done(a.versions.StaticPods[node][component])
}

func (a *assessment) kubeletDone(node string) bool {
	return a.done(a.versions.Kubelets[node])
}

// done reports whether a component at version v needs nothing in this hop: it runs the
// target, or, in a hop before the last, a newer version (a component an earlier run or the
// operator took further is never taken back).
func (a *assessment) done(v string) bool {
	if sameVersion(v, a.target) {
		return true
	}
	if a.hop.last() || v == "" {
		return false
	}
	_, cur, err1 := k8s.ParseVersion(v)
	_, t, err2 := k8s.ParseVersion(a.target)
	return err1 == nil && err2 == nil && cur.GT(t)
}

func sameVersion(a, b string) bool {
	return a != "" && strings.TrimPrefix(a, "v") == strings.TrimPrefix(b, "v")
}

// kubeletOrder is control planes first, then workers (inventory order within each).
func (a *assessment) kubeletOrder() []cluster.Node {
	return append(a.inv.ControlPlanes(), a.inv.Workers()...)
}

// plan renders the assessment as the operation plan (which is also the dry run).
func (a *assessment) plan() *sdk.OperationPlan {
	lo := a.versions.Lowest()
	p := &sdk.OperationPlan{Target: a.target, Refusal: a.refusal, Warnings: a.warnings}
	mode := ""
	if a.dryRun {
		mode = " (dry run: nothing will be changed)"
	}
	p.Summary = fmt.Sprintf("Kubernetes upgrade of %s from %s to %s%s: snapshot and gate, pre-pull, then component by component across the %d control plane(s) "+
		"(kube-apiserver, kube-controller-manager, kube-scheduler), kube-proxy, %d kubelet(s) control planes first, gate",
		a.cluster, lo.Version, a.target, mode, len(a.inv.ControlPlanes()), len(a.inv.Nodes))
	if a.planGuard {
		p.Steps = append(p.Steps, planguard.Step())
	}
	p.Steps = append(p.Steps, a.steps()...)
	p.Steps = append(p.Steps, driftStep(a.target))
	if a.refusal == nil {
		p.Preconditions = a.preconditions()
	}
	p.CanonicalInputs = a.canonical()
	return p
}

// driftStep is the last step of the operation: the Terraform variable to set.
func driftStep(target string) *sdk.Step {
	return &sdk.Step{ID: stepDriftNote, Title: fmt.Sprintf("Terraform: talos_kubernetes_version = %q", target), Kind: "note"}
}

// steps are the hop's steps, in talosctl upgrade-k8s's order: snapshot, gate, pre-pull, the
// static pods component by component, kube-proxy, the kubelets, gate. A hop before the last
// has its ids prefixed with its version (hops.go).
func (a *assessment) steps() []*sdk.Step {
	px, tp := a.hop.prefix, a.hop.title()
	var out []*sdk.Step
	for _, s := range etcd.SnapshotSteps() {
		out = append(out, &sdk.Step{ID: px + s[0], Title: tp + "etcd snapshot: " + s[1], Kind: "snapshot"})
	}
	for _, pr := range gate.Probes() {
		out = append(out, &sdk.Step{ID: px + gateBefore + pr.Name, Title: tp + "gate before: " + pr.Title, Kind: "gate"})
	}
	out = append(out, &sdk.Step{ID: px + stepPrePull, Kind: "prepare",
		Title: tp + "pre-pull the " + a.target + " images: control-plane images on every control plane, the kubelet image on every node (nothing changes if a pull fails)"})
	for _, comp := range k8s.StaticPodComponents() {
		for _, cp := range a.inv.ControlPlanes() {
			from := a.versions.StaticPods[cp.Name][comp]
			title := fmt.Sprintf("%s on %s %s → %s (NO_REBOOT), wait for its StaticPodStatus Ready", comp, cp.Name, orUnknown(from), a.target)
			if a.staticPodDone(cp.Name, comp) {
				title = comp + " on " + cp.Name + " already at " + orUnknown(from) + " (skip)"
			}
			out = append(out, &sdk.Step{ID: px + stepStaticPod(comp, cp.Name), Title: tp + title, Node: cp.Name,
				FromVersion: from, ToVersion: a.target, Kind: "upgrade"})
		}
	}
	out = append(out, &sdk.Step{ID: px + stepKubeProxy, Title: tp + "kube-proxy image → " + a.target + " (machine config and DaemonSet, where used)",
		ToVersion: a.target, Kind: "upgrade"})
	for _, n := range a.kubeletOrder() {
		from := a.versions.Kubelets[n.Name]
		title := fmt.Sprintf("kubelet on %s %s → %s%s, wait for the Node Ready at it", n.Name, orUnknown(from), a.target, a.kubeletImageNote(n.Name))
		if a.kubeletDone(n.Name) {
			title = "kubelet on " + n.Name + " already at " + orUnknown(from) + " (skip)"
		}
		out = append(out, &sdk.Step{ID: px + stepKubelet + n.Name, Title: tp + title, Node: n.Name,
			FromVersion: from, ToVersion: a.target, Kind: "upgrade"})
	}
	out = append(out, &sdk.Step{ID: px + stepManifests, Title: tp + a.manifestsTitle(), Kind: "upgrade"})
	for _, pr := range gate.Probes() {
		out = append(out, &sdk.Step{ID: px + gateAfter + pr.Name, Title: tp + "gate after: " + pr.Title, Kind: "gate"})
	}
	return out
}

// preconditions are what the hop's checks found: its version step, Talos support on every
// node and its pre-flight checks.
func (a *assessment) preconditions() []*sdk.Precondition {
	lo, tp := a.versions.Lowest(), a.hop.title()
	var pre []*sdk.Precondition
	pre = append(pre, &sdk.Precondition{Name: tp + "version step", OK: true, Rule: "R20",
		Detail: fmt.Sprintf("%s → %s (lowest running: %s)", lo.Version, a.target, lo.Where)})
	if a.hop.hop == 1 {
		pre = append(pre, &sdk.Precondition{Name: "not a downgrade", OK: true, Rule: "R21",
			Detail: "highest running: " + a.versions.Highest().Version + " (" + a.versions.Highest().Where + ")"})
	}
	for _, t := range a.talos {
		pre = append(pre, &sdk.Precondition{Name: tp + "Talos supports " + a.target + " on " + t.Node, OK: true, Rule: "R20", Detail: "Talos " + t.Talos})
	}
	pre = append(pre, &sdk.Precondition{Name: tp + "pre-flight checks (talosctl upgrade-k8s)", OK: true, Rule: "R20",
		Detail: a.pre.detail(len(a.inv.Nodes), lo.Version, a.target)})
	return pre
}

// canonical is everything that changes what Run does: target, mode, nodes and what they run.
func (a *assessment) canonical() []byte {
	c := sdk.CanonicalFor(Command, a.cluster).
		Str("target", a.target).Bool(sdk.ArgDryRun, a.dryRun)
	for i, n := range a.inv.Nodes {
		s := c.Sub("node", i).Str("name", n.Name).Str("address", n.Address).Str("role", n.Role).Str("kubelet", a.versions.Kubelets[n.Name]).
			Str("kube-node", a.ids.KubeNode(n.Name))
		if a.pre != nil {
			s.Str("kubelet-image", a.pre.kubelets[n.Name])
		}
	}
	cps := make([]string, 0, len(a.versions.StaticPods))
	for cp := range a.versions.StaticPods {
		cps = append(cps, cp)
	}
	sort.Strings(cps)
	for i, cp := range cps {
		s := c.Sub("static", i).Str("node", cp)
		for _, comp := range k8s.StaticPodComponents() {
			s.Str(comp, a.versions.StaticPods[cp][comp])
		}
	}
	for i, t := range a.talos {
		c.Sub("talos", i).Str("node", t.Node).Str("version", t.Talos)
	}
	if a.refusal != nil {
		c.Str("refusal.rule", a.refusal.Rule).Str("refusal.reason", a.refusal.Reason)
	}
	return c.Bytes()
}

// dryRunLines is the dry run's chat output: what would change, and what is not done.
func (a *assessment) dryRunLines() []string {
	var out []string
	for _, comp := range k8s.StaticPodComponents() {
		for _, cp := range a.inv.ControlPlanes() {
			if a.staticPodDone(cp.Name, comp) {
				out = append(out, "⏭️ "+comp+" on "+cp.Name+" already at "+a.target)
				continue
			}
			out = append(out, fmt.Sprintf("🔜 %s on %s %s → %s", comp, cp.Name, orUnknown(a.versions.StaticPods[cp.Name][comp]), a.target))
		}
	}
	for _, n := range a.kubeletOrder() {
		if a.kubeletDone(n.Name) {
			out = append(out, "⏭️ kubelet on "+n.Name+" already at "+a.target)
			continue
		}
		out = append(out, fmt.Sprintf("🔜 kubelet on %s %s → %s%s", n.Name, orUnknown(a.versions.Kubelets[n.Name]), a.target, a.kubeletImageNote(n.Name)))
	}
	out = append(out, a.manifestLines()...)
	out = append(out, "✅ pre-flight checks: "+a.pre.detail(len(a.inv.Nodes), a.versions.Lowest().Version, a.target))
	for _, t := range a.talos {
		out = append(out, fmt.Sprintf("✅ Talos %s on %s supports Kubernetes %s (R20)", t.Talos, t.Node, a.target))
	}
	for _, w := range a.warnings {
		out = append(out, "⚠️ "+w)
	}
	return out
}

// kubeletImageNote is " (<image>)": the kubelet image the node gets (same repository and
// variant), or "" when the pre-flight checks did not run.
func (a *assessment) kubeletImageNote(node string) string {
	if a.pre == nil || a.pre.kubelets[node] == "" {
		return ""
	}
	return " (" + k8s.KubeletTarget(a.pre.kubelets[node], a.target) + ")"
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
