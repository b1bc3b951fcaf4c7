// Package drift is the built-in plugin behind `/talos drift [cluster]`
// (rule R18): it compares what Terraform declares with what the cluster
// runs and prints the exact Terraform change to make, or says why no
// change may be made yet.
//
//   - declared talos_version vs the Talos version every node reports;
//   - declared kubernetes_version (Terraform's talos_kubernetes_version) vs
//     every Kubernetes node's kubelet version;
//   - the inventory vs the nodes that answer Talos, the etcd members and the
//     Kubernetes nodes: nodes removed but still in the inventory, and nodes
//     or members the inventory does not know.
//
// Declared values come from the request's cluster target (Terraform outputs
// or config). It changes nothing.
package drift

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/talosbot/talosbot/internal/version"
	"github.com/talosbot/talosbot/plugins/cluster"
	"github.com/talosbot/talosbot/plugins/sdk"
)

// Name is the plugin's catalogue name.
const Name = "drift"

// Command is the chat command.
const Command = "drift"

// Terraform variable names (ADR 002: terraform/variables_talos.tf) and the
// declared keys they arrive under.
const (
	VarTalosVersion      = "talos_version"
	VarKubernetesVersion = "talos_kubernetes_version"
	VarNodes             = "talos_nodes"
	DeclaredTalos        = "talos_version"
	DeclaredKubernetes   = "kubernetes_version"
	variablesFile        = "variables_talos.tf"
)

// Plugin implements sdk.Plugin. It keeps no state between calls.
type Plugin struct{}

// New returns the plugin.
func New() sdk.Plugin { return &Plugin{} }

// Describe returns the manifest.
func (*Plugin) Describe(context.Context) (*sdk.Manifest, error) {
	return &sdk.Manifest{Name: Name, Version: version.Version, Commands: []*sdk.Command{{
		Name:    Command,
		Summary: "Compare Terraform's declared Talos/Kubernetes versions and inventory with the running cluster, and print the Terraform change to make (R18) (read-only)",
		Args:    []*sdk.Arg{{Name: "cluster", Description: "cluster to compare (default: the channel's cluster)"}},
		Effect:  sdk.EffectReadOnly,
		Example: "/talos drift staging",
	}}}, nil
}

// Plan lists the comparisons. It does not contact the cluster.
func (*Plugin) Plan(_ context.Context, req *sdk.OperationRequest) (*sdk.OperationPlan, error) {
	inv, err := cluster.InventoryFrom(&req.Cluster)
	if err != nil {
		return nil, err
	}
	d := declared(req.Cluster.Declared)
	plan := &sdk.OperationPlan{
		Summary: fmt.Sprintf("Drift of %s: declared %s=%q, %s=%q vs %d nodes (read-only)", inv.Name,
			VarTalosVersion, d.talos, VarKubernetesVersion, d.kube, len(inv.Nodes)),
		Target: inv.Name,
		Steps: []*sdk.Step{
			{ID: "talos", Title: "Talos version on every node vs " + VarTalosVersion, Kind: "verify"},
			{ID: "kubernetes", Title: "kubelet version on every Kubernetes node vs " + VarKubernetesVersion, Kind: "verify"},
			{ID: "membership", Title: "inventory vs Talos, etcd and Kubernetes nodes", Kind: "verify"},
		},
		CanonicalInputs: sdk.NewCanonical(req).Str("talos", d.talos).Str("kube", d.kube).List("nodes", cluster.Names(inv.Nodes)).Bytes(),
	}
	if d.talos == "" {
		plan.Warnings = append(plan.Warnings, "no declared talos_version: add the Terraform output talos_version or declared.talos_version")
	}
	if len(req.Credentials.Kubeconfig) == 0 {
		plan.Warnings = append(plan.Warnings, "no kubeconfig: kubelet versions and Kubernetes nodes are not compared")
	}
	return plan, nil
}

type decl struct{ talos, kube string }

func declared(d map[string]string) decl {
	k := d[DeclaredKubernetes]
	if k == "" {
		k = d[VarKubernetesVersion]
	}
	return decl{talos: d[DeclaredTalos], kube: k}
}

// KubeNode is a Kubernetes node as drift sees it.
type KubeNode struct {
	Name, Address, Kubelet string
}

// Observed is what the cluster reported.
type Observed struct {
	// Talos maps inventory node names to the version they report.
	Talos map[string]string
	// TalosErr maps inventory node names that did not answer to why.
	TalosErr map[string]string
	// Kube is false when there is no Kubernetes API (no kubeconfig or unreachable).
	Kube      bool
	KubeErr   string
	KubeNodes []KubeNode
	// Etcd is false when no control plane answered the member list.
	Etcd        bool
	EtcdMembers []EtcdMember
}

// EtcdMember is one etcd member.
type EtcdMember struct{ Name, PeerHost string }

// Finding is one difference.
type Finding struct {
	// Step is "talos", "kubernetes" or "membership".
	Step string
	// Text says what differs.
	Text string
	// Change is the exact Terraform change to make, or what to do first.
	Change string
}

// Report is the outcome of Analyze.
type Report struct {
	Findings []Finding
	// OK lines per step, for steps without findings.
	OK map[string]string
}

// Observe asks the cluster: every node's Talos version (one call per node,
// so a dead node cannot hide the others), the etcd member list (R4: every
// control plane targeted) and the Kubernetes nodes.
func Observe(ctx context.Context, c *cluster.Clients, inv cluster.Inventory) Observed {
	o := Observed{Talos: map[string]string{}, TalosErr: map[string]string{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, n := range inv.Nodes {
		wg.Go(func() {
			resp, err := c.Machine.Version(client.WithNode(ctx, n.Address), &emptypb.Empty{})
			tag := ""
			if err == nil {
				if len(resp.GetMessages()) == 0 {
					err = errors.New("empty version reply")
				} else {
					tag = resp.GetMessages()[0].GetVersion().GetTag()
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				o.TalosErr[n.Name] = status.Convert(err).Message()
			} else {
				o.Talos[n.Name] = tag
			}
		})
	}
	wg.Go(func() {
		resp, err := c.Machine.EtcdMemberList(client.WithNodes(ctx, cluster.EtcdTargets(inv)...), &machineapi.EtcdMemberListRequest{})
		if err != nil {
			return
		}
		for _, m := range resp.GetMessages() {
			if m.GetMetadata().GetError() != "" {
				continue
			}
			var ms []EtcdMember
			for _, mem := range m.GetMembers() {
				ms = append(ms, EtcdMember{Name: mem.GetHostname(), PeerHost: peerHost(mem.GetPeerUrls())})
			}
			mu.Lock()
			o.Etcd, o.EtcdMembers = true, ms
			mu.Unlock()
			return
		}
	})
	if c.Kube != nil {
		wg.Go(func() {
			list, err := c.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				o.KubeErr = err.Error()
				return
			}
			o.Kube = true
			for _, n := range list.Items {
				o.KubeNodes = append(o.KubeNodes, KubeNode{Name: n.Name, Address: internalIP(&n), Kubelet: n.Status.NodeInfo.KubeletVersion})
			}
		})
	} else {
		o.KubeErr = "no kubeconfig"
	}
	wg.Wait()
	return o
}

func internalIP(n *corev1.Node) string {
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	return ""
}

// peerHost is the host of the first peer URL ("https://10.0.0.2:2380" gives 10.0.0.2).
func peerHost(urls []string) string {
	if len(urls) == 0 {
		return ""
	}
	h := urls[0]
	if i := strings.Index(h, "://"); i >= 0 {
		h = h[i+3:]
	}
	if i := strings.LastIndex(h, ":"); i >= 0 {
		h = h[:i]
	}
	return strings.Trim(h, "[]")
}

func normV(v string) string {
	if v == "" || strings.HasPrefix(v, "v") {
		return v
	}
	return "v" + v
}

// Analyze compares declared values and inventory with what was observed.
func Analyze(inv cluster.Inventory, talosDecl, kubeDecl string, o Observed) Report {
	rep := Report{OK: map[string]string{}}
	add := func(step, text, change string) {
		rep.Findings = append(rep.Findings, Finding{Step: step, Text: text, Change: change})
	}
	// Talos versions (R18: bump the declaration only after every node runs it).
	talosByV := map[string][]string{}
	var unreachable []string
	for _, n := range inv.Nodes {
		if v, ok := o.Talos[n.Name]; ok {
			talosByV[normV(v)] = append(talosByV[normV(v)], n.Name)
		} else {
			unreachable = append(unreachable, n.Name)
		}
	}
	versionDrift("talos", VarTalosVersion, normV(talosDecl), talosByV, unreachable, "Talos", add, rep.OK)

	// Kubernetes versions, from the kubelets.
	if !o.Kube {
		rep.OK["kubernetes"] = "skipped: no Kubernetes API (" + o.KubeErr + ")"
	} else {
		kubeByV := map[string][]string{}
		for _, k := range o.KubeNodes {
			kubeByV[normV(k.Kubelet)] = append(kubeByV[normV(k.Kubelet)], k.Name)
		}
		versionDrift("kubernetes", VarKubernetesVersion, normV(kubeDecl), kubeByV, nil, "kubelet", add, rep.OK)
	}

	// Membership.
	before := len(rep.Findings)
	inInv := func(name, addr string) bool {
		for _, n := range inv.Nodes {
			if n.Name == name || (addr != "" && n.Address == addr) {
				return true
			}
		}
		return false
	}
	for _, n := range inv.Nodes {
		talosUp := o.Talos[n.Name] != ""
		inKube := false
		for _, k := range o.KubeNodes {
			if k.Name == n.Name || (k.Address != "" && k.Address == n.Address) {
				inKube = true
			}
		}
		inEtcd := false
		for _, m := range o.EtcdMembers {
			if m.Name == n.Name || m.PeerHost == n.Address {
				inEtcd = true
			}
		}
		etcdSaysGone := n.IsControlPlane() && o.Etcd && !inEtcd
		remove := fmt.Sprintf("remove the %q entry from %s, then /talos tf plan and apply (R8: only after the node was reset and its Kubernetes node deleted)", n.Name, VarNodes)
		switch {
		case o.Kube && !inKube && !talosUp && (!n.IsControlPlane() || !o.Etcd || etcdSaysGone):
			what := "is not a Kubernetes node and does not answer the Talos API"
			if etcdSaysGone {
				what += " or belong to etcd"
			}
			add("membership", fmt.Sprintf("%s (%s) is in the inventory but %s: removed, still in the inventory", n.Name, n.Address, what), remove)
		case o.Kube && !inKube:
			add("membership", fmt.Sprintf("%s (%s) is in the inventory and answers Talos but is not a Kubernetes node", n.Name, n.Address),
				fmt.Sprintf("no Terraform change yet: if %s is retired, reset it (/talos node remove) and then remove its %s entry; otherwise check its kubelet", n.Name, VarNodes))
		case !o.Kube && !talosUp && (!n.IsControlPlane() || etcdSaysGone):
			add("membership", fmt.Sprintf("%s (%s) does not answer the Talos API%s", n.Name, n.Address, map[bool]string{true: " and is not an etcd member", false: ""}[etcdSaysGone]),
				"if it was removed: "+remove+"; if not, it is down (/talos health)")
		}
	}
	for _, k := range o.KubeNodes {
		if !inInv(k.Name, k.Address) {
			add("membership", fmt.Sprintf("Kubernetes node %s (%s) is not in the inventory", k.Name, k.Address),
				fmt.Sprintf("add %q to %s if it belongs to the cluster; otherwise reset it and kubectl delete node %s", k.Name, VarNodes, k.Name))
		}
	}
	for _, m := range o.EtcdMembers {
		if !inInv(m.Name, m.PeerHost) {
			add("membership", fmt.Sprintf("etcd member %s (%s) is not in the inventory", m.Name, m.PeerHost),
				fmt.Sprintf("add %q to %s as a control plane if it belongs to the cluster; otherwise remove the member (talosctl etcd remove-member)", m.Name, VarNodes))
		}
	}
	if len(rep.Findings) == before {
		src := "Talos"
		if o.Etcd {
			src += ", etcd"
		}
		if o.Kube {
			src += ", Kubernetes"
		}
		rep.OK["membership"] = fmt.Sprintf("the %d inventory nodes match %s", len(inv.Nodes), src)
	}
	return rep
}

// versionDrift reports one declared version against running ones.
func versionDrift(step, variable, decl string, byV map[string][]string, unreachable []string, what string,
	add func(step, text, change string), ok map[string]string) {
	vs := make([]string, 0, len(byV))
	for v := range byV {
		vs = append(vs, v)
	}
	sort.Strings(vs)
	running := make([]string, len(vs))
	for i, v := range vs {
		running[i] = v + " on " + strings.Join(byV[v], ", ")
	}
	switch {
	case decl == "":
		add(step, fmt.Sprintf("%s is not declared; nodes run %s", variable, strings.Join(running, "; ")),
			fmt.Sprintf("expose %s as a Terraform output (or set declared.%s) so that drift can be checked", variable, variable))
	case len(unreachable) > 0:
		add(step, fmt.Sprintf("cannot read the %s version of %s (unreachable); the others run %s", what, strings.Join(unreachable, ", "), strings.Join(running, "; ")),
			fmt.Sprintf("no Terraform change: keep %s = %q until every node answers and runs one version (R18)", variable, decl))
	case len(vs) == 1 && vs[0] == decl:
		ok[step] = fmt.Sprintf("%s = %q: every node runs it (%d)", variable, decl, len(byV[decl]))
	case len(vs) == 1:
		add(step, fmt.Sprintf("every node runs %s %s but Terraform declares %s = %q", what, vs[0], variable, decl),
			fmt.Sprintf("set %s = %q in %s, then /talos tf plan and apply (every node runs it, R18)", variable, vs[0], variablesFile))
	case len(vs) == 0:
		// No nodes: nothing to compare.
		ok[step] = "no nodes reported"
	default:
		add(step, fmt.Sprintf("%s versions differ: %s; Terraform declares %s = %q", what, strings.Join(running, "; "), variable, decl),
			fmt.Sprintf("no Terraform change yet: keep %s = %q until every node runs one version (R18); finish or roll back the upgrade first", variable, decl))
	}
}

// Lines renders the report: one line per step or finding, then the changes.
func (r Report) Lines() []string {
	var out []string
	for _, step := range []string{"talos", "kubernetes", "membership"} {
		if l, ok := r.OK[step]; ok {
			out = append(out, "✅ "+step+": "+l)
		}
		for _, f := range r.Findings {
			if f.Step == step {
				out = append(out, "❌ "+step+": "+f.Text)
			}
		}
	}
	for _, f := range r.Findings {
		out = append(out, "→ "+f.Change)
	}
	return out
}

// Run observes, analyses and reports.
func (*Plugin) Run(ctx context.Context, req *sdk.OperationRequest, r sdk.Reporter) error {
	inv, err := cluster.InventoryFrom(&req.Cluster)
	if err != nil {
		return err
	}
	for _, s := range []string{"talos", "kubernetes", "membership"} {
		if err := r.StepStarted(s, ""); err != nil {
			return err
		}
	}
	clients, err := cluster.Connect(ctx, inv, &req.Credentials)
	if err != nil {
		return err
	}
	defer clients.Close()
	d := declared(req.Cluster.Declared)
	rep := Analyze(inv, d.talos, d.kube, Observe(ctx, clients, inv))
	for _, s := range []string{"talos", "kubernetes", "membership"} {
		var texts []string
		for _, f := range rep.Findings {
			if f.Step == s {
				texts = append(texts, f.Text)
			}
		}
		switch {
		case len(texts) > 0:
			err = r.StepFailed(s, strings.Join(texts, "; "))
		case strings.HasPrefix(rep.OK[s], "skipped"):
			err = r.StepSkipped(s, rep.OK[s])
		default:
			err = r.StepOK(s, rep.OK[s])
		}
		if err != nil {
			return err
		}
	}
	// The prepared Git change (if any) says whether the drift is being fixed.
	res := &sdk.Result{OK: len(rep.Findings) == 0, Lines: append(rep.Lines(), cluster.FollowupLines(req.Evidence.GitFollowups)...)}
	if res.OK {
		res.Summary = inv.Name + ": no drift between Terraform and the cluster"
	} else {
		res.Summary = fmt.Sprintf("%s: %d %s between Terraform and the cluster", inv.Name, len(rep.Findings), map[bool]string{true: "difference", false: "differences"}[len(rep.Findings) == 1])
		res.Error = rep.Findings[0].Text
	}
	return r.Result(res)
}
