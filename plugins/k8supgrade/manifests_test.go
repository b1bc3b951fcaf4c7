package k8supgrade

import (
	"strings"
	"testing"
	"time"

	lifecyclev1 "github.com/talosbot/talosbot/plugins/proto/lifecycle/v1"
	"github.com/talosbot/talosbot/plugins/sdk/sdktest"
)

// TestManifestSync: on a cluster whose CoreDNS and flannel are at an older Talos's images
// (ageAddons), the plan and the dry run show the bootstrap manifest sync's server-side dry
// run — which objects it configures and the changed image fields — and change nothing; the
// run applies them after the kubelets (step bootstrap-manifests) and the add-ons end at the
// images the nodes' Talos renders; a second run finds them in sync and skips the step.
func TestManifestSync(t *testing.T) {
	e := startSideEnv(t)
	defer func() { _ = e.c.Close() }()
	ctx := ctxFor(t, 5*time.Minute)

	plan, err := New().Plan(ctx, e.request(target, "dry-run", "true"))
	if err != nil || plan.GetRefusal() != nil {
		t.Fatalf("plan: %v %v", plan, err)
	}
	var title string
	for _, s := range plan.GetSteps() {
		if s.GetId() == stepManifests {
			title = s.GetTitle()
		}
	}
	if !strings.Contains(title, "configured Deployment/kube-system/coredns") || !strings.Contains(title, "configured DaemonSet/kube-system/kube-flannel") {
		t.Fatalf("plan step %s: %q", stepManifests, title)
	}

	rec, err := sdktest.Run(ctx, New(), e.request(target, "dry-run", "true"), nil)
	res := rec.FinalResult()
	if err != nil || !res.GetOk() {
		t.Fatalf("dry run: %v %v", res, err)
	}
	text := strings.Join(res.GetLines(), "\n")
	t.Logf("dry run:\n%s", text)
	for _, w := range []string{
		"🔜 bootstrap manifests (server-side dry run): ",
		"configured Deployment/kube-system/coredns",
		"spec.template.spec.containers[0].image: registry.k8s.io/coredns/coredns:v1.13.2 → registry.k8s.io/coredns/coredns:v1.14.6",
		"spec.template.spec.containers[0].image: ghcr.io/siderolabs/flannel:v0.27.4 → ghcr.io/siderolabs/flannel:0.28.8",
	} {
		if !strings.Contains(text, w) {
			t.Fatalf("dry run lacks %q", w)
		}
	}
	if got := addonImages(t, e); got != oldAddons {
		t.Fatalf("the dry run changed the add-ons: %s", got)
	}

	stepStatus := func(rec *sdktest.Recorder) (lifecyclev1.StepStatus, string) {
		var st lifecyclev1.StepStatus
		var detail string
		for _, ev := range rec.Steps() {
			if ev.GetStepId() == stepManifests {
				st, detail = ev.GetStatus(), ev.GetDetail()
			}
		}
		return st, detail
	}

	rec, err = sdktest.Run(ctx, New(), e.request(target), nil)
	if res := rec.FinalResult(); err != nil || !res.GetOk() {
		t.Fatalf("run: %v %v\n%s", res, err, strings.Join(res.GetLines(), "\n"))
	}
	if st, detail := stepStatus(rec); st != lifecyclev1.StepStatus_STEP_STATUS_OK || !strings.Contains(detail, "configured Deployment/kube-system/coredns") {
		t.Fatalf("step %s: %v %q", stepManifests, st, detail)
	}
	if got := addonImages(t, e); got != newAddons {
		t.Fatalf("add-ons after the upgrade: %s, want %s", got, newAddons)
	}

	rec, err = sdktest.Run(ctx, New(), e.request(target), nil)
	if res := rec.FinalResult(); err != nil || !res.GetOk() {
		t.Fatalf("second run: %v %v", res, err)
	}
	if st, detail := stepStatus(rec); st != lifecyclev1.StepStatus_STEP_STATUS_SKIPPED || !strings.Contains(detail, "already in sync") {
		t.Fatalf("second run, step %s: %v %q", stepManifests, st, detail)
	}
}
