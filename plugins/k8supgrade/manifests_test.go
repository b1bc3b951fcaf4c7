package k8supgrade

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/talosbot/talosbot/plugins/sdk"
	"github.com/talosbot/talosbot/plugins/sdk/sdktest"
)

// TestManifestSync: on a cluster whose CoreDNS and flannel are at an older Talos's images
// (ageAddons), the plan and the dry run show the bootstrap manifest sync's server-side dry
// run — which objects it configures and the changed image fields — and change nothing; the
// run applies them after the kubelets (step bootstrap-manifests) and the add-ons end at the
// images the nodes' Talos renders, an object the inventory lists that Talos no longer renders
// is pruned (shown as "deleted" in the dry run), and the inventory lists what was applied; a
// second run finds them in sync and skips the step; an object another inventory owns stops
// the sync, named.
func TestManifestSync(t *testing.T) {
	t.Parallel()
	e := startSideEnv(t)
	defer func() { _ = e.c.Close() }()
	ctx := ctxFor(t, 5*time.Minute)

	// An object an older Talos rendered and this one no longer does: in the inventory, owned by it.
	kc := e.kube.Client
	stale := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "old-addon", Namespace: "kube-system",
		Annotations: map[string]string{"config.k8s.io/owning-inventory": "talos-bootstrap-manifests-inventory"}}}
	if _, err := kc.CoreV1().ConfigMaps("kube-system").Create(ctx, stale, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	inv, err := kc.CoreV1().ConfigMaps("kube-system").Get(ctx, "talos-bootstrap-manifests-inventory", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the sim's Talos v1.13 wrote no inventory: %v", err)
	}
	inv.Data["kube-system_old-addon__ConfigMap"] = ""
	if _, err := kc.CoreV1().ConfigMaps("kube-system").Update(ctx, inv, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	staleExists := func() bool {
		_, err := kc.CoreV1().ConfigMaps("kube-system").Get(ctx, "old-addon", metav1.GetOptions{})
		return err == nil
	}

	plan, err := New().Plan(ctx, e.request(target, "dry-run", "true"))
	if err != nil || plan.Refusal != nil {
		t.Fatalf("plan: %v %v", plan, err)
	}
	var title string
	for _, s := range plan.Steps {
		if s.ID == stepManifests {
			title = s.Title
		}
	}
	if !strings.Contains(title, "configured Deployment/kube-system/coredns") || !strings.Contains(title, "configured DaemonSet/kube-system/kube-flannel") {
		t.Fatalf("plan step %s: %q", stepManifests, title)
	}

	rec, err := sdktest.Run(ctx, New(), e.request(target, "dry-run", "true"), nil)
	res := rec.FinalResult()
	if err != nil || !res.OK {
		t.Fatalf("dry run: %v %v", res, err)
	}
	text := strings.Join(res.Lines, "\n")
	t.Logf("dry run:\n%s", text)
	for _, w := range []string{
		"🔜 bootstrap manifests (server-side dry run): ",
		"configured Deployment/kube-system/coredns",
		"spec.template.spec.containers[0].image: registry.k8s.io/coredns/coredns:v1.13.2 → registry.k8s.io/coredns/coredns:v1.14.6",
		"spec.template.spec.containers[0].image: ghcr.io/siderolabs/flannel:v0.27.4 → ghcr.io/siderolabs/flannel:0.28.8",
		"deleted ConfigMap/kube-system/old-addon",
	} {
		if !strings.Contains(text, w) {
			t.Fatalf("dry run lacks %q", w)
		}
	}
	if got := addonImages(t, e); got != oldAddons || !staleExists() {
		t.Fatalf("the dry run changed the add-ons (%s) or pruned (stale object there: %v)", got, staleExists())
	}

	stepStatus := func(rec *sdktest.Recorder) (sdk.StepStatus, string) {
		var st sdk.StepStatus
		var detail string
		for _, ev := range rec.Steps() {
			if ev.StepID == stepManifests {
				st, detail = ev.Status, ev.Detail
			}
		}
		return st, detail
	}

	rec, err = sdktest.Run(ctx, New(), e.request(target), nil)
	if res := rec.FinalResult(); err != nil || !res.OK {
		t.Fatalf("run: %v %v\n%s", res, err, strings.Join(res.Lines, "\n"))
	}
	if st, detail := stepStatus(rec); st != sdk.StepOK || !strings.Contains(detail, "configured Deployment/kube-system/coredns") {
		t.Fatalf("step %s: %v %q", stepManifests, st, detail)
	}
	if got := addonImages(t, e); got != newAddons {
		t.Fatalf("add-ons after the upgrade: %s, want %s", got, newAddons)
	}
	// Pruned and dropped from the inventory, which lists every object the sync applied.
	if staleExists() {
		t.Fatal("the object Talos no longer renders was not pruned")
	}
	inv, err = kc.CoreV1().ConfigMaps("kube-system").Get(ctx, "talos-bootstrap-manifests-inventory", metav1.GetOptions{})
	if _, stillListed := inv.Data["kube-system_old-addon__ConfigMap"]; err != nil || stillListed || len(inv.Data) != 21 {
		t.Fatalf("inventory after the sync (%v): %d entries, old-addon listed %v", err, len(inv.Data), stillListed)
	}

	rec, err = sdktest.Run(ctx, New(), e.request(target), nil)
	if res := rec.FinalResult(); err != nil || !res.OK {
		t.Fatalf("second run: %v %v", res, err)
	}
	if st, detail := stepStatus(rec); st != sdk.StepSkipped || !strings.Contains(detail, "already in sync") {
		t.Fatalf("second run, step %s: %v %q", stepManifests, st, detail)
	}

	// An object another inventory owns is never taken over: the sync stops, naming it.
	cm, err := kc.CoreV1().ConfigMaps("kube-system").Get(ctx, "kube-flannel-cfg", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Annotations["config.k8s.io/owning-inventory"] = "gitops-cni"
	if _, err := kc.CoreV1().ConfigMaps("kube-system").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	rec, err = sdktest.Run(ctx, New(), e.request(target), nil)
	res = rec.FinalResult()
	if err != nil || res.OK || !strings.Contains(res.Error, `ConfigMap/kube-system/kube-flannel-cfg: the live object belongs to inventory "gitops-cni"`) {
		t.Fatalf("foreign inventory: ok=%v %q %v", res.OK, res.Error, err)
	}
	if st, _ := stepStatus(rec); st != sdk.StepFailed {
		t.Fatalf("foreign inventory: step %s %v", stepManifests, st)
	}
}
