package k8s

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/blang/semver/v4"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/compatibility"
	"github.com/talosbot/talosbot/plugins/cluster"
	"github.com/talosbot/talosbot/plugins/cluster/identity"
	sdkversions "github.com/talosbot/talosbot/plugins/sdk/versions"
	"google.golang.org/protobuf/types/known/emptypb"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DeprecationGuide is where operators check the APIs a Kubernetes minor removes.
const DeprecationGuide = "https://kubernetes.io/docs/reference/using-api/deprecation-guide/"

// ParseVersion accepts "1.36.3" or "v1.36.3" (a full major.minor.patch, optionally with
// a pre-release) and returns the normalised "v1.36.3" form and the parsed version.
func ParseVersion(s string) (string, semver.Version, error) {
	t := strings.TrimPrefix(strings.TrimSpace(s), "v")
	v, err := semver.Parse(t)
	if err != nil {
		return "", semver.Version{}, fmt.Errorf("%q is not a Kubernetes version: give major.minor.patch, e.g. v1.36.3 or 1.36.3", s)
	}
	v.Build = nil
	return "v" + v.String(), v, nil
}

// ComponentVersion is one observed version of a Kubernetes component.
type ComponentVersion struct {
	// Where names the component, e.g. "apiserver (discovery)", "kubelet on cp-1".
	Where   string
	Node    string
	Version string
	parsed  semver.Version
}

// Versions is what the cluster runs, as read from Kubernetes.
type Versions struct {
	// Server is the apiserver's discovery /version (the instance that answered).
	Server string
	// StaticPods maps control-plane node → component → image version of its mirror pod
	// ("" when the pod is missing).
	StaticPods map[string]map[string]string
	// Kubelets maps node name → Node.status.nodeInfo.kubeletVersion.
	Kubelets map[string]string
	// Observed lists every version above, for the rule checks.
	Observed []ComponentVersion
}

// Lowest and Highest return the extreme observed versions (zero value when none).
func (v *Versions) Lowest() ComponentVersion  { return v.extreme(true) }
func (v *Versions) Highest() ComponentVersion { return v.extreme(false) }

func (v *Versions) extreme(low bool) ComponentVersion {
	var out ComponentVersion
	for i, o := range v.Observed {
		if i == 0 || (low && o.parsed.LT(out.parsed)) || (!low && o.parsed.GT(out.parsed)) {
			out = o
		}
	}
	return out
}

// ReadVersions reads the apiserver's version, each control plane's static pod images and
// each node's kubelet version. Mirror pods and Nodes are looked up by the Kubernetes Node
// name ids resolved for each inventory node, never by the inventory name; every node of the
// inventory must be registered.
func ReadVersions(ctx context.Context, c *cluster.Clients, ids *identity.Map) (*Versions, error) {
	inv := ids.Inventory()
	if c.Kube == nil {
		return nil, errors.New("no Kubernetes API (no kubeconfig for this cluster): the versions cannot be read; configure the cluster's kubeconfig")
	}
	out := &Versions{StaticPods: map[string]map[string]string{}, Kubelets: map[string]string{}}
	sv, err := c.Kube.Discovery().ServerVersion()
	if err != nil {
		return nil, fmt.Errorf("read the apiserver version (discovery /version): %w", err)
	}
	out.Server = sv.GitVersion
	if err := out.add("apiserver (discovery /version)", "", sv.GitVersion); err != nil {
		return nil, err
	}
	for _, cp := range inv.ControlPlanes() {
		out.StaticPods[cp.Name] = map[string]string{}
		for _, comp := range StaticPodComponents() {
			pod, err := c.Kube.CoreV1().Pods(staticPodNamespace).Get(ctx, StaticPodName(comp, ids.KubeNode(cp.Name)), metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				out.StaticPods[cp.Name][comp] = ""
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("read static pod %s on %s: %w", comp, cp.Name, err)
			}
			ver := imageVersion(podImage(pod, comp))
			out.StaticPods[cp.Name][comp] = ver
			if err := out.add(comp+" on "+cp.Name, cp.Name, ver); err != nil {
				return nil, err
			}
		}
	}
	nodes, err := c.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list Kubernetes nodes: %w", err)
	}
	byName := map[string]*corev1.Node{}
	for i := range nodes.Items {
		byName[nodes.Items[i].Name] = &nodes.Items[i]
	}
	var missing []string
	for _, n := range inv.Nodes {
		kn, ok := byName[ids.KubeNode(n.Name)]
		if !ok {
			missing = append(missing, n.Name)
			continue
		}
		out.Kubelets[n.Name] = kn.Status.NodeInfo.KubeletVersion
		if err := out.add("kubelet on "+n.Name, n.Name, kn.Status.NodeInfo.KubeletVersion); err != nil {
			return nil, err
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("node(s) %s of the inventory are not registered in Kubernetes; fix the node (or the inventory) first", strings.Join(missing, ", "))
	}
	return out, nil
}

func (v *Versions) add(where, node, ver string) error {
	if ver == "" {
		return nil
	}
	norm, p, err := ParseVersion(ver)
	if err != nil {
		return fmt.Errorf("%s reports version %q, which is not a version", where, ver)
	}
	v.Observed = append(v.Observed, ComponentVersion{Where: where, Node: node, Version: norm, parsed: p})
	return nil
}

// PathRefusal is the version part of rules R20 and R21: a target below any running
// component is a downgrade (R21, refused: a downgrade is not a rollback); a target more
// than one minor above the lowest running component skips a minor (R20). It returns the
// rule and reason, or "" when the step is allowed (a patch, the next minor, or a resume of
// an upgrade to target that is partly done).
func PathRefusal(v *Versions, target string) (rule, reason, fix string) {
	if _, _, err := ParseVersion(target); err != nil {
		return "R20", err.Error(), "give a full version, e.g. v1.36.3"
	}
	if len(v.Observed) == 0 {
		return "R20", "no running Kubernetes version could be read", "check the kubeconfig and that the nodes are registered"
	}
	if rule, reason, fix = DowngradeRefusal(v, target); rule != "" {
		return rule, reason, fix
	}
	return MinorRefusal(v, target)
}

// DowngradeRefusal is rule R21 alone: a target below any running component. A multi-hop
// upgrade checks it against the path's final target (a hop's own target may be below the
// apiserver that answers discovery while the path is under way).
func DowngradeRefusal(v *Versions, target string) (rule, reason, fix string) {
	_, t, err := ParseVersion(target)
	if err != nil {
		return "R20", err.Error(), "give a full version, e.g. v1.36.3"
	}
	hi := v.Highest()
	if len(v.Observed) > 0 && t.LT(hi.parsed) { // rule:R21
		byVersion := map[string][]string{}
		var order []string
		for _, o := range v.Observed {
			if t.LT(o.parsed) {
				if byVersion[o.Version] == nil {
					order = append(order, o.Version)
				}
				byVersion[o.Version] = append(byVersion[o.Version], o.Where)
			}
		}
		newer := make([]string, len(order))
		for i, ver := range order {
			newer[i] = ver + " on " + abbreviate(byVersion[ver], 3)
		}
		return "R21", fmt.Sprintf("v%s is lower than what runs (%s). A Kubernetes downgrade is not a rollback: "+
				"etcd data written by the newer version may not be readable by the older one", t, strings.Join(newer, "; ")),
			fmt.Sprintf("choose %s or newer; to undo an upgrade, restore the etcd snapshot taken before it (runbook restore procedure)", hi.Version)
	}
	return "", "", ""
}

// MinorRefusal is the one-minor-at-a-time half of R20: the target's major must be the
// lowest running component's, and its minor at most one above.
func MinorRefusal(v *Versions, target string) (rule, reason, fix string) {
	_, t, err := ParseVersion(target)
	if err != nil {
		return "R20", err.Error(), "give a full version, e.g. v1.36.3"
	}
	if len(v.Observed) == 0 {
		return "R20", "no running Kubernetes version could be read", "check the kubeconfig and that the nodes are registered"
	}
	lo := v.Lowest()
	if t.Major != lo.parsed.Major {
		return "R20", fmt.Sprintf("v%s changes the major version from %s (%s)", t, lo.Version, lo.Where), "upgrade within the same major version"
	}
	if sdkversions.SkipsMinor(plain(lo.parsed), plain(t)) {
		return "R20", fmt.Sprintf("v%s skips a minor: the lowest running version is %s (%s); Kubernetes upgrades go one minor at a time",
				t, lo.Version, lo.Where),
			fmt.Sprintf("upgrade one minor at a time: first to the newest %s release declared under releases.kubernetes, then to %s", sdkversions.NextMinor(plain(lo.parsed)).MinorPlain(), t)
	}
	return "", "", ""
}

// plain is v as the SDK's version type, for the version rules
// (plugins/sdk/versions); build metadata and pre-releases do not matter to them.
func plain(v semver.Version) sdkversions.Version {
	return sdkversions.Version{Major: int(v.Major), Minor: int(v.Minor), Patch: int(v.Patch)}
}

// TalosSupport is one node's Talos version and whether it supports the target.
type TalosSupport struct {
	Node  string
	Talos string
	Err   error
}

// CheckTalosSupport is the compatibility part of rule R20: every node's running Talos
// (Version RPC) must support the target Kubernetes version according to machinery's
// compatibility package. It returns one entry per node and the nodes that fail.
func CheckTalosSupport(ctx context.Context, c *cluster.Clients, inv cluster.Inventory, target string) ([]TalosSupport, []TalosSupport, error) {
	kv, err := compatibility.ParseKubernetesVersion(target)
	if err != nil {
		return nil, nil, fmt.Errorf("parse Kubernetes version %s: %w", target, err)
	}
	// One call per node, by address, as talosctl's GetNodesTalosVersions, all at once
	// (cluster.PerNode): a node that is down costs its timeout once, not once before
	// each node after it.
	ok, fails := cluster.PerNode(ctx, inv, cluster.Addresses(inv.Nodes), func(nctx context.Context) ([]*machineapi.Version, error) {
		resp, err := c.Machine.Version(nctx, &emptypb.Empty{})
		return resp.GetMessages(), err
	})
	failed := map[string]cluster.NodeFailure{}
	for _, f := range fails {
		failed[f.Node] = f
	}
	var all, bad []TalosSupport
	for _, n := range inv.Nodes {
		s := TalosSupport{Node: n.Name}
		m, answered := ok[n.Name]
		f, isFailed := failed[n.Name]
		switch {
		case isFailed && f.Unreachable:
			s.Err = fmt.Errorf("no answer to the Talos Version call: %s", f.Msg)
		case isFailed:
			s.Err = fmt.Errorf("the Talos Version call failed: %s", f.Msg)
		case !answered:
			s.Err = errors.New("no answer to the Talos Version call")
		default:
			s.Talos = m.GetVersion().GetTag()
			tv, perr := compatibility.ParseTalosVersion(m.GetVersion())
			if perr != nil {
				s.Err = fmt.Errorf("parse Talos version %q: %w", s.Talos, perr)
			} else if serr := kv.SupportedWith(tv); serr != nil { // rule:R20-support
				s.Err = serr
			}
		}
		all = append(all, s)
		if s.Err != nil {
			bad = append(bad, s)
		}
	}
	return all, bad, nil
}

// DescribeTalosSupport renders failing nodes for a refusal, grouped by Talos version and
// reason: "Talos v1.12.6 on cp-1, worker-1: version of Kubernetes 1.36.3 is too new …".
func DescribeTalosSupport(bad []TalosSupport) string {
	type group struct{ who, why string }
	nodes := map[group][]string{}
	for _, b := range bad {
		g := group{who: "no Talos version", why: b.Err.Error()}
		if b.Talos != "" {
			g.who = "Talos " + b.Talos
		}
		nodes[g] = append(nodes[g], b.Node)
	}
	parts := make([]string, 0, len(nodes))
	for g, ns := range nodes {
		parts = append(parts, g.who+" on "+strings.Join(ns, ", ")+": "+g.why)
	}
	sort.Strings(parts)
	return strings.Join(parts, "; ")
}

// abbreviate joins up to max names and counts the rest.
func abbreviate(names []string, max int) string {
	if len(names) <= max {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:max], ", "), len(names)-max)
}

// After is what v becomes once every component below target runs target (components at or
// above it keep their version): the versions a later hop of a multi-hop upgrade is planned
// from.
func (v *Versions) After(target string) (*Versions, error) {
	norm, t, err := ParseVersion(target)
	if err != nil {
		return nil, err
	}
	up := func(cur string) string {
		if cur == "" {
			return ""
		}
		if _, c, err := ParseVersion(cur); err == nil && c.GE(t) {
			return cur
		}
		return norm
	}
	out := &Versions{Server: up(v.Server), StaticPods: map[string]map[string]string{}, Kubelets: map[string]string{}}
	for _, o := range v.Observed {
		nv := up(o.Version)
		_, p, _ := ParseVersion(nv)
		out.Observed = append(out.Observed, ComponentVersion{Where: o.Where, Node: o.Node, Version: nv, parsed: p})
	}
	for node, comps := range v.StaticPods {
		out.StaticPods[node] = map[string]string{}
		for comp, ver := range comps {
			out.StaticPods[node][comp] = up(ver)
		}
	}
	for node, ver := range v.Kubelets {
		out.Kubelets[node] = up(ver)
	}
	return out, nil
}
