package talosupgrade

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/talosbot/talosbot/sim"
)

// TestNoOpUpgradePlansNothing: when every node already runs the target, the
// plan says "already at" and has no steps, so the host neither takes a
// snapshot nor runs a gate; the same holds for the nodes --nodes selects.
func TestNoOpUpgradePlansNothing(t *testing.T) {
	t.Parallel()
	e := start(t, 1, 1, false, func(o *sim.Options) { o.TalosVersion = target })
	ctx := ctxFor(t, time.Minute)
	for _, nodes := range []string{"", "worker-1"} {
		req := e.request(t, target)
		req.Args["nodes"] = nodes
		plan, err := (&Plugin{}).Plan(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		requireRefusal(t, plan, "", "already at "+target)
		if len(plan.Steps) != 0 {
			t.Fatalf("--nodes=%q: a no-op plan has steps: %v", nodes, plan.Steps)
		}
		if nodes != "" && !strings.Contains(plan.Refusal.Reason, "worker-1") {
			t.Fatalf("the refusal does not name the selection: %v", plan.Refusal)
		}
	}
	// A resume of a run interrupted after its last node is planned (the
	// host plans every resume): its verify and closing gate are still owed.
	req := e.request(t, target)
	req.Attempt = 2
	plan, err := (&Plugin{}).Plan(ctx, req)
	if err != nil || plan.Refusal != nil || len(plan.Steps) == 0 {
		t.Fatalf("a resume with every node at the target: %v %v", plan, err)
	}
}

// TestVersionWithoutVIsSaid: "1.13.9" plans v1.13.9 and the plan says it
// read it that way.
func TestVersionWithoutVIsSaid(t *testing.T) {
	t.Parallel()
	e := start(t, 1, 1, false, nil)
	plan, err := (&Plugin{}).Plan(ctxFor(t, time.Minute), e.request(t, "1.13.9"))
	if err != nil || plan.Refusal != nil {
		t.Fatalf("plan: %v %v", plan, err)
	}
	if plan.Target != target || !slices.Contains(plan.Warnings, `version "1.13.9" read as v1.13.9`) {
		t.Fatalf("target %q, warnings %q", plan.Target, plan.Warnings)
	}
}

// TestMinorAloneGetsDidYouMean: "v1.13" is refused (R10) with its newest
// known patch as the fix, spelled as a command; nothing is read or changed.
func TestMinorAloneGetsDidYouMean(t *testing.T) {
	t.Parallel()
	e := start(t, 1, 1, false, nil)
	refusedEverywhere(t, e, e.request(t, "v1.13"), "R10", "did you mean v1.13.9, the newest known v1.13 patch? /talos upgrade talos v1.13.9")
}
