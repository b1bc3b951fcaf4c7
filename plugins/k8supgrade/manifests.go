package k8supgrade

import (
	"context"
	"fmt"
	"strings"

	"github.com/talosbot/talosbot/plugins/cluster"
	"github.com/talosbot/talosbot/plugins/cluster/k8s"
)

// The bootstrap manifest sync, last of talosctl upgrade-k8s's steps (Talos v1.13.9
// pkg/cluster/kubernetes/talos_managed.go PerformManifestsSync, after the kubelets): the
// manifests a control plane's Talos renders now (k8s.Manifest resources: CoreDNS, the CNI,
// kube-proxy, RBAC, …, at the add-on versions of the Talos it runs) are server-side applied
// with field manager "talos". The plan runs it as a server-side dry run and shows the diff.

// maxDiffLines bounds the diff lines shown per object in the dry run.
const maxDiffLines = 8

// manifestSource is the control plane whose Talos renders the manifests: the first in the
// inventory, as talosctl uses its first node.
func (a *assessment) manifestSource() (cluster.Node, bool) {
	cps := a.inv.ControlPlanes()
	if len(cps) == 0 {
		return cluster.Node{}, false
	}
	return cps[0], true
}

// planManifests computes the sync's dry run. It changes nothing; a failure is a warning
// (the sync itself runs, and stops the run on its error, after the kubelets).
func (a *assessment) planManifests(ctx context.Context, c *cluster.Clients) {
	cp, ok := a.manifestSource()
	if !ok {
		return
	}
	objs, err := k8s.BootstrapManifests(ctx, c, cp)
	if err == nil {
		a.manifests, err = k8s.SyncManifests(ctx, c, objs, k8s.SyncOptions{DryRun: true})
	}
	if err != nil {
		a.manifests = nil
		a.warnings = append(a.warnings, "the bootstrap manifest sync could not be previewed: "+err.Error())
	}
}

// manifestChanges counts a sync's changes by action and lists those that change something.
func manifestChanges(changes []k8s.ManifestChange) (counts string, changed []k8s.ManifestChange) {
	n := map[string]int{}
	for _, ch := range changes {
		n[ch.Action]++
		if ch.Action != "unchanged" {
			changed = append(changed, ch)
		}
	}
	var parts []string
	for _, act := range []string{"created", "configured", "deleted", "unchanged"} {
		if n[act] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n[act], act))
		}
	}
	if len(parts) == 0 {
		return "no objects", nil
	}
	return strings.Join(parts, ", "), changed
}

// manifestsTitle is the plan step's title, with what the dry run found.
func (a *assessment) manifestsTitle() string {
	t := "sync the bootstrap manifests Talos renders (server-side apply, field manager talos), wait for their rollout"
	if a.manifests == nil {
		return t
	}
	counts, changed := manifestChanges(a.manifests)
	names := make([]string, 0, len(changed))
	for _, ch := range changed {
		names = append(names, ch.String())
	}
	if len(names) > 0 {
		counts += ": " + strings.Join(names, ", ")
	}
	return t + " (dry run: " + counts + ")"
}

// manifestLines are the dry run's lines for the sync: each object it would change, with its
// diff.
func (a *assessment) manifestLines() []string {
	if a.manifests == nil {
		return nil
	}
	counts, changed := manifestChanges(a.manifests)
	out := []string{"🔜 bootstrap manifests (server-side dry run): " + counts}
	for _, ch := range changed {
		out = append(out, "   "+ch.String())
		for i, d := range ch.Diff {
			if i == maxDiffLines {
				out = append(out, fmt.Sprintf("     … and %d more field(s)", len(ch.Diff)-maxDiffLines))
				break
			}
			out = append(out, "     "+d)
		}
	}
	return out
}

// syncManifests is the run's sync: read the manifests again (the run changed the machine
// config, so kube-proxy's image is the target now), apply them, wait for the Deployments and
// DaemonSets that changed to roll out.
func (ru *run) syncManifests(ctx context.Context) error {
	id := ru.a.hop.prefix + stepManifests
	fail := func(err error) error {
		_ = ru.r.StepFailed(id, err.Error())
		return err
	}
	cp, ok := ru.a.manifestSource()
	if !ok {
		return fail(fmt.Errorf("no control plane in the inventory to read the bootstrap manifests from"))
	}
	_ = ru.r.StepStarted(id, "server-side applying the bootstrap manifests of "+cp.Name)
	objs, err := k8s.BootstrapManifests(ctx, ru.c, cp)
	if err != nil {
		return fail(err)
	}
	changes, err := k8s.SyncManifests(ctx, ru.c, objs, k8s.SyncOptions{Wait: ru.timeout})
	if err != nil {
		return fail(err)
	}
	counts, changed := manifestChanges(changes)
	if len(changed) == 0 {
		ru.skipped++
		return ru.r.StepSkipped(id, "bootstrap manifests already in sync ("+counts+")")
	}
	names := make([]string, 0, len(changed))
	for _, ch := range changed {
		names = append(names, ch.String())
	}
	detail := counts + ": " + strings.Join(names, ", ")
	ru.lines = append(ru.lines, "✅ bootstrap manifests: "+detail)
	return ru.r.StepOK(id, detail)
}
