// Package releaseinfo is the built-in plugin behind `/talos releases
// [cluster]` (read-only): what the cluster runs, the latest patch of each
// known minor, the path to the newest release one adjacent minor at a
// time with the Kubernetes support matrix at each hop (R10, R20), the
// Kubernetes targets the running Talos supports, and how old the release
// data is.
//
// The release data comes from the bot as evidence (Evidence.Releases,
// internal/releases notes: Image Factory, its cache or releases.talos);
// the support matrix is machinery's compatibility (internal/releases/compat).
// Plan reads the cluster too, and its canonical inputs carry the
// releases.Inspection that the bot's new-release notices read.
package releaseinfo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/talosbot/talosbot/internal/factory"
	"github.com/talosbot/talosbot/internal/releases"
	"github.com/talosbot/talosbot/internal/releases/compat"
	"github.com/talosbot/talosbot/internal/version"
	"github.com/talosbot/talosbot/plugins/cluster"
	"github.com/talosbot/talosbot/plugins/cluster/talos"
	"github.com/talosbot/talosbot/plugins/sdk"
)

// Name is the plugin's catalogue name.
const Name = "releases"

// Command is the chat command.
const Command = "releases"

// Plugin implements sdk.Plugin. It keeps no state between calls.
type Plugin struct{}

// New returns the plugin.
func New() sdk.Plugin { return &Plugin{} }

// Describe returns the manifest.
func (*Plugin) Describe(context.Context) (*sdk.Manifest, error) {
	return &sdk.Manifest{Name: Name, Version: version.Version, Commands: []*sdk.Command{{
		Name:    Command,
		Summary: "Show the running Talos and Kubernetes versions, the latest patch of each minor, the upgrade path to the newest release with Kubernetes support at each hop, and the age of the release data (read-only)",
		Args:    []*sdk.Arg{{Name: "cluster", Description: "cluster to report on (default: the channel's cluster)"}},
		Effect:  sdk.EffectReadOnly,
		Example: "/talos releases production",
		// Its Plan reads the running versions, so /talos status prints them
		// (OperationPlan.status, from StatusLines).
		StatusLabel: "versions",
	}}}, nil
}

// Observed is what the cluster runs.
type Observed struct {
	// Talos is the oldest version a node reports; ByNode every answer.
	Talos  releases.Version
	ByNode map[string]string
	// Unread names nodes that did not answer, with why.
	Unread map[string]string
	// Kubernetes is the oldest kubelet (zero: no Kubernetes API).
	Kubernetes releases.Version
	KubeNote   string
	// Schematics are the factory's answers about the declared schematic
	// of each installer class in use, for the newest target (nil: not
	// checked, e.g. no factory configured).
	Schematics []SchematicCheck
}

// SchematicCheck is one installer class's schematic as the factory sees it.
type SchematicCheck struct {
	Class, Source string
	factory.SchematicReport
}

// newestTarget is where the path goes: the newest release upgrades may target.
func newestTarget(n releases.Notes) (releases.Version, bool) {
	if len(n.Targets) == 0 {
		return releases.Version{}, false
	}
	return n.Targets[len(n.Targets)-1], true
}

// checkSchematics asks Image Factory about the declared schematic of every
// installer class the inventory uses (R13: the installer is derived from
// it; R14: its extensions must exist for the target).
func checkSchematics(ctx context.Context, req *sdk.OperationRequest, n releases.Notes) []SchematicCheck {
	target, ok := newestTarget(n)
	if n.FactoryURL == "" || !ok {
		return nil
	}
	c, err := factory.New(n.FactoryURL, nil)
	if err != nil {
		return nil
	}
	inv, err := cluster.InventoryFrom(&req.Cluster)
	if err != nil {
		return nil
	}
	var out []SchematicCheck
	seen := map[string]bool{}
	for _, node := range inv.Nodes {
		class := node.InstallerClass
		if class == "" {
			class = talos.ClassDefault
		}
		if seen[class] {
			continue
		}
		seen[class] = true
		id, src, err := talos.DeclaredSchematicFor(class, req.Cluster.Declared)
		if err != nil {
			out = append(out, SchematicCheck{Class: class, SchematicReport: factory.SchematicReport{Version: target.Tag(), Err: err}})
			continue
		}
		out = append(out, SchematicCheck{Class: class, Source: src, SchematicReport: c.CheckSchematic(ctx, id, target.Tag())})
	}
	return out
}

func observe(ctx context.Context, req *sdk.OperationRequest) (Observed, error) {
	inv, err := cluster.InventoryFrom(&req.Cluster)
	if err != nil {
		return Observed{}, err
	}
	s, err := cluster.Open(ctx, inv, &req.Credentials)
	if err != nil {
		return Observed{}, err
	}
	defer s.Close() //nolint:errcheck
	// One call per node, so that a dead node cannot hide the others.
	type answer struct {
		node, tag string
		err       error
	}
	answers := make(chan answer, len(inv.Nodes))
	for _, n := range inv.Nodes {
		go func() {
			tag, err := talos.TalosTag(ctx, s, n)
			answers <- answer{n.Name, tag, err}
		}()
	}
	talosByNode, unread := map[string]string{}, map[string]string{}
	for range inv.Nodes {
		a := <-answers
		if a.err != nil {
			unread[a.node] = status.Convert(a.err).Message()
		} else {
			talosByNode[a.node] = a.tag
		}
	}
	var kubelets []string
	kubeNote := "no kubeconfig"
	if s.Kube != nil {
		list, err := s.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			kubeNote = err.Error()
		} else {
			kubeNote = ""
			for _, n := range list.Items {
				kubelets = append(kubelets, n.Status.NodeInfo.KubeletVersion)
			}
		}
	}
	return versionsOf(talosByNode, unread, kubelets, kubeNote)
}

// versionsOf keeps the versions: the oldest Talos and kubelet count,
// because the path starts where the furthest-behind node is.
func versionsOf(talosByNode, unread map[string]string, kubelets []string, kubeNote string) (Observed, error) {
	out := Observed{ByNode: talosByNode, Unread: unread}
	found := false
	for name, tag := range talosByNode {
		v, err := releases.Parse(tag)
		if err != nil {
			return out, fmt.Errorf("%s reports Talos %q, which is not a release", name, tag)
		}
		if !found || v.Compare(out.Talos) < 0 {
			out.Talos, found = v, true
		}
	}
	if !found {
		return out, errors.New("no node answered with its Talos version; check /talos health")
	}
	if kubeNote != "" {
		out.KubeNote = kubeNote
		return out, nil
	}
	kfound := false
	for _, k := range kubelets {
		v, err := releases.Parse(k)
		if err != nil {
			continue
		}
		if !kfound || v.Compare(out.Kubernetes) < 0 {
			out.Kubernetes, kfound = v, true
		}
	}
	if !kfound {
		out.KubeNote = "no kubelet version reported"
	}
	return out, nil
}

// notes are the release evidence from the bot (none known without it).
func notes(req *sdk.OperationRequest) releases.Notes {
	return releases.RequestNotes(req.Evidence.Releases)
}

// Plan reads the cluster and returns the inspection in its canonical
// inputs; it changes nothing.
func (*Plugin) Plan(ctx context.Context, req *sdk.OperationRequest) (*sdk.OperationPlan, error) {
	name := req.Cluster.Name
	o, err := observe(ctx, req)
	if err != nil {
		return nil, err
	}
	n := notes(req)
	in := releases.Inspect(compat.Machinery{}, o.Talos, o.Kubernetes, n.Versions)
	raw, err := json.Marshal(in)
	if err != nil {
		return nil, err
	}
	plan := &sdk.OperationPlan{
		Summary:         fmt.Sprintf("Releases for %s: it runs Talos %s (read-only)", name, o.Talos.Tag()),
		Target:          name,
		Steps:           []*sdk.Step{{ID: "report", Title: "running versions, known releases, upgrade path", Kind: "verify"}},
		CanonicalInputs: sdk.NewCanonical(req).Str(releases.InspectionKey, string(raw)).Bytes(),
		Status:          StatusLines(o),
	}
	for _, node := range sortedKeys(o.Unread) {
		plan.Warnings = append(plan.Warnings, fmt.Sprintf("%s did not answer (%s): the oldest version may be older", node, o.Unread[node]))
	}
	return plan, nil
}

// Run reads the cluster and reports.
func (*Plugin) Run(ctx context.Context, req *sdk.OperationRequest, r sdk.Reporter) error {
	if err := r.StepStarted("report", ""); err != nil {
		return err
	}
	o, err := observe(ctx, req)
	if err != nil {
		_ = r.StepFailed("report", err.Error())
		return r.Result(&sdk.Result{Summary: "cannot read the cluster", Error: err.Error()})
	}
	n := notes(req)
	o.Schematics = checkSchematics(ctx, req, n)
	rep := Report(compat.Machinery{}, req.Cluster.Name, o, n)
	if err := r.StepOK("report", rep.Summary); err != nil {
		return err
	}
	return r.Result(&sdk.Result{OK: true, Summary: rep.Summary, Lines: rep.Lines, SuggestedActions: rep.Actions})
}

// StatusLines are the running versions for /talos status: the Talos
// version of every node that answered (each version with its nodes when
// they differ), the nodes that did not answer, and the oldest kubelet.
// Nothing is guessed: what was not read says so.
func StatusLines(o Observed) []string {
	byV := map[string][]string{}
	for node, tag := range o.ByNode {
		byV[tag] = append(byV[tag], node)
	}
	var talosLine string
	switch tags := sortedKeys(byV); len(tags) {
	case 0:
		talosLine = "Talos not read"
	case 1:
		talosLine = fmt.Sprintf("Talos %s (%d node%s)", tags[0], len(o.ByNode), map[bool]string{true: "", false: "s"}[len(o.ByNode) == 1])
	default:
		parts := make([]string, 0, len(tags))
		for _, tag := range tags {
			sort.Strings(byV[tag])
			parts = append(parts, tag+" on "+strings.Join(byV[tag], ", "))
		}
		talosLine = "Talos mixed: " + strings.Join(parts, "; ")
	}
	if len(o.Unread) > 0 {
		talosLine += fmt.Sprintf(" (not read from %s)", strings.Join(sortedKeys(o.Unread), ", "))
	}
	kubeLine := "Kubernetes " + o.Kubernetes.Tag()
	if o.Kubernetes.IsZero() {
		kubeLine = fmt.Sprintf("Kubernetes not read (%s)", orUnknown(o.KubeNote))
	}
	return []string{talosLine, kubeLine}
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// Reported is the report for chat.
type Reported struct {
	Summary string
	Lines   []string
	Actions []*sdk.SuggestedAction
}

// Report is the pure part of Run.
func Report(m releases.Matrix, clusterName string, o Observed, n releases.Notes) Reported {
	var out Reported
	add := func(format string, a ...any) { out.Lines = append(out.Lines, fmt.Sprintf(format, a...)) }
	// Running versions, with the nodes that differ.
	byV := map[string][]string{}
	for node, tag := range o.ByNode {
		byV[tag] = append(byV[tag], node)
	}
	var parts []string
	for _, tag := range sortedKeys(byV) {
		sort.Strings(byV[tag])
		parts = append(parts, tag+" on "+strings.Join(byV[tag], ", "))
	}
	add("running: Talos %s (%s)", o.Talos.Tag(), strings.Join(parts, "; "))
	for _, node := range sortedKeys(o.Unread) {
		add("⚠️ %s did not answer: %s", node, o.Unread[node])
	}
	if o.Kubernetes.IsZero() {
		add("running: Kubernetes unknown (%s)", o.KubeNote)
	} else {
		add("running: Kubernetes %s; Talos %s supports Kubernetes %s", o.Kubernetes.Plain(), o.Talos.MinorTag(), releases.SupportedKubernetes(m, o.Talos))
	}
	add("release data: %s", n.Origin)
	if len(n.Versions) == 0 {
		add("no Talos releases are known: set releases.factory_url or releases.talos")
		out.Summary = fmt.Sprintf("%s runs Talos %s; no releases known", clusterName, o.Talos.Tag())
		return out
	}
	add("latest patch per minor: %s", strings.Join(releases.Tags(releases.LatestPerMinor(n.Versions)), ", "))
	newest := n.Versions[len(n.Versions)-1]
	targets := n.Targets
	if len(targets) > 0 && targets[len(targets)-1].Compare(newest) < 0 {
		add("newest release %s is not in releases.talos (releases.listed_only); the path goes to the newest listed one", newest.Tag())
		newest = targets[len(targets)-1]
	}
	switch newest.Compare(o.Talos) {
	case 0:
		add("✅ %s runs the newest release, %s", clusterName, newest.Tag())
		out.Summary = fmt.Sprintf("%s runs Talos %s, the newest release", clusterName, o.Talos.Tag())
	case -1:
		add("%s runs %s, newer than every known release", clusterName, o.Talos.Tag())
		out.Summary = fmt.Sprintf("%s runs Talos %s", clusterName, o.Talos.Tag())
	default:
		p, err := releases.PlanTalos(m, releases.TalosRequest{Running: o.Talos, Target: newest, Kubernetes: o.Kubernetes, Known: targets, KnownKubernetes: n.Kubernetes})
		var rf *releases.Refusal
		switch {
		case errors.As(err, &rf):
			add("newest: %s — ⛔ %s: %s", newest.Tag(), rf.Rule, rf.Reason)
			add("→ %s", rf.Fix)
			out.Summary = fmt.Sprintf("%s runs Talos %s; %s is out, but the path is blocked (%s)", clusterName, o.Talos.Tag(), newest.Tag(), rf.Rule)
		case err != nil:
			add("newest: %s — cannot plan: %v", newest.Tag(), err)
			out.Summary = fmt.Sprintf("%s runs Talos %s; %s is out", clusterName, o.Talos.Tag(), newest.Tag())
		default:
			add("newest: %s", newest.Tag())
			out.Lines = append(out.Lines, p.Lines()...)
			out.Summary = fmt.Sprintf("%s runs Talos %s; newest %s, %d hop%s away", clusterName, o.Talos.Tag(), newest.Tag(), len(p.Hops), map[bool]string{true: "", false: "s"}[len(p.Hops) == 1])
			out.Actions = append(out.Actions, &sdk.SuggestedAction{Label: "upgrade talos " + newest.Tag(), Command: fmt.Sprintf("/talos upgrade talos %s %s", newest.Tag(), clusterName)})
		}
	}
	// The breaking changes between the running and the newest version
	// (releases.BreakingChanges): what the upgrade's target pre-flight
	// checks, and what only the release notes can say.
	if cs := releases.Crossed(o.Talos, newest); newest.Compare(o.Talos) > 0 && len(cs) > 0 {
		add("breaking changes between %s and %s (%d, docs/UPGRADES.md):", o.Talos.Tag(), newest.Tag(), len(cs))
		for _, c := range cs {
			add("• %s — %s%s", c.Line(), c.Action, checkNote(c.Check))
		}
	}
	for _, sc := range o.Schematics {
		short := sc.ID
		if len(short) > 12 {
			short = short[:12] + "…"
		}
		switch {
		case sc.ID == "":
			add("⚠️ installer class %s: %v (R13)", sc.Class, sc.Err)
		case sc.Err != nil:
			add("installer class %s (schematic %s, %s): Image Factory could not be asked: %v", sc.Class, short, sc.Source, sc.Err)
		case !sc.Found:
			add("⛔ installer class %s: Image Factory does not know schematic %s (%s): the installer for %s cannot be pulled (R13); fix the Terraform output", sc.Class, short, sc.Source, sc.Version)
		case len(sc.Missing) > 0:
			add("⛔ installer class %s (schematic %s): %s not built for %s (R14: the installer would lack them)", sc.Class, short, strings.Join(sc.Missing, ", "), sc.Version)
		case len(sc.Extensions) == 0:
			add("✅ installer class %s (schematic %s): known to Image Factory, no extensions", sc.Class, short)
		default:
			add("✅ installer class %s (schematic %s): %s built for %s", sc.Class, short, strings.Join(sc.Extensions, ", "), sc.Version)
		}
	}
	// Kubernetes: the configured targets the running Talos supports.
	if len(n.Kubernetes) > 0 {
		var ok []string
		for _, k := range n.Kubernetes {
			if m.SupportsKubernetes(o.Talos, k) == nil {
				ok = append(ok, k.Plain())
			}
		}
		if len(ok) == 0 {
			add("Kubernetes targets (releases.kubernetes) supported by Talos %s: none", o.Talos.Tag())
		} else {
			add("Kubernetes targets (releases.kubernetes) supported by Talos %s: %s", o.Talos.Tag(), strings.Join(ok, ", "))
		}
		if !o.Kubernetes.IsZero() {
			top := n.Kubernetes[len(n.Kubernetes)-1]
			if top.Compare(o.Kubernetes) > 0 {
				kp, err := releases.PlanKubernetes(m, releases.KubeRequest{Talos: o.Talos, Running: o.Kubernetes, Target: top, Known: n.Kubernetes, KnownTalos: targets})
				var rf *releases.Refusal
				switch {
				case errors.As(err, &rf):
					add("Kubernetes %s: ⛔ %s: %s → %s", top.Plain(), rf.Rule, rf.Reason, rf.Fix)
				case err != nil:
					add("Kubernetes %s: cannot plan: %v", top.Plain(), err)
				default:
					add("Kubernetes path: %s (one minor at a time, each with its dry run)", kp.Path())
				}
			}
		}
	}
	return out
}

// checkNote says what the upgrade does about a breaking change.
func checkNote(check string) string {
	switch check {
	case releases.CheckRefuse:
		return " (the upgrade's pre-flight refuses a cluster it affects)"
	case releases.CheckWarn:
		return " (the upgrade's pre-flight warns when it finds it)"
	}
	return ""
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
