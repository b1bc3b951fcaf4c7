package gate

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/client-go/kubernetes"

	"github.com/talosbot/talosbot/plugins/cluster/storage"
)

// probeStorage: every attached Longhorn volume healthy (status.robustness)
// and every CloudNativePG cluster with all its instances ready and its
// primary settled (storage.Postgres.Healthy). With neither installed, or
// nothing attached or declared, it is "not checked", never a pass (docs/UPGRADES.md, "Storage").
func probeStorage(ctx context.Context, g *gateRun) ProbeResult {
	set := storage.Defaults()
	if g.opts.Storage != nil {
		set = *g.opts.Storage
	}
	st, err := storage.Read(ctx, g.c.Kube, g.c.Dynamic, set)
	if err != nil {
		return kubeErr(g, "cannot read Longhorn or CloudNativePG", err)
	}
	if !st.LonghornInstalled && !st.CNPGInstalled {
		return ProbeResult{Status: StatusNotChecked, Detail: NotChecked + ": neither Longhorn nor CloudNativePG is installed (or enabled in the plugin's storage settings)"}
	}
	var bad []string
	vols := 0
	for _, v := range st.Volumes {
		if v.State != "attached" {
			continue
		}
		vols++
		if v.Robustness == "healthy" {
			continue
		}
		line := fmt.Sprintf("Longhorn volume %s is %s", v.Label(), v.Robustness)
		if p, ok := v.Progress(); ok {
			line += fmt.Sprintf(" (rebuilding %d %%)", p)
		}
		bad = append(bad, line)
	}
	for _, p := range st.Postgres {
		if !p.Healthy() {
			bad = append(bad, fmt.Sprintf("CloudNativePG %s: %d of %d instances ready, primary %s (target %s), phase %q",
				p.Key(), p.Ready, p.Instances, p.CurrentPrimary, p.TargetPrimary, p.Phase))
		}
	}
	if len(bad) > 0 {
		return ProbeResult{Status: StatusFail, Detail: strings.Join(bad, "; ")}
	}
	if vols == 0 && len(st.Postgres) == 0 {
		// Installed, but nothing to look at: a pass would claim a check
		// that read nothing.
		return ProbeResult{Status: StatusNotChecked, Detail: NotChecked + ": no attached Longhorn volume and no CloudNativePG cluster"}
	}
	return ProbeResult{Status: StatusOK, Detail: fmt.Sprintf("%d attached Longhorn volume(s) healthy; %d CloudNativePG cluster(s) with every instance ready", vols, len(st.Postgres))}
}

// PDBsByNode names, per node (Kubernetes names), the budgets at 0 allowed
// disruptions that cover a pod there: the drain forecast's PDB findings.
func PDBsByNode(ctx context.Context, kube kubernetes.Interface, nodes []string) (map[string][]string, error) {
	want := map[string]bool{}
	for _, n := range nodes {
		want[n] = true
	}
	blocking, _, err := BlockingPDBs(ctx, kube, want)
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for _, b := range blocking {
		for _, n := range slices.Sorted(maps.Keys(b.Pods)) {
			out[n] = append(out[n], fmt.Sprintf("PDB %s/%s (%s)", b.Namespace, b.Name, strings.Join(b.Pods[n], ", ")))
		}
	}
	return out, nil
}

// excuseMovedPDBs drops from blocking the CloudNativePG primary budgets
// that the plugin's storage step moves off the node before its drain
// (storage.State.MovedPDBs: the primary is switched over first), where the
// budget covers nothing else there; it says which, for the probe's detail.
// Nothing is excused without the dynamic client, with CNPG disabled or not
// installed, or with the switchover policy refuse.
func excuseMovedPDBs(ctx context.Context, g *gateRun, blocking []BlockingPDB) ([]BlockingPDB, []string, error) {
	if len(blocking) == 0 || g.c.Dynamic == nil {
		return blocking, nil, nil
	}
	set := storage.Defaults()
	if g.opts.Storage != nil {
		set = *g.opts.Storage
	}
	set.Longhorn = false // only CNPG's primaries matter here
	st, err := storage.Read(ctx, g.c.Kube, g.c.Dynamic, set)
	if err != nil {
		return nil, nil, err
	}
	var out []BlockingPDB
	var moved []string
	for _, b := range blocking {
		for _, n := range slices.Sorted(maps.Keys(b.Pods)) {
			pod, ok := st.MovedPDBs(n, set)[b.Namespace+"/"+b.Name]
			if ok && len(b.Pods[n]) == 1 && b.Pods[n][0] == pod {
				moved = append(moved, fmt.Sprintf("PDB %s/%s covers the CloudNativePG primary %s on %s: switched over before the drain", b.Namespace, b.Name, pod, n))
				delete(b.Pods, n)
			}
		}
		if len(b.Pods) > 0 {
			out = append(out, b)
		}
	}
	return out, moved, nil
}
