package k8supgrade

import (
	"context"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/talosbot/talosbot/plugins/cluster"
	"github.com/talosbot/talosbot/plugins/cluster/k8s"
	"github.com/talosbot/talosbot/plugins/cluster/k8s/preflight"
)

// preflightResult is what the pre-flight checks read and found.
type preflightResult struct {
	findings []preflight.Finding
	// kubelets maps node name → the kubelet image its KubeletSpec runs.
	kubelets map[string]string
	// counted are the removed API resources that were counted, for the plan's detail.
	counted []preflight.Resource
}

// runPreflight is `talosctl upgrade-k8s`'s pre-flight checks with our data
// (plugins/cluster/k8s/preflight): every control plane's static pod command lines and every
// node's kubelet arguments and configuration, read from Talos, and the objects of each API
// resource the path removes, counted through the Kubernetes API.
func runPreflight(ctx context.Context, c *cluster.Clients, inv cluster.Inventory, from, target string, table preflight.Table) (*preflightResult, error) {
	out := &preflightResult{kubelets: map[string]string{}}
	in := preflight.Input{From: from, To: target}

	for _, n := range inv.Nodes {
		pn := preflight.Node{Name: nodeLabel(n), Args: map[preflight.Component][]string{}}

		if n.Role == cluster.RoleControlPlane {
			args, err := k8s.StaticPodArgs(ctx, c, n)
			if err != nil {
				return nil, err
			}

			for comp, a := range args {
				pn.Args[preflight.Component(comp)] = a
			}
		}

		ks, err := k8s.KubeletSpecOf(ctx, c, n)
		if err != nil {
			return nil, err
		}

		out.kubelets[n.Name] = ks.Image
		pn.Args[preflight.Kubelet] = ks.Args
		pn.KubeletConfig = ks.Config
		in.Nodes = append(in.Nodes, pn)
	}

	res, err := table.ResourcesToCount(from, target)
	if err != nil {
		return nil, err
	}

	for _, r := range res {
		n, err := countObjects(ctx, c, r)
		if err != nil {
			return nil, err
		}

		out.counted = append(out.counted, r)
		in.Resources = append(in.Resources, preflight.InUse{Resource: r, Count: n})
	}

	out.findings, err = table.Check(in)
	if err != nil {
		return nil, err
	}

	return out, nil
}

// countObjects lists a resource through the dynamic client; a resource the server does not
// serve has no objects.
func countObjects(ctx context.Context, c *cluster.Clients, r preflight.Resource) (int, error) {
	if c.Dynamic == nil {
		return 0, fmt.Errorf("no Kubernetes API to count %s objects: configure the cluster's kubeconfig", r)
	}

	list, err := c.Dynamic.Resource(schema.GroupVersionResource{Group: r.Group, Version: r.Version, Resource: r.Resource}).List(ctx, metav1.ListOptions{})
	if apierrors.IsNotFound(err) {
		return 0, nil
	}

	if err != nil {
		return 0, fmt.Errorf("count %s objects: %w", r, err)
	}

	return len(list.Items), nil
}

// nodeLabel names a node in findings: its inventory name and the address it was read at.
func nodeLabel(n cluster.Node) string { return n.Name + " (" + n.Address + ")" }

// refusal turns findings into the plan's refusal: each finding and its fix.
func (p *preflightResult) refusal(target string) (reason, fix string) {
	var what, fixes []string

	seen := map[string]bool{}

	for _, f := range p.findings {
		what = append(what, f.String())

		if fx := f.Fix() + " on " + f.Node; f.Node != "" && !seen[fx] {
			seen[fx] = true
			fixes = append(fixes, fx)
		} else if f.Node == "" && !seen[f.Fix()] {
			seen[f.Fix()] = true
			fixes = append(fixes, f.Fix())
		}
	}

	reason = fmt.Sprintf("Kubernetes %s removed what the cluster still uses (the pre-flight checks of talosctl upgrade-k8s): %s; "+
		"the component would not start after the switch", target, strings.Join(what, "; "))
	fix = strings.Join(fixes, "; ") + "; then plan the upgrade again"

	return reason, fix
}

// detail is the precondition's text when nothing was found.
func (p *preflightResult) detail(nodes int, from, target string) string {
	d := fmt.Sprintf("%s → %s: no removed flag, admission plugin or feature gate in the static pods and kubelets of %d node(s)", from, target, nodes)
	if len(p.counted) > 0 {
		names := make([]string, len(p.counted))
		for i, r := range p.counted {
			names[i] = r.String()
		}

		d += "; no objects of " + strings.Join(names, ", ")
	}

	return d
}
