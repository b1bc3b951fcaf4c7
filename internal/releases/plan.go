package releases

import (
	"fmt"
	"slices"
	"strings"

	"github.com/talosbot/talosbot/plugins/sdk/versions"
)

// Refusal is a plan the runbook does not allow: the rule, what is wrong,
// and how to proceed (plugins turn it into an sdk.Refusal).
type Refusal struct{ Rule, Reason, Fix string }

func (r *Refusal) Error() string { return fmt.Sprintf("%s: %s; %s", r.Rule, r.Reason, r.Fix) }

// Matrix is the Talos support matrix. releases/compat implements it with
// machinery's compatibility package, the only source of these rules.
type Matrix interface {
	// UpgradeableFrom refuses installing Talos target on a node that runs host.
	UpgradeableFrom(host, target Version) error
	// SupportsKubernetes refuses Kubernetes k8s on Talos talos.
	SupportsKubernetes(talos, k8s Version) error
}

// KubeRange is the Kubernetes minors one Talos version supports (Patch 0);
// zero when the matrix does not know that Talos.
type KubeRange struct{ Min, Max Version }

func (r KubeRange) String() string {
	if r.Min.IsZero() {
		return "unknown"
	}
	return r.Min.MinorPlain() + "–" + r.Max.MinorPlain()
}

// maxProbeMinor bounds the minors probed for a range: machinery's tables
// cover Kubernetes 1.x and Talos 1.x.
const maxProbeMinor = 100

// SupportedKubernetes asks the matrix which Kubernetes minors Talos talos
// supports. Machinery's bounds are x.y.0 to x.y.99, so probing x.y.0 of
// each minor finds them.
func SupportedKubernetes(m Matrix, talos Version) KubeRange {
	var r KubeRange
	for minor := 0; minor <= maxProbeMinor; minor++ {
		k := Version{Major: 1, Minor: minor, Patch: 0}
		if m.SupportsKubernetes(talos, k) != nil {
			if !r.Min.IsZero() {
				break
			}
			continue
		}
		if r.Min.IsZero() {
			r.Min = k
		}
		r.Max = k
	}
	return r
}

// Hop is one Talos upgrade of a multi-hop path: a full rolling upgrade.
type Hop struct {
	From, To Version
	// Kubernetes is what To supports; KubernetesOK says the running
	// Kubernetes is in it (false when the running version is unknown).
	Kubernetes   KubeRange
	KubernetesOK bool
}

// TalosPlan is the path from the running Talos version to a target.
type TalosPlan struct {
	Running, Target Version
	// Kubernetes is the running Kubernetes version (zero: unknown).
	Kubernetes Version
	Hops       []Hop
	Warnings   []string
}

// Path spells the path, "v1.11.2 → v1.11.6 → v1.12.6 → v1.13.9".
func (p *TalosPlan) Path() string {
	parts := []string{p.Running.Tag()}
	for _, h := range p.Hops {
		parts = append(parts, h.To.Tag())
	}
	return strings.Join(parts, " → ")
}

// Lines are the plan for chat: the path and the Kubernetes support of
// each hop.
func (p *TalosPlan) Lines() []string {
	if len(p.Hops) == 0 {
		return []string{fmt.Sprintf("already at %s: nothing to do", p.Target.Tag())}
	}
	out := []string{fmt.Sprintf("path: %s (%d hop%s, one rolling upgrade each)", p.Path(), len(p.Hops), plural(len(p.Hops)))}
	for i, h := range p.Hops {
		k := "Kubernetes version unknown"
		if !p.Kubernetes.IsZero() {
			k = "Kubernetes " + p.Kubernetes.Plain() + " supported"
		}
		out = append(out, fmt.Sprintf("hop %d/%d: %s → %s — Talos %s supports Kubernetes %s; %s", i+1, len(p.Hops), h.From.Tag(), h.To.Tag(), h.To.MinorTag(), h.Kubernetes, k))
	}
	return append(out, p.Warnings...)
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// TalosRequest is what PlanTalos plans from.
type TalosRequest struct {
	// Running is the oldest Talos version any node runs.
	Running, Target Version
	// Kubernetes is the running Kubernetes version (zero: unknown; the
	// support check is then skipped, with a warning).
	Kubernetes Version
	// Known are the releases upgrades may target or pass through
	// (List.Targets()), ascending.
	Known []Version
	// KnownKubernetes (releases.kubernetes) name the Kubernetes release
	// to upgrade to first when a hop needs a newer one.
	KnownKubernetes []Version
}

// PlanTalos plans the Talos upgrade from r.Running to r.Target one
// adjacent minor at a time, at the latest known patch of each minor (R10):
// first the newest patch of the running minor, then the newest of each
// minor in between, then the target. Every hop must pass the matrix's
// upgrade-from rules, and must keep the running Kubernetes supported; a hop
// that would not is refused, naming the Kubernetes upgrade to do first.
// Whether the target is the newest patch of its minor is the upgrade's own
// check (talos.PatchCheck), not the path's.
func PlanTalos(m Matrix, r TalosRequest) (*TalosPlan, error) {
	from, to := r.Running, r.Target
	p := &TalosPlan{Running: from, Target: to, Kubernetes: r.Kubernetes}
	switch c := to.Compare(from); {
	case c == 0:
		return p, nil
	case c < 0:
		return nil, &Refusal{Rule: "R10", Reason: fmt.Sprintf("the cluster runs %s; %s would be a downgrade", from.Tag(), to.Tag()),
			Fix: "an upgrade never goes back; to undo a failed upgrade of one node use `/talos rollback <node>`"}
	case to.Major != from.Major:
		return nil, &Refusal{Rule: "R10", Reason: fmt.Sprintf("%s → %s changes the major version", from.Tag(), to.Tag()),
			Fix: "a major upgrade is not planned by the bot; follow the release notes"}
	}
	// The stops are the path's adjacent-minor rule (R10): the running
	// minor's newest patch, then one stop per minor in between (a missing
	// minor is refused, never skipped), then the target; a major change is
	// refused above. Every hop is thus one minor by construction, so the
	// loop below does not call versions.SkipsMinor, which stays the rule for one
	// node's step (talos.CheckUpgradePath).
	var stops []Version
	if !to.SameMinor(from) {
		if lp, ok := LatestPatch(r.Known, from); ok && lp.Compare(from) > 0 {
			stops = append(stops, lp)
		}
		for minor := from.Minor + 1; minor < to.Minor; minor++ {
			mv := Version{Major: from.Major, Minor: minor, Patch: 0}
			lp, ok := LatestPatch(r.Known, mv)
			if !ok {
				return nil, &Refusal{Rule: "R10",
					Reason: fmt.Sprintf("the path %s → %s goes through every minor, and no %s release is known", from.Tag(), to.Tag(), mv.MinorTag()),
					Fix:    fmt.Sprintf("declare the newest %s release under releases.talos (or let the bot read Image Factory: releases.factory_url), then plan again", mv.MinorTag())}
			}
			stops = append(stops, lp)
		}
	}
	stops = append(stops, to)
	cur := from
	for i, stop := range stops {
		if err := m.UpgradeableFrom(cur, stop); err != nil {
			return nil, &Refusal{Rule: "R10",
				Reason: fmt.Sprintf("hop %d (%s → %s): Talos compatibility rules refuse it: %v", i+1, cur.Tag(), stop.Tag(), err),
				Fix:    "pick a target that the Talos support matrix allows from the running version"}
		}
		h := Hop{From: cur, To: stop, Kubernetes: SupportedKubernetes(m, stop)}
		if !r.Kubernetes.IsZero() {
			if err := m.SupportsKubernetes(stop, r.Kubernetes); err != nil {
				return nil, kubernetesFirst(m, r, i, cur, stop, h.Kubernetes, err)
			}
			h.KubernetesOK = true
		}
		p.Hops = append(p.Hops, h)
		cur = stop
	}
	if r.Kubernetes.IsZero() {
		p.Warnings = append(p.Warnings, "⚠️ the running Kubernetes version is unknown: its support at each hop was not checked")
	}
	return p, nil
}

// kubernetesFirst is the refusal of a hop that would leave the running
// Kubernetes unsupported: which Kubernetes release to reach first, and on
// which Talos version to do it.
func kubernetesFirst(m Matrix, r TalosRequest, i int, cur, stop Version, rng KubeRange, why error) error {
	k := r.Kubernetes
	reason := fmt.Sprintf("hop %d (%s → %s) would leave Kubernetes %s unsupported: Talos %s supports Kubernetes %s (%v)",
		i+1, cur.Tag(), stop.Tag(), k.Plain(), stop.MinorTag(), rng, why)
	if rng.Min.IsZero() || k.Compare(rng.Min) >= 0 {
		return &Refusal{Rule: "R20", Reason: reason, Fix: "pick a Talos target whose support matrix covers the running Kubernetes"}
	}
	need := rng.Min
	// A minor with no known release is named as what to declare, never
	// as an invented version ("1.31.x" would be refused as a target).
	name := func(minor Version) string {
		if v, ok := LatestPatch(r.KnownKubernetes, minor); ok {
			return v.Plain()
		}
		return fmt.Sprintf("<the newest %s patch, once declared under releases.kubernetes>", minor.MinorPlain())
	}
	steps := ""
	if versions.SkipsMinor(k, need) {
		steps = fmt.Sprintf(", one minor at a time starting with /talos upgrade k8s %s", name(versions.NextMinor(k)))
	}
	var fix string
	switch {
	case m.SupportsKubernetes(r.Running, need) == nil:
		fix = fmt.Sprintf("upgrade Kubernetes first (R11: its own operation): /talos upgrade k8s %s — Talos %s supports it%s; then plan this upgrade again",
			name(need), r.Running.Tag(), steps)
	default:
		fix = fmt.Sprintf("upgrade Talos to %s first (/talos upgrade talos %s), then Kubernetes to %s (/talos upgrade k8s %s%s), then plan this upgrade again",
			cur.Tag(), cur.Tag(), need.MinorPlain(), name(need), steps)
	}
	return &Refusal{Rule: "R20", Reason: reason, Fix: fix}
}

// KubeHop is one Kubernetes upgrade of a multi-hop path (its own dry run
// and pre-flight checks).
type KubeHop struct{ From, To Version }

// KubePlan is the path from the running Kubernetes to a target.
type KubePlan struct {
	Talos, Running, Target Version
	// Supported is what the running Talos supports.
	Supported KubeRange
	Hops      []KubeHop
	Warnings  []string
}

// Path spells the path, "1.33.4 → 1.34.5 → 1.35.2 → 1.36.3".
func (p *KubePlan) Path() string {
	parts := []string{p.Running.Plain()}
	for _, h := range p.Hops {
		parts = append(parts, h.To.Plain())
	}
	return strings.Join(parts, " → ")
}

// KubeRequest is what PlanKubernetes plans from.
type KubeRequest struct {
	// Talos is the oldest Talos version any node runs.
	Talos           Version
	Running, Target Version
	// Known are releases.kubernetes, ascending: the patch each minor in
	// between is upgraded to.
	Known []Version
	// KnownTalos name the Talos release to upgrade to first.
	KnownTalos []Version
}

// PlanKubernetes plans a Kubernetes upgrade one minor at a time (R20): the
// newest known patch of each minor in between, then the target; each
// supported by the running Talos, else refused naming the Talos upgrade to
// do first. A lower target is refused (R21).
func PlanKubernetes(m Matrix, r KubeRequest) (*KubePlan, error) {
	from, to := r.Running, r.Target
	p := &KubePlan{Talos: r.Talos, Running: from, Target: to, Supported: SupportedKubernetes(m, r.Talos)}
	switch c := to.Compare(from); {
	case c == 0:
		return p, nil
	case c < 0:
		return nil, &Refusal{Rule: "R21", Reason: fmt.Sprintf("Kubernetes runs %s; %s is lower, and a Kubernetes downgrade is not a rollback", from.Plain(), to.Plain()),
			Fix: "restore from an etcd snapshot if the cluster must go back; otherwise pick a newer version"}
	case to.Major != from.Major:
		return nil, &Refusal{Rule: "R20", Reason: fmt.Sprintf("%s → %s changes the major version", from.Plain(), to.Plain()), Fix: "pick a 1.x target"}
	}
	var stops []Version
	for minor := from.Minor + 1; minor < to.Minor; minor++ {
		mv := Version{Major: from.Major, Minor: minor, Patch: 0}
		lp, ok := LatestPatch(r.Known, mv)
		if !ok {
			return nil, &Refusal{Rule: "R20",
				Reason: fmt.Sprintf("the path %s → %s goes one minor at a time, and no %s release is configured", from.Plain(), to.Plain(), mv.MinorPlain()),
				Fix:    fmt.Sprintf("declare the newest %s release under releases.kubernetes, then plan again", mv.MinorPlain())}
		}
		stops = append(stops, lp)
	}
	stops = append(stops, to)
	if lp, ok := LatestPatch(r.Known, to); ok && lp.Compare(to) > 0 {
		p.Warnings = append(p.Warnings, fmt.Sprintf("⚠️ %s is not the newest configured %s patch: %s is", to.Plain(), to.MinorPlain(), lp.Plain()))
	}
	cur := from
	for i, stop := range stops {
		if err := m.SupportsKubernetes(r.Talos, stop); err != nil {
			return nil, talosFirst(m, r, i, cur, stop, p.Supported, err)
		}
		p.Hops = append(p.Hops, KubeHop{From: cur, To: stop})
		cur = stop
	}
	return p, nil
}

func talosFirst(m Matrix, r KubeRequest, i int, cur, stop Version, rng KubeRange, why error) error {
	reason := fmt.Sprintf("hop %d (%s → %s): Talos %s supports Kubernetes %s, not %s (%v)", i+1, cur.Plain(), stop.Plain(), r.Talos.Tag(), rng, stop.Plain(), why)
	for minor := r.Talos.Minor + 1; minor <= r.Talos.Minor+maxProbeMinor && minor <= maxProbeMinor; minor++ {
		t := Version{Major: r.Talos.Major, Minor: minor, Patch: 0}
		if lp, ok := LatestPatch(r.KnownTalos, t); ok {
			t = lp
		}
		if m.SupportsKubernetes(t, stop) == nil {
			if !slices.Contains(r.KnownTalos, t) {
				// Not a known release: say what to declare, never an
				// invented version ("v1.14.x" would be refused as a target).
				return &Refusal{Rule: "R20", Reason: reason,
					Fix: fmt.Sprintf("upgrade Talos first (R11: its own operation) to a %s release: none is known, so declare its newest patch under releases.talos (or let the bot read Image Factory: releases.factory_url), then `/talos upgrade talos` to it plans the hops; then plan this again", t.MinorTag())}
			}
			return &Refusal{Rule: "R20", Reason: reason,
				Fix: fmt.Sprintf("upgrade Talos first (R11: its own operation), one minor at a time, to %s (`/talos upgrade talos %s` plans the hops), then plan this again", t.Tag(), t.Tag())}
		}
	}
	return &Refusal{Rule: "R20", Reason: reason, Fix: "no known Talos release supports that Kubernetes version; pick a lower target"}
}

// PlanTarget is a plan's target, which the promotion gate (R6) matches
// exactly against staging runs: the version for one stop, the stops
// spelled "v1.12.6 → v1.13.9" for a path of several, so that staging must
// have taken the same path to the same version. Talos and Kubernetes
// upgrades both name their target here, the one place of this rule.
func PlanTarget(stops []Version) string {
	parts := make([]string, len(stops))
	for i, s := range stops {
		parts[i] = s.Tag()
	}
	return strings.Join(parts, " → ")
}
