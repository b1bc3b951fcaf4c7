package k8supgrade

// Multi-hop Kubernetes upgrades (docs/RELEASES.md "Multi-hop upgrades"): a target two or
// more minors above the lowest running component is upgraded one minor at a time — the
// newest configured patch of each minor in between (releases.PlanKubernetes), then the
// target — under one approval. Every hop is a full upgrade in talosctl upgrade-k8s's order
// (snapshot, gate, pre-pull, static pods, kube-proxy, kubelets, gate) with its own Talos
// support and pre-flight checks, all shown in the plan.
//
// Step ids: the hops before the last start with their version ("v1.35.2/kubelet/cp-1");
// the last hop keeps the ids of a one-minor upgrade. A resumed run plans the path again
// from what runs, which gives the remaining hops of the same path (a finished hop drops
// out, a component already past a hop's version is skipped in it), so its step ids are
// those of the approved plan.

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/talosbot/talosbot/internal/releases"
	"github.com/talosbot/talosbot/internal/releases/compat"
	"github.com/talosbot/talosbot/plugins/cluster"
	"github.com/talosbot/talosbot/plugins/cluster/identity"
	"github.com/talosbot/talosbot/plugins/cluster/k8s"
	"github.com/talosbot/talosbot/plugins/cluster/k8s/preflight"
	"github.com/talosbot/talosbot/plugins/cluster/planguard"
	"github.com/talosbot/talosbot/plugins/sdk"
	"github.com/talosbot/talosbot/plugins/sdk/versions"
)

// hopSpec is one hop of a path: its target, the path's final target, its place, and the
// prefix of its step ids ("" for the last hop).
type hopSpec struct {
	target, final string
	hop, hops     int
	prefix        string
}

// single is the one hop of a one-minor upgrade.
func single(target string) hopSpec { return hopSpec{target: target, final: target, hop: 1, hops: 1} }

func (h hopSpec) last() bool { return h.hop == h.hops }

// title starts the step titles of a hop of several.
func (h hopSpec) title() string {
	if h.hops <= 1 {
		return ""
	}
	return fmt.Sprintf("hop %d/%d → %s: ", h.hop, h.hops, h.target)
}

// versionRule is R20/R21 for a hop: one minor is the whole of both rules (k8s.PathRefusal);
// a hop of several is checked for a downgrade against the path's final target (a hop's
// own target may be below an apiserver that already answers at a later minor) and for a
// skipped minor against its own.
func versionRule(v *k8s.Versions, h hopSpec) (rule, reason, fix string) {
	if h.hops <= 1 {
		return k8s.PathRefusal(v, h.target)
	}
	if rule, reason, fix = k8s.DowngradeRefusal(v, h.final); rule != "" {
		return rule, reason, fix
	}
	return k8s.MinorRefusal(v, h.target)
}

// kubePath is the assessed path: one assessment per hop, in order.
type kubePath struct {
	target string
	hops   []*assessment
	// spelled is the path for chat, "v1.34.1 → v1.35.2 → v1.36.3" (one hop: "").
	spelled string
	// refusal refuses the whole path before any hop was assessed (nil otherwise; a hop's
	// own refusal is in its assessment).
	refusal *sdk.Refusal
}

func (p *kubePath) multi() bool { return len(p.hops) > 1 }

// spelledOr is the path, or the hops' targets while it is still being assessed.
func (p *kubePath) spelledOr() string {
	if p.spelled != "" {
		return p.spelled
	}
	var t []string
	for _, h := range p.hops {
		t = append(t, h.target)
	}
	return strings.Join(t, " → ")
}

// refused is the first refusal of the path, if any.
func (p *kubePath) refused() *sdk.Refusal {
	if p.refusal != nil {
		return p.refusal
	}
	for _, h := range p.hops {
		if h.refusal != nil {
			if p.multi() {
				return sdk.Refuse(h.refusal.Rule, strings.TrimSuffix(h.hop.title(), ": ")+" (path "+p.spelledOr()+"): "+h.refusal.Reason, h.refusal.Fix)
			}
			return h.refusal
		}
	}
	return nil
}

// assessPath reads the cluster and plans the path to target: one hop when the target is in
// the running minor or the next one (the one-minor upgrade, unchanged); otherwise the hops
// of releases.PlanKubernetes, refused when the running Talos does not support one of them
// (naming the Talos upgrade to do first) or when no release of a minor in between is known.
// Each later hop is assessed from the versions the hops before it leave.
func assessPath(ctx context.Context, c *cluster.Clients, inv cluster.Inventory, req *sdk.OperationRequest, target string, table preflight.Table) (*kubePath, error) {
	out := &kubePath{target: target}
	if out.refusal = knownTarget(req, target); out.refusal != nil {
		return out, nil
	}
	ids := identity.Resolve(ctx, c, inv, identity.Options{})
	if err := ids.Require(identity.Talos | identity.Kubernetes); err != nil {
		a, err := assess(ctx, c, inv, req, single(target), ids, nil, table)
		if err != nil {
			return nil, err
		}
		out.hops = []*assessment{a}
		return out, nil
	}
	v, err := k8s.ReadVersions(ctx, c, ids)
	if err != nil {
		return nil, err
	}
	stops, err := kubeStops(ctx, c, inv, req, v, target)
	var rf *releases.Refusal
	switch {
	case errors.As(err, &rf):
		out.refusal = sdk.Refuse(rf.Rule, rf.Reason, rf.Fix)
		return out, nil
	case err != nil:
		return nil, err
	}
	if len(stops) > 1 {
		out.spelled = v.Lowest().Version + " → " + strings.Join(stops, " → ")
	}
	at := v
	for i, stop := range stops {
		h := hopSpec{target: stop, final: target, hop: i + 1, hops: len(stops)}
		if !h.last() {
			h.prefix = stop + "/"
		}
		a, err := assess(ctx, c, inv, req, h, ids, at, table)
		if err != nil {
			return nil, err
		}
		out.hops = append(out.hops, a)
		if a.refusal != nil {
			return out, nil
		}
		if at, err = at.After(stop); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// knownTarget refuses (R20) a target that is not a known Kubernetes release
// (releases.kubernetes, as the bot's release data carries it; none without
// that data), before the cluster is read: a version that does not exist
// would otherwise be rolled to. releases.CheckTarget is the rule's one place.
func knownTarget(req *sdk.OperationRequest, target string) *sdk.Refusal {
	n := releases.RequestNotes(req.Evidence.Releases)
	v, err := releases.Parse(target)
	if err != nil {
		// A pre-release or build ("1.36.0-rc.1") is not a release.
		return sdk.Refuse("R20", fmt.Sprintf("%s is not a Kubernetes release (%v)", target, err),
			"give a released version (MAJOR.MINOR.PATCH) listed in releases.kubernetes")
	}
	var rf *releases.Refusal
	if errors.As(n.AllowedKubernetes(v), &rf) {
		return sdk.Refuse(rf.Rule, rf.Reason, rf.Fix)
	}
	return nil
}

// kubeStops are the hops' targets ("v1.35.2", …, target): target alone unless it is two or
// more minors above the lowest running component (a downgrade or a bad target is then the
// one-hop assessment's to refuse). A *releases.Refusal refuses the path.
func kubeStops(ctx context.Context, c *cluster.Clients, inv cluster.Inventory, req *sdk.OperationRequest, v *k8s.Versions, target string) ([]string, error) {
	lo := v.Lowest()
	from, err1 := releases.Parse(lo.Version)
	to, err2 := releases.Parse(target)
	if err1 != nil || err2 != nil || len(v.Observed) == 0 || to.Major != from.Major || !versions.SkipsMinor(from, to) ||
		downgrade(v, target) {
		return []string{target}, nil
	}
	// The oldest Talos bounds the path: every hop must be supported by it (R20, machinery's
	// compatibility), else the Talos upgrade comes first.
	all, _, err := k8s.CheckTalosSupport(ctx, c, inv, target)
	if err != nil {
		return nil, err
	}
	var oldest releases.Version
	for _, t := range all {
		tv, err := releases.Parse(t.Talos)
		if err != nil {
			return nil, &releases.Refusal{Rule: "R20", Reason: fmt.Sprintf("the Talos version of %s cannot be read (%v), so the path's support cannot be checked", t.Node, t.Err),
				Fix: "bring the node back (/talos health), then plan again"}
		}
		if oldest.IsZero() || tv.Compare(oldest) < 0 {
			oldest = tv
		}
	}
	knownTalos, knownKube := releases.Known(req.Evidence.Releases)
	p, err := releases.PlanKubernetes(compat.Machinery{}, releases.KubeRequest{Talos: oldest, Running: from, Target: to, Known: knownKube, KnownTalos: knownTalos})
	if err != nil {
		return nil, err
	}
	var stops []string
	for _, h := range p.Hops {
		stops = append(stops, h.To.Tag())
	}
	return stops, nil
}

func downgrade(v *k8s.Versions, target string) bool {
	rule, _, _ := k8s.DowngradeRefusal(v, target)
	return rule != ""
}

// plan is the operation plan of the path: every hop's steps, preconditions and warnings.
func (p *kubePath) plan() *sdk.OperationPlan {
	if !p.multi() {
		if p.refusal != nil {
			return &sdk.OperationPlan{Target: p.target, Refusal: p.refusal}
		}
		return p.hops[0].plan()
	}
	first := p.hops[0]
	mode := ""
	if first.dryRun {
		mode = " (dry run: nothing will be changed)"
	}
	out := &sdk.OperationPlan{Target: p.planTarget(), Refusal: p.refused(),
		Summary: fmt.Sprintf("Kubernetes upgrade of %s to %s in %d hops, %s%s: one minor at a time, each hop a full upgrade in talosctl upgrade-k8s's order "+
			"(snapshot, gate, pre-pull, static pods, kube-proxy, kubelets, gate) with its own pre-flight checks, under this one approval",
			first.cluster, p.target, len(p.hops), p.spelled, mode)}
	if first.planGuard {
		out.Steps = append(out.Steps, planguard.Step())
	}
	seen := map[string]bool{}
	for _, h := range p.hops {
		out.Steps = append(out.Steps, h.steps()...)
		for _, w := range h.warnings {
			if !seen[w] {
				seen[w] = true
				out.Warnings = append(out.Warnings, w)
			}
		}
	}
	out.Steps = append(out.Steps, driftStep(p.target))
	if out.Refusal == nil {
		out.Preconditions = append(out.Preconditions, &sdk.Precondition{Name: "upgrade path", OK: true, Rule: "R20",
			Detail: "one minor at a time, the newest configured patch of each minor in between: " + p.spelled})
		for _, h := range p.hops {
			out.Preconditions = append(out.Preconditions, h.preconditions()...)
		}
	}
	out.CanonicalInputs = p.canonical()
	return out
}

// planTarget is what the promotion gate (R6) matches: the version, or for several hops the
// stops, so that staging must have taken the same path (releases.PlanTarget, shared with the
// Talos upgrade).
func (p *kubePath) planTarget() string {
	var stops []releases.Version
	for _, h := range p.hops {
		v, err := releases.Parse(h.target)
		if err != nil {
			return p.target
		}
		stops = append(stops, v)
	}
	return releases.PlanTarget(stops)
}

// canonical is everything that changes what Run does. One hop keeps the inputs of a
// one-minor upgrade; several put the path and every hop (its target, the versions it starts
// from and the images its kubelets get) under the one digest the approval binds.
func (p *kubePath) canonical() []byte {
	if !p.multi() {
		return p.hops[0].canonical()
	}
	first := p.hops[0]
	c := sdk.CanonicalFor(Command, first.cluster).Str("target", p.target).Str("path", p.spelled).Bool("dry-run", first.dryRun)
	for _, h := range p.hops {
		hc := c.Sub("hop", h.hop.hop).Str("to", h.target).Str("from", h.versions.Lowest().Version)
		for i, n := range h.inv.Nodes {
			hc.Sub("node", i).Str("name", n.Name).Str("kubelet", h.versions.Kubelets[n.Name])
		}
	}
	return append(c.Bytes(), first.canonical()...)
}

// dryRunLines is the dry run of every hop.
func (p *kubePath) dryRunLines() []string {
	if !p.multi() {
		return p.hops[0].dryRunLines()
	}
	out := []string{"🧭 path " + p.spelled + fmt.Sprintf(" (%d hops, one minor at a time)", len(p.hops))}
	for _, h := range p.hops {
		out = append(out, fmt.Sprintf("— hop %d/%d → %s —", h.hop.hop, h.hop.hops, h.target))
		out = append(out, h.dryRunLines()...)
	}
	return out
}
