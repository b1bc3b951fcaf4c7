package talos

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/compatibility"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/talosbot/talosbot/internal/releases"
	"github.com/talosbot/talosbot/plugins/cluster"
	"github.com/talosbot/talosbot/plugins/sdk"
	"github.com/talosbot/talosbot/plugins/sdk/versions"
)

// Release is a Talos release version vMAJOR.MINOR.PATCH.
type Release struct{ Major, Minor, Patch int }

// ParseRelease parses "v1.13.9" (the leading v is optional; a pre-release
// or build suffix is not accepted: the bot only rolls released versions).
func ParseRelease(s string) (Release, error) {
	parts := strings.Split(strings.TrimPrefix(strings.TrimSpace(s), "v"), ".")
	if len(parts) != 3 {
		return Release{}, fmt.Errorf("version %s is not vMAJOR.MINOR.PATCH (e.g. v1.13.9)", sdk.Quote(s))
	}
	var v [3]int
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return Release{}, fmt.Errorf("version %s is not vMAJOR.MINOR.PATCH (e.g. v1.13.9)", sdk.Quote(s))
		}
		v[i] = n
	}
	return Release{v[0], v[1], v[2]}, nil
}

func (v Release) String() string { return fmt.Sprintf("v%d.%d.%d", v.Major, v.Minor, v.Patch) }

// Minor is "v1.13".
func (v Release) MinorString() string { return fmt.Sprintf("v%d.%d", v.Major, v.Minor) }

// Compare returns -1, 0 or 1.
func (v Release) Compare(o Release) int {
	for _, d := range [3]int{v.Major - o.Major, v.Minor - o.Minor, v.Patch - o.Patch} {
		if d < 0 {
			return -1
		}
		if d > 0 {
			return 1
		}
	}
	return 0
}

// AtLeast reports v >= major.minor.0.
func (v Release) AtLeast(major, minor int) bool {
	return v.Compare(Release{major, minor, 0}) >= 0
}

// CheckUpgradePath is rule R10 for one node: the target is the running
// version (nothing to do), a newer patch of the same minor, or a release of
// the next minor; never a downgrade and never a skipped minor (the one place
// of that rule: versions.SkipsMinor; PlanTalos plans one minor per hop by construction). On top of
// that, machinery's compatibility tables must accept the host version.
func CheckUpgradePath(node string, from, to Release) *sdk.Refusal {
	switch c := to.Compare(from); {
	case c == 0:
		return nil
	case c < 0:
		return &sdk.Refusal{Rule: "R10",
			Reason: fmt.Sprintf("%s runs %s; %s would be a downgrade", node, from, to),
			Fix:    fmt.Sprintf("an upgrade never goes back; to undo a failed upgrade of one node use `/talos rollback %s`", node)}
	case versions.SkipsMinor(versions.Version(from), versions.Version(to)):
		// The fix names a minor to declare, never a version the bot may not
		// know ("v1.13.x" would be refused as a target).
		next := versions.NextMinor(versions.Version(from)).MinorTag()
		return &sdk.Refusal{Rule: "R10",
			Reason: fmt.Sprintf("%s runs %s; %s skips a minor release (one adjacent minor at a time)", node, from, to),
			Fix: fmt.Sprintf("the path goes through %s: declare its newest release under releases.talos (or let the bot read Image Factory: releases.factory_url; `/talos releases` lists what is known), then `/talos upgrade talos %s` plans the hops",
				next, to)}
	}
	target, err := compatibility.ParseTalosVersion(&machineapi.VersionInfo{Tag: to.String()})
	if err == nil {
		var host *compatibility.TalosVersion
		if host, err = compatibility.ParseTalosVersion(&machineapi.VersionInfo{Tag: from.String()}); err == nil {
			err = target.UpgradeableFrom(host)
		}
	}
	if err != nil {
		return &sdk.Refusal{Rule: "R10",
			Reason: fmt.Sprintf("%s: Talos compatibility rules refuse %s → %s: %v", node, from, to, err),
			Fix:    "pick a target that the Talos support matrix allows from the running version"}
	}
	return nil
}

// PatchCheck is the second half of R10, in its one place: the target should
// be the newest known patch of its minor. It returns a warning (or, when
// refuse is set, a refusal) and "" / nil when the target is the newest
// known patch. With no known releases the newest patch cannot be
// confirmed: a warning, or with refuse set a refusal (fail closed).
func PatchCheck(target Release, known []releases.Version, refuse bool) (string, *sdk.Refusal) {
	if len(known) == 0 {
		msg := fmt.Sprintf("no Talos releases are known (Image Factory, releases.talos); cannot confirm that %s is the newest %s patch", target, target.MinorString())
		if refuse {
			return "", &sdk.Refusal{Rule: "R10", Reason: msg + " (policy refuses non-latest patches)",
				Fix: "wait until the bot has read Image Factory (releases.factory_url; `/talos releases` shows the list), or list the releases you use in releases.talos, then plan again"}
		}
		return msg, nil
	}
	t := releases.Version(target)
	newest, latest, ok := versions.IsLatestPatch(known, t)
	newer := ok && !latest
	var msg, fix string
	switch {
	case newer:
		msg = fmt.Sprintf("%s is not the newest %s patch: %s is known", target, target.MinorString(), newest.Tag())
		fix = fmt.Sprintf("upgrade to %s instead", newest.Tag())
	case !slices.Contains(known, t):
		msg = fmt.Sprintf("%s is not in the configured list of known releases (releases.talos)", target)
		fix = "add the release to releases.talos if it exists, or pick a listed one"
	default:
		return "", nil
	}
	if refuse {
		return "", &sdk.Refusal{Rule: "R10", Reason: msg + " (policy refuses non-latest patches)", Fix: fix}
	}
	return msg, nil
}

// NodeState is what a node runs, read without changing anything.
type NodeState struct {
	Node cluster.Node
	// Version is Version.Tag, e.g. "v1.12.6".
	Version string
	// Platform is the Talos platform the node reports (e.g. "nocloud").
	Platform string
	// Image is machine.install.image of the node's machine configuration
	// ("" when it cannot be read).
	Image string
}

// ReadNodeState asks one node for its version and install image.
func ReadNodeState(ctx context.Context, s *cluster.Session, n cluster.Node) (NodeState, error) {
	st := NodeState{Node: n}
	nctx := client.WithNode(ctx, n.Address)
	resp, err := s.Talos.MachineClient.Version(nctx, &emptypb.Empty{})
	if err != nil {
		return st, fmt.Errorf("read the Talos version of %s: %w", n.Name, err)
	}
	if len(resp.GetMessages()) == 0 {
		return st, fmt.Errorf("read the Talos version of %s: empty reply", n.Name)
	}
	m := resp.GetMessages()[0]
	st.Version, st.Platform = m.GetVersion().GetTag(), m.GetPlatform().GetName()
	img, err := installImage(ctx, s, n)
	if err != nil {
		return st, err
	}
	st.Image = img
	return st, nil
}

func installImage(ctx context.Context, s *cluster.Session, n cluster.Node) (string, error) {
	// The configuration holds secrets: only the image leaves this function.
	cfg, err := cluster.MachineConfigOf(ctx, s.Talos.COSI, n.Address)
	if err != nil {
		return "", fmt.Errorf("read the machine configuration of %s: %w", n.Name, err)
	}
	if cfg.Machine() == nil {
		return "", nil
	}
	return cfg.Machine().Install().Image(), nil
}

// ReadNodeStates reads the nodes one by one and returns the states by name,
// with every failure joined (each names its node).
func ReadNodeStates(ctx context.Context, s *cluster.Session, nodes []cluster.Node) (map[string]NodeState, error) {
	out := map[string]NodeState{}
	var errs []error
	for _, n := range nodes {
		st, err := ReadNodeState(ctx, s, n)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out[n.Name] = st
	}
	return out, errors.Join(errs...)
}
