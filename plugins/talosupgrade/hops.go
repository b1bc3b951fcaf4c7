package talosupgrade

// Multi-hop upgrades (docs/RELEASES.md "Multi-hop upgrades"): a target two
// or more minors away is rolled one adjacent minor at a time, at the latest
// known patch of each, under one approval. Every hop is a full rolling
// upgrade (snapshot, gates, quorum checks, installer of that hop's version).
//
// Step ids: the hops before the last start with their version
// ("v1.12.6/node/cp-1/upgrade"); the last hop keeps the ids of a one-hop
// roll ("node/cp-1/upgrade", "verify", "drift"). A resumed run plans the
// path again from the nodes' versions, which gives the remaining hops of
// the same path, so its step ids are those of the approved plan.

import (
	"context"
	"fmt"
	"strings"

	"github.com/talosbot/talosbot/internal/releases"
	"github.com/talosbot/talosbot/plugins/cluster"
	"github.com/talosbot/talosbot/plugins/cluster/etcd"
	"github.com/talosbot/talosbot/plugins/cluster/identity"
	"github.com/talosbot/talosbot/plugins/cluster/planguard"
	"github.com/talosbot/talosbot/plugins/cluster/talos"
	"github.com/talosbot/talosbot/plugins/sdk"
)

// versionFix is the fix for a target that is not vMAJOR.MINOR.PATCH: a
// minor alone ("v1.13") gets its newest known patch as "did you mean".
func versionFix(req *sdk.OperationRequest) string {
	typed := strings.TrimSpace(req.Args["version"])
	if minor, err := releases.Parse(typed + ".0"); err == nil {
		known, _ := knownReleases(req.Evidence)
		if lp, ok := releases.LatestPatch(known, minor); ok {
			return fmt.Sprintf("did you mean %s, the newest known %s patch? /talos upgrade talos %s", lp.Tag(), minor.MinorTag(), lp.Tag())
		}
	}
	return "give the target as vMAJOR.MINOR.PATCH, e.g. /talos upgrade talos v1.13.9"
}

// path is the computed upgrade: one roll per hop, in order; a target in
// the running minor or the next one is a path of one hop.
type path struct {
	target   talos.Release
	hops     []*roll
	warnings []string
	// kubeSupport says whether the target supports the running Kubernetes
	// (R20), for the plan.
	kubeSupport string
	// kubeUnknown: the running Kubernetes version could not be read, so
	// R20 was not checked; the plan says so as a warning, never as a ✅.
	kubeUnknown bool
	// guard: plugins.talosupgrade.plan_before_upgrade lists the cluster, so
	// the R5 Terraform plan guard runs before the first hop.
	guard bool
	// at is every node's version as read when the path was computed, then
	// as each node finishes a hop: what the result reports on a failure.
	at map[string]talos.Release
	// preflight is what the target pre-flight checked (preflight.go).
	preflight string
}

func (p *path) multi() bool { return len(p.hops) > 1 }

// spelled is the path's stops, "v1.11.6 → v1.12.6 → v1.13.9".
func (p *path) spelled() string {
	var parts []string
	for _, h := range p.hops {
		parts = append(parts, h.target.String())
	}
	return strings.Join(parts, " → ")
}

// planTarget is the plan's target, which the promotion gate (R6) matches
// against staging runs: the version for one hop, the stops for several,
// so that staging must have taken the same path.
func (p *path) planTarget() string {
	var stops []releases.Version
	for _, h := range p.hops {
		stops = append(stops, releases.Version(h.target))
	}
	return releases.PlanTarget(stops)
}

// compute reads the cluster and decides the path. It changes nothing. A
// *sdk.Refusal means refuse.
func compute(ctx context.Context, req *sdk.OperationRequest, s *cluster.Session) (*path, error) {
	inv := s.Inv
	target, err := talos.ParseRelease(req.Args["version"])
	if err != nil {
		return nil, &sdk.Refusal{Rule: "R10", Reason: err.Error(), Fix: versionFix(req)}
	}
	if err := allowedTarget(req.Evidence, target); err != nil {
		return nil, err
	}
	var warnings []string
	// "1.13.9" is accepted as v1.13.9, and the plan says so, so that what
	// is approved is spelled as it will run.
	if typed := strings.TrimSpace(req.Args["version"]); typed != target.String() {
		warnings = append(warnings, fmt.Sprintf("version %q read as %s", typed, target))
	}
	only, err := selection(inv, req.Args["nodes"])
	if err != nil {
		return nil, err
	}
	states, err := talos.ReadNodeStates(ctx, s, inv.Nodes)
	if err != nil {
		return nil, &sdk.Refusal{Rule: "R1", Reason: "cannot read every node: " + err.Error(),
			Fix: "run /talos health and bring every node back before upgrading"}
	}
	// Every name used from here on (etcd member, Kubernetes Node) is the
	// resolved one; a node that cannot be resolved is refused by name.
	ids := identity.Resolve(ctx, s.Clients, inv, identity.Options{})
	if err := ids.Require(identity.All); err != nil {
		return nil, err
	}
	q := etcd.ReadQuorum(ctx, s.Clients, ids)
	if q.Leader == "" {
		return nil, &sdk.Refusal{Rule: "R16", Reason: "etcd has no agreed leader: " + q.Summary(),
			Fix: "restore etcd quorum first (/talos health shows the members)"}
	}
	at, err := versionsOf(states)
	if err != nil {
		return nil, err
	}
	var oldest releases.Version
	for _, v := range at {
		if rv := releases.Version(v); oldest.IsZero() || rv.Compare(oldest) < 0 {
			oldest = rv
		}
	}
	p := &path{target: target, at: map[string]talos.Release{}, warnings: warnings}
	for n, v := range at {
		p.at[n] = v
	}
	stops := []releases.Version{releases.Version(target)}
	if !oldest.IsZero() && target.Compare(talos.Release(oldest)) > 0 {
		kube := runningKubernetes(ctx, s, ids)
		p.kubeUnknown = kube.IsZero()
		if stops, p.kubeSupport, err = pathCheck(oldest, stops[0], kube, req.Evidence); err != nil {
			return nil, err
		}
	}
	if len(stops) > 1 && only != nil {
		return nil, &sdk.Refusal{Rule: "R10",
			Reason: fmt.Sprintf("the cluster runs %s; %s is %d hops away, and --nodes would leave the other nodes minors behind", oldest.Tag(), target, len(stops)),
			Fix:    "upgrade every node (leave out --nodes), or upgrade the selected nodes one hop at a time: /talos upgrade talos " + stops[0].Tag()}
	}
	// The target pre-flight of every hop, before any hop is decided: a
	// breaking change of a target refuses here, with its fix (preflight.go).
	pf, err := runPreflight(ctx, s, at, stops, only)
	if err != nil {
		return nil, err
	}
	p.preflight = pf.summary
	for i, stop := range stops {
		last := i == len(stops)-1
		prefix := ""
		if !last {
			prefix = stop.Tag() + "/"
		}
		hop := talos.Release(stop)
		r, err := hopRoll(req, inv, states, at, hop, q.Leader, only, prefix, last)
		if err != nil {
			return nil, err
		}
		r.hop, r.hops, r.ids = i+1, len(stops), ids
		p.hops = append(p.hops, r)
		// The next hop starts where this one leaves every node.
		for _, st := range r.steps {
			if !st.skip {
				at[st.node.Name] = hop
			}
		}
	}
	known, _ := knownReleases(req.Evidence)
	cfg, err := decodeConfig(req.Config)
	if err != nil {
		return nil, err
	}
	p.guard = planguard.Wanted(req.Cluster.Name, cfg.PlanBeforeUpgrade)
	warn, re := talos.PatchCheck(target, known, cfg.RefuseNonLatestPatch)
	if re != nil {
		return nil, re
	}
	if warn != "" {
		p.warnings = append(p.warnings, warn+" (R10)")
	}
	if len(inv.ControlPlanes()) == 1 {
		p.warnings = append(p.warnings, "one control plane: the Kubernetes API and etcd are down while it reboots")
	}
	if len(req.Credentials.Kubeconfig) == 0 {
		warn := "no kubeconfig: the gates cannot check Kubernetes"
		if p.clientDrains() {
			// A v1.13+ node is never rebooted undrained: the drain uses the kubeconfig
			// Talos serves, as talosctl's does, and without one the upgrade is refused here.
			if _, err := s.DrainKube(ctx); err != nil {
				return nil, &sdk.Refusal{Rule: "R3",
					Reason: "v1.13+ nodes are cordoned and drained by the bot before their reboot, and it has no Kubernetes access to drain with: no kubeconfig is configured, and " + err.Error(),
					Fix:    "configure the cluster's kubeconfig (Terraform output or file) so that its nodes are drained before they reboot; nothing was changed"}
			}
			warn += "; v1.13+ nodes are drained with the kubeconfig the Talos API serves (MachineService.Kubeconfig, held in memory only), as talosctl upgrade does"
		}
		p.warnings = append(p.warnings, warn)
	}
	p.warnings = append(p.warnings, pf.warnings...)
	return p, nil
}

// clientDrains reports whether a node of the path upgrades through LifecycleService (v1.13+),
// where the bot, not Talos, drains it before the reboot.
func (p *path) clientDrains() bool {
	for _, r := range p.hops {
		for _, st := range r.steps {
			if !st.skip && st.mechanics == talos.MechanicsLifecycle {
				return true
			}
		}
	}
	return false
}

// versionsOf parses every node's version.
func versionsOf(states map[string]talos.NodeState) (map[string]talos.Release, error) {
	at := map[string]talos.Release{}
	for name, st := range states {
		v, err := talos.ParseRelease(st.Version)
		if err != nil {
			return nil, &sdk.Refusal{Rule: "R10", Reason: fmt.Sprintf("%s reports version %q: %v", name, st.Version, err),
				Fix: "the bot upgrades released versions only; upgrade this node by hand"}
		}
		at[name] = v
	}
	return at, nil
}

// canonical is everything that changes what Run does. One hop keeps the
// inputs of a one-hop roll; several put every hop (its target, each node's
// from, image and mechanics) under the one digest the approval binds. The
// control-plane order of a later hop is decided when it starts (the etcd
// leader then goes last, R16): the leader of hop 1 is in the inputs.
func (p *path) canonical(req *sdk.OperationRequest) []byte {
	if !p.multi() {
		return p.hops[0].canonical(req)
	}
	st := &req.Settings
	c := sdk.NewCanonical(req).Str("target", p.target.String()).Str("path", p.spelled()).Str("leader", p.hops[0].leader).
		Str("snapshot_dir", req.Evidence.Backups.GetDir()).Int("node_timeout_ms", st.NodeTimeoutMs).Int("gate_timeout_ms", st.GateTimeoutMs)
	for _, h := range p.hops {
		hc := c.Sub("hop", h.hop).Str("to", h.target.String())
		h.writeSteps(hc)
	}
	return c.List("nodes", cluster.Names(p.hops[0].inv.Nodes)).Bytes()
}

// operationPlan is the plan of the path.
func (p *path) operationPlan(req *sdk.OperationRequest) *sdk.OperationPlan {
	first, last := p.hops[0], p.hops[len(p.hops)-1]
	up := last.toUpgrade()
	summary := fmt.Sprintf("Talos %s on %s: %d node(s) to upgrade one at a time (workers first, etcd leader %s last), %d already there",
		p.target, first.inv.Name, len(up), first.leader, len(last.steps)-len(up))
	detail := fmt.Sprintf("every node at %s or one adjacent step below it", p.target)
	if p.multi() {
		summary = fmt.Sprintf("Talos %s on %s in %d hops, %s: each hop a full rolling upgrade (snapshot, gates, workers first, etcd leader last), under this one approval",
			p.target, first.inv.Name, len(p.hops), p.spelled())
		detail = fmt.Sprintf("one adjacent minor at a time, the latest known patch of each: %s", p.spelled())
	}
	plan := &sdk.OperationPlan{Summary: summary, Target: p.planTarget(), Warnings: p.warnings, CanonicalInputs: p.canonical(req)}
	var steps []*sdk.Step
	for _, h := range p.hops {
		steps = append(steps, planSteps(h)...)
	}
	plan.Steps = planguard.WithStep(p.guard, steps)
	plan.Preconditions = []*sdk.Precondition{
		{Name: "upgrade path", OK: true, Rule: "R10", Detail: detail},
		{Name: "installer platform and schematic", OK: true, Rule: "R14", Detail: "unchanged on every node"},
	}
	switch {
	case p.kubeSupport != "" && p.kubeUnknown:
		// A check that could not run is not a passed precondition: the
		// card would show "✅ ok" beside "the version is unknown".
		plan.Warnings = append(plan.Warnings, "Kubernetes support (R20) not checked: "+p.kubeSupport)
	case p.kubeSupport != "":
		plan.Preconditions = append(plan.Preconditions, &sdk.Precondition{Name: "Kubernetes support", OK: true, Rule: "R20", Detail: p.kubeSupport})
	}
	return plan
}

// titlePrefix starts the step titles of a hop of several.
func (r *roll) titlePrefix() string {
	if r.hops <= 1 {
		return ""
	}
	return fmt.Sprintf("hop %d/%d → %s: ", r.hop, r.hops, r.target)
}

// hops runs the path hop by hop. The first hop is the roll computed at the
// start; each later hop is decided again when it starts, from the nodes'
// versions and the etcd leader then. A failure stops at that hop: no later
// hop starts. Before the first hop, once for the whole path, the R5 plan
// guard (plugins.talosupgrade.plan_before_upgrade): no upgrade on top of a migration.
func (x *run) hops(ctx context.Context) error {
	cfg, err := decodeConfig(x.req.Config)
	if err != nil {
		return err // Plan decoded the same section: only a changed host gets here
	}
	guard := planguard.Wanted(x.req.Cluster.Name, cfg.PlanBeforeUpgrade)
	if ref := planguard.BeforeUpgrade(ctx, x.cluster, guard, x.req.Evidence, cfg.TerraformGuard, x.r); ref != nil {
		return x.fail("refused: the Terraform plan guard stopped the upgrade; no node was touched", ref)
	}
	for i, h := range x.path.hops {
		if i > 0 {
			live, err := x.liveHop(ctx, h)
			if err != nil {
				return x.fail(fmt.Sprintf("stopped before hop %d/%d (→ %s): the cluster could not be read", h.hop, h.hops, h.target), err)
			}
			h = live
		}
		x.roll = h
		if err := x.execute(ctx); err != nil {
			return err
		}
	}
	return nil
}

// liveHop decides hop h again from the cluster as it is now.
func (x *run) liveHop(ctx context.Context, h *roll) (*roll, error) {
	states, err := talos.ReadNodeStates(ctx, x.s, x.s.Inv.Nodes)
	if err != nil {
		return nil, &sdk.Refusal{Rule: "R1", Reason: "cannot read every node: " + err.Error(), Fix: "bring every node back, then /talos resume"}
	}
	// The names were resolved once for the operation (compute); a hop
	// decided again uses them.
	q := etcd.ReadQuorum(ctx, x.s.Clients, h.ids)
	if q.Leader == "" {
		return nil, &sdk.Refusal{Rule: "R16", Reason: "etcd has no agreed leader: " + q.Summary(), Fix: "restore etcd quorum first, then /talos resume"}
	}
	at, err := versionsOf(states)
	if err != nil {
		return nil, err
	}
	r, err := hopRoll(x.req, x.s.Inv, states, at, h.target, q.Leader, nil, h.prefix, h.hop == h.hops)
	if err != nil {
		return nil, err
	}
	r.hop, r.hops, r.ids = h.hop, h.hops, h.ids
	return r, nil
}

// reach records that node finished a hop at v.
func (x *run) reach(node string, v talos.Release) {
	if x.path != nil && x.path.at != nil {
		x.path.at[node] = v
	}
}

// reachedLines say, for a path of several hops, which hop each node
// reached: the record of a failure.
func (x *run) reachedLines() []string {
	if x.path == nil || !x.path.multi() {
		return nil
	}
	var parts []string
	for _, n := range x.s.Inv.Nodes {
		v, ok := x.path.at[n.Name]
		if !ok {
			parts = append(parts, n.Name+" unknown")
			continue
		}
		hop := "before hop 1"
		for _, h := range x.path.hops {
			if v.Compare(h.target) >= 0 {
				hop = fmt.Sprintf("hop %d/%d done", h.hop, h.hops)
			}
		}
		parts = append(parts, fmt.Sprintf("%s %s (%s)", n.Name, v, hop))
	}
	return []string{fmt.Sprintf("🧭 path %s; where each node is: %s", x.path.spelled(), strings.Join(parts, ", "))}
}
