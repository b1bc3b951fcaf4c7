package talosupgrade

import (
	"strings"
	"testing"
	"time"

	"github.com/talosbot/talosbot/plugins/cluster/k8s"
	"github.com/talosbot/talosbot/plugins/sdk"
	"github.com/talosbot/talosbot/plugins/sdk/sdktest"
	"github.com/talosbot/talosbot/sim"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestRefusesAnUpgradeThatStrandsKubernetes: Talos v1.13 supports
// Kubernetes 1.31–1.36; a cluster on 1.30 is refused (R20) with the
// Kubernetes upgrade to do first, and no node is touched. On a supported
// version the plan says so.
func TestRefusesAnUpgradeThatStrandsKubernetes(t *testing.T) {
	t.Parallel()
	slow(t)
	e := start(t, 1, 1, true, func(o *sim.Options) { o.KubernetesVersion = "v1.30.4" })
	req := e.request(t, target)
	req.Evidence.Releases = &sdk.Releases{Versions: []string{"v1.12.6", "v1.13.9"}, Targets: []string{"v1.12.6", "v1.13.9"},
		Kubernetes: []string{"1.30.14", "1.31.14"}}
	refusedEverywhere(t, e, req, "R20", "would leave Kubernetes 1.30.4 unsupported")
	plan, err := (&Plugin{}).Plan(ctxFor(t, time.Minute), req)
	if err != nil {
		t.Fatal(err)
	}
	if fix := plan.Refusal.Fix; !strings.Contains(fix, "/talos upgrade k8s 1.31.14") {
		t.Errorf("fix: %s", fix)
	}
}

func TestPlanShowsKubernetesSupport(t *testing.T) {
	t.Parallel()
	slow(t)
	e := start(t, 1, 1, true, nil) // the sim's Kubernetes: v1.35.2
	plan, err := (&Plugin{}).Plan(ctxFor(t, time.Minute), e.request(t, target))
	if err != nil || plan.Refusal != nil {
		t.Fatalf("plan %v, %v", plan, err)
	}
	for _, p := range plan.Preconditions {
		if p.Name == "Kubernetes support" && p.Detail == "Kubernetes 1.35.2 is supported by Talos v1.13 (1.31–1.36)" {
			return
		}
	}
	t.Errorf("no Kubernetes support precondition: %v", plan.Preconditions)
}

// TestUnknownKubernetesIsNotAPassedPrecondition: without a kubeconfig the
// running Kubernetes version is unknown, so R20 was not checked: the plan
// says so in a warning and has no "ok" Kubernetes support precondition
// (the card showed "✅ ok Kubernetes support (R20): … unknown", issue 31).
func TestUnknownKubernetesIsNotAPassedPrecondition(t *testing.T) {
	t.Parallel()
	e := start(t, 1, 1, false, nil)
	plan, err := (&Plugin{}).Plan(ctxFor(t, time.Minute), e.request(t, target))
	if err != nil || plan.Refusal != nil {
		t.Fatalf("plan %v, %v", plan, err)
	}
	for _, p := range plan.Preconditions {
		if p.Rule == "R20" {
			t.Errorf("R20 shown as a precondition (ok=%v) while the Kubernetes version is unknown: %s", p.OK, p.Detail)
		}
	}
	for _, w := range plan.Warnings {
		if strings.HasPrefix(w, "Kubernetes support (R20) not checked: ") && strings.Contains(w, "the running Kubernetes version is unknown") {
			return
		}
	}
	t.Errorf("no warning that R20 was not checked: %q", plan.Warnings)
}

// TestRunningKubernetesIsTheLowestComponent: the running Kubernetes whose
// support a Talos upgrade checks (R20) is the lowest version the cluster
// runs — apiserver, control-plane static pods, kubelets — as the
// Kubernetes upgrade reads it, not the kubelets alone: a Kubernetes upgrade
// that stopped with kube-controller-manager still on 1.30.4 leaves
// Kubernetes 1.30.4 running, which Talos v1.13 does not support.
func TestRunningKubernetesIsTheLowestComponent(t *testing.T) {
	t.Parallel()
	slow(t)
	e := start(t, 1, 1, true, func(o *sim.Options) { o.KubernetesVersion = "v1.31.4" })
	ctx := ctxFor(t, time.Minute)
	req := e.request(t, target)
	req.Evidence.Releases = sdktest.Releases("v1.12.6", "v1.13.9")
	if plan, err := (&Plugin{}).Plan(ctx, req); err != nil || plan.Refusal != nil {
		t.Fatalf("Kubernetes 1.31.4 everywhere: %v %v", err, plan.Refusal)
	}

	pods := e.kube.Client.CoreV1().Pods("kube-system")
	name := k8s.StaticPodName("kube-controller-manager", e.info(t, "cp-1").NodeName)
	pod, err := pods.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod.Spec.Containers[0].Image = "registry.k8s.io/kube-controller-manager:v1.30.4"
	if _, err := pods.Update(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	plan, err := (&Plugin{}).Plan(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	requireRefusal(t, plan, "R20", "would leave Kubernetes 1.30.4 unsupported")
}
