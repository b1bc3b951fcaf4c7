package talosupgrade

import (
	"context"
	"errors"
	"fmt"

	"github.com/talosbot/talosbot/internal/releases"
	"github.com/talosbot/talosbot/internal/releases/compat"
	"github.com/talosbot/talosbot/plugins/cluster"
	"github.com/talosbot/talosbot/plugins/cluster/identity"
	"github.com/talosbot/talosbot/plugins/cluster/k8s"
	"github.com/talosbot/talosbot/plugins/cluster/talos"
	"github.com/talosbot/talosbot/plugins/sdk"
	"github.com/talosbot/talosbot/plugins/sdk/versions"
)

// knownReleases are the releases the target may be checked against: the
// bot's release evidence (Image Factory or its cache, or releases.talos,
// docs/RELEASES.md); none without it.
func knownReleases(ev sdk.Evidence) (talos, kube []releases.Version) {
	return releases.Known(ev.Releases)
}

// allowedTarget refuses (R10) a target that is not a known Talos release
// — Image Factory's list (or its cache) and the declared releases.talos,
// as the bot's release evidence says, none without it —
// and, with releases.listed_only, one outside releases.talos
// (releases.CheckTarget, the rule's one place). It runs before the
// cluster is read, so a version that does not exist changes nothing. The
// stops before the target come from the same list (knownReleases).
func allowedTarget(ev sdk.Evidence, target talos.Release) error {
	n := releases.RequestNotes(ev.Releases)
	err := n.Allowed(releases.Version(target))
	if rf := (*releases.Refusal)(nil); errors.As(err, &rf) {
		return sdk.Refuse(rf.Rule, rf.Reason, rf.Fix)
	}
	return err
}

// runningKubernetes is the running Kubernetes version by R20's definition:
// the lowest of the apiserver, the control planes' static pods and the
// kubelets (k8s.ReadVersions(...).Lowest(), as the Kubernetes upgrade reads
// it). Zero, "unknown", when it cannot be read (no Kubernetes API, a node
// not registered, a version that is not a release).
func runningKubernetes(ctx context.Context, s *cluster.Session, ids *identity.Map) releases.Version {
	v, err := k8s.ReadVersions(ctx, s.Clients, ids)
	if err != nil {
		return releases.Version{}
	}
	low, err := releases.Parse(v.Lowest().Version)
	if err != nil {
		return releases.Version{}
	}
	return low
}

// pathCheck plans the path from the oldest node version to the target
// (internal/releases, machinery's support matrix): the hops' targets, one
// adjacent minor at a time at the latest known patch of each (R10). It
// refuses a hop that would leave the running Kubernetes unsupported (R20),
// naming the Kubernetes upgrade to do first.
//
// It returns the stops and the Kubernetes support line for the plan, and
// leaves every other problem to the per-node checks (CheckUpgradePath,
// PatchCheck): then the only stop is the target.
func pathCheck(oldest, target releases.Version, kube releases.Version, ev sdk.Evidence) ([]releases.Version, string, error) {
	known, knownKube := knownReleases(ev)
	p, err := releases.PlanTalos(compat.Machinery{}, releases.TalosRequest{Running: oldest, Target: target, Kubernetes: kube, Known: known, KnownKubernetes: knownKube})
	var rf *releases.Refusal
	switch {
	case errors.As(err, &rf) && rf.Rule == "R20":
		return nil, "", sdk.Refuse(rf.Rule, rf.Reason, rf.Fix)
	case err != nil || len(p.Hops) == 0:
		return []releases.Version{target}, "", nil
	}
	var stops []releases.Version
	for _, h := range p.Hops {
		stops = append(stops, h.To)
	}
	// A patch of the running minor before a target in the next minor is
	// not a hop of its own: Talos upgrades any patch to the next minor.
	// Only a target two or more minors away is rolled hop by hop.
	if !versions.SkipsMinor(oldest, target) {
		stops = []releases.Version{target}
	}
	last := p.Hops[len(p.Hops)-1]
	if kube.IsZero() {
		return stops, fmt.Sprintf("Talos %s supports Kubernetes %s; the running Kubernetes version is unknown", target.MinorTag(), last.Kubernetes), nil
	}
	return stops, fmt.Sprintf("Kubernetes %s is supported by Talos %s (%s)", kube.Plain(), target.MinorTag(), last.Kubernetes), nil
}
