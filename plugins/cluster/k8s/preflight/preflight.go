// Package preflight holds the pre-flight checks of a Kubernetes upgrade: flags, admission
// plugins and feature gates that the target version removed and that a node's control-plane
// static pods or kubelet still use, and API resources the target version no longer serves that
// still have objects. A component started with a removed flag or gate does not start, so such
// an upgrade must be refused before anything changes.
//
// It follows what `talosctl upgrade-k8s` v1.13.9 runs before it touches a node (go-kubernetes
// v0.2.38 kubernetes/upgrade/checks.go, called from pkg/cluster/kubernetes/talos_managed.go),
// with our own code and data (removals.go says where each item was learnt). Where ours checks
// more, on purpose:
//
//   - every minor between the lowest running version and the target is checked (talosctl looks
//     the path "from->to" up in a map, so a cluster half-way through a minor is checked like any
//     other, and a path it has no entry for is not checked at all: here it is an error);
//   - feature gates are checked in the kubelet too (its --feature-gates and the featureGates of
//     its configuration, machine.kubelet.extraConfig), not only in the control-plane pods;
//   - --disable-admission-plugins is checked like --enable-admission-plugins (kube-apiserver
//     refuses an unknown plugin in either);
//   - every --feature-gates occurrence is read, not only the first.
//
// The package is pure: the caller reads the nodes (the StaticPod and KubeletSpec resources, as
// talosctl does) and counts the objects of ResourcesToCount; Check only decides.
package preflight

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Component is a Kubernetes component a node runs.
type Component string

// The components the checks read.
const (
	APIServer         Component = "kube-apiserver"
	ControllerManager Component = "kube-controller-manager"
	Scheduler         Component = "kube-scheduler"
	Kubelet           Component = "kubelet"
)

// rank is the order findings are reported in: components in upgrade order, then kinds.
func rank(c Component, k Kind) int {
	r := 0

	switch c {
	case ControllerManager:
		r = 10
	case Scheduler:
		r = 20
	case Kubelet:
		r = 30
	}

	switch k {
	case KindAdmissionPlugin:
		r++
	case KindFeatureGate:
		r += 2
	}

	return r
}

// Node is what one node runs, as read from Talos.
type Node struct {
	// Name is how findings name the node (the caller's choice: inventory name and address).
	Name string
	// Args maps a component to its command line: a static pod container's command and args
	// (k8s.StaticPod), or the kubelet's arguments (k8s.KubeletSpec.Args). A component the node
	// does not run is absent.
	Args map[Component][]string
	// KubeletConfig is the kubelet's configuration document (k8s.KubeletSpec.Config: the
	// KubeletConfiguration with machine.kubelet.extraConfig merged in); only its featureGates
	// are read. Nil when unknown.
	KubeletConfig map[string]any
}

// Resource is an API resource: group (empty for the core group), version, plural resource.
type Resource struct {
	Group, Version, Resource string
}

// String is the resource.version.group form kubectl and go-kubernetes use.
func (r Resource) String() string {
	if r.Group == "" {
		return r.Resource + "." + r.Version
	}

	return r.Resource + "." + r.Version + "." + r.Group
}

// InUse is the number of objects a removed resource still has (0: none, or not served).
type InUse struct {
	Resource
	Count int
}

// Input is what Check decides on.
type Input struct {
	// From is the lowest version running anywhere in the cluster, To the target
	// ("v1.35.2", "1.36.3", "1.36").
	From, To string
	Nodes    []Node
	// Resources are the counts the caller read for ResourcesToCount(From, To).
	Resources []InUse
}

// Kind is what a finding is about.
type Kind string

// Kinds of finding.
const (
	KindFlag            Kind = "flag"
	KindAdmissionPlugin Kind = "admission plugin"
	KindFeatureGate     Kind = "feature gate"
	KindAPIResource     Kind = "API resource"
)

// Finding is one removed item still in use.
type Finding struct {
	Kind Kind
	// Node and Component say where (empty for an API resource, which is cluster-wide).
	Node      string
	Component Component
	// Name is the flag (without --), plugin, gate or resource (resource.version.group).
	Name string
	// Count is the number of objects of an API resource.
	Count int
	// RemovedIn is the Kubernetes minor that removed it, e.g. "1.36".
	RemovedIn string
	// Where is the argument or setting it was found in, e.g. "--feature-gates" or
	// "featureGates (machine.kubelet.extraConfig)".
	Where string
}

// String says what is in use, where, and what removed it.
func (f Finding) String() string {
	switch f.Kind {
	case KindFlag:
		return fmt.Sprintf("%s on %s uses flag --%s, removed in Kubernetes %s", f.Component, f.Node, f.Name, f.RemovedIn)
	case KindAdmissionPlugin:
		return fmt.Sprintf("%s on %s lists admission plugin %s in %s, removed in Kubernetes %s", f.Component, f.Node, f.Name, f.Where, f.RemovedIn)
	case KindFeatureGate:
		return fmt.Sprintf("%s on %s sets feature gate %s in %s, removed in Kubernetes %s", f.Component, f.Node, f.Name, f.Where, f.RemovedIn)
	default:
		return fmt.Sprintf("%d object(s) of %s, which Kubernetes %s no longer serves", f.Count, f.Name, f.RemovedIn)
	}
}

// Fix says how to clear a finding: where Talos takes the setting from.
func (f Finding) Fix() string {
	switch f.Kind {
	case KindAPIResource:
		return "migrate the " + f.Name + " objects to a served version (or delete them)"
	case KindFeatureGate:
		if f.Component == Kubelet {
			return "remove " + f.Name + " from machine.kubelet.extraArgs feature-gates / machine.kubelet.extraConfig featureGates"
		}

		return "remove " + f.Name + " from cluster." + configKey(f.Component) + ".extraArgs feature-gates"
	default:
		if f.Component == Kubelet {
			return "remove --" + f.Name + " from machine.kubelet.extraArgs"
		}

		return "remove it from cluster." + configKey(f.Component) + ".extraArgs"
	}
}

func configKey(c Component) string {
	switch c {
	case APIServer:
		return "apiServer"
	case ControllerManager:
		return "controllerManager"
	default:
		return "scheduler"
	}
}

// path is the minors (exclusive from, inclusive to) an upgrade crosses.
type path struct{ from, to int }

func parsePath(from, to string) (path, error) {
	fm, err := minorOf(from)
	if err != nil {
		return path{}, fmt.Errorf("from version: %w", err)
	}

	tm, err := minorOf(to)
	if err != nil {
		return path{}, fmt.Errorf("target version: %w", err)
	}

	return path{from: fm, to: tm}, nil
}

// minorOf parses "v1.36.3", "1.36" or "1.36.0-rc.1" and returns 36; only Kubernetes 1.x is known.
func minorOf(v string) (int, error) {
	s := strings.TrimPrefix(strings.TrimSpace(v), "v")
	major, rest, ok := strings.Cut(s, ".")

	if !ok || major != "1" {
		return 0, fmt.Errorf("%q is not a Kubernetes 1.x version", v)
	}

	minor, _, _ := strings.Cut(rest, ".")
	minor, _, _ = strings.Cut(minor, "-")

	m, err := strconv.Atoi(minor)
	if err != nil || m < 0 {
		return 0, fmt.Errorf("%q is not a Kubernetes 1.x version", v)
	}

	return m, nil
}

// releases returns the table's releases the path crosses, oldest first. A crossed minor the
// table does not cover is an error: checking against nothing would pass anything.
func (t Table) releases(p path) ([]Release, error) {
	byMinor := map[int]Release{}
	lo, hi := -1, -1

	for _, r := range t {
		byMinor[r.Minor] = r

		if lo < 0 || r.Minor < lo {
			lo = r.Minor
		}

		if r.Minor > hi {
			hi = r.Minor
		}
	}

	var out []Release

	for m := p.from + 1; m <= p.to; m++ {
		if m < lo || m > hi {
			return nil, fmt.Errorf("no removal data for Kubernetes 1.%d (known: 1.%d to 1.%d): the pre-flight checks cannot run; "+
				"use a talosbot whose plugins/cluster/k8s/preflight covers 1.%d", m, lo, hi, m)
		}

		if r, ok := byMinor[m]; ok {
			out = append(out, r)
		}
	}

	return out, nil
}

// ResourcesToCount lists the API resources that an upgrade from → to removes, for the caller
// to count (a resource the server does not serve counts 0).
func ResourcesToCount(from, to string) ([]Resource, error) {
	return Kubernetes().ResourcesToCount(from, to)
}

// ResourcesToCount is ResourcesToCount for this table.
func (t Table) ResourcesToCount(from, to string) ([]Resource, error) {
	p, err := parsePath(from, to)
	if err != nil {
		return nil, err
	}

	rels, err := t.releases(p)
	if err != nil {
		return nil, err
	}

	var out []Resource

	for _, r := range rels {
		out = append(out, r.Resources...)
	}

	return out, nil
}

// Check runs the checks against Kubernetes().
func Check(in Input) ([]Finding, error) { return Kubernetes().Check(in) }

// Check returns every removed item in use, sorted by node (input order), component, kind and
// name, then the API resources. No findings and no error means the upgrade may go on.
func (t Table) Check(in Input) ([]Finding, error) {
	p, err := parsePath(in.From, in.To)
	if err != nil {
		return nil, err
	}

	rels, err := t.releases(p)
	if err != nil {
		return nil, err
	}

	var out []Finding

	for _, n := range in.Nodes {
		var found []Finding

		for comp, args := range n.Args {
			found = append(found, checkArgs(n.Name, comp, args, rels)...)
		}

		found = append(found, checkKubeletConfig(n.Name, n.KubeletConfig, rels)...)
		sortFindings(found)
		out = append(out, found...)
	}

	seen := map[Resource]bool{}

	for _, r := range rels {
		for _, res := range r.Resources {
			for _, u := range in.Resources {
				if u.Resource == res && u.Count > 0 && !seen[res] {
					seen[res] = true
					out = append(out, Finding{Kind: KindAPIResource, Name: res.String(), Count: u.Count, RemovedIn: minorName(r.Minor)})
				}
			}
		}
	}

	return dedupe(out), nil
}

func minorName(m int) string { return "1." + strconv.Itoa(m) }

// checkArgs looks for removed flags, admission plugins (kube-apiserver) and feature gates in
// one component's command line.
func checkArgs(node string, comp Component, args []string, rels []Release) []Finding {
	var out []Finding

	flags := parseArgs(args)

	for _, r := range rels {
		for _, f := range r.Flags[comp] {
			if _, ok := flags[f]; ok {
				out = append(out, Finding{Kind: KindFlag, Node: node, Component: comp, Name: f, RemovedIn: minorName(r.Minor), Where: "--" + f})
			}
		}

		if comp == APIServer {
			for _, flag := range []string{"enable-admission-plugins", "disable-admission-plugins"} {
				listed := listValues(flags[flag], func(s string) string { return s })
				for _, pl := range r.AdmissionPlugins {
					if listed[pl] {
						out = append(out, Finding{Kind: KindAdmissionPlugin, Node: node, Component: comp, Name: pl,
							RemovedIn: minorName(r.Minor), Where: "--" + flag})
					}
				}
			}
		}

		gates := listValues(flags["feature-gates"], func(s string) string { name, _, _ := strings.Cut(s, "="); return strings.TrimSpace(name) })
		for _, g := range r.FeatureGates {
			if gates[g] {
				out = append(out, Finding{Kind: KindFeatureGate, Node: node, Component: comp, Name: g, RemovedIn: minorName(r.Minor), Where: "--feature-gates"})
			}
		}
	}

	return out
}

// checkKubeletConfig looks for removed feature gates in the kubelet's configuration.
func checkKubeletConfig(node string, cfg map[string]any, rels []Release) []Finding {
	gates, _ := cfg["featureGates"].(map[string]any)
	if len(gates) == 0 {
		return nil
	}

	var out []Finding

	for _, r := range rels {
		for _, g := range r.FeatureGates {
			if _, ok := gates[g]; ok {
				out = append(out, Finding{Kind: KindFeatureGate, Node: node, Component: Kubelet, Name: g, RemovedIn: minorName(r.Minor),
					Where: "featureGates (machine.kubelet.extraConfig)"})
			}
		}
	}

	return out
}

// parseArgs maps each --flag of a command line to its values ("--a=1 --a=2 --b" → a: [1 2],
// b: [""]). Arguments that are not long flags (the binary, positional values) are ignored; a
// flag given as "--a value" has its value ignored too, which is enough to know it is used.
func parseArgs(args []string) map[string][]string {
	out := map[string][]string{}

	for _, a := range args {
		if !strings.HasPrefix(a, "--") || len(a) == 2 {
			continue
		}

		k, v, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		out[k] = append(out[k], v)
	}

	return out
}

// listValues splits comma-separated values into a set of names.
func listValues(values []string, name func(string) string) map[string]bool {
	out := map[string]bool{}

	for _, v := range values {
		for _, item := range strings.Split(v, ",") {
			if n := name(strings.TrimSpace(item)); n != "" {
				out[n] = true
			}
		}
	}

	return out
}

func sortFindings(fs []Finding) {
	sort.SliceStable(fs, func(i, j int) bool {
		a, b := fs[i], fs[j]
		if ra, rb := rank(a.Component, a.Kind), rank(b.Component, b.Kind); ra != rb {
			return ra < rb
		}

		if a.Name != b.Name {
			return a.Name < b.Name
		}

		return a.Where < b.Where
	})
}

// dedupe drops repeats (a gate set both in --feature-gates and in the config stays twice, as
// they are two places to fix; the same place twice is once).
func dedupe(fs []Finding) []Finding {
	seen := map[Finding]bool{}
	out := fs[:0]

	for _, f := range fs {
		if !seen[f] {
			seen[f] = true
			out = append(out, f)
		}
	}

	return out
}
