package talosupgrade

import (
	"strings"
	"testing"
	"time"

	"github.com/talosbot/talosbot/internal/terraform/tftest"
	"github.com/talosbot/talosbot/plugins/cluster/planguard"
	"github.com/talosbot/talosbot/plugins/sdk"
	"github.com/talosbot/talosbot/plugins/sdk/sdktest"
)

// TestPlanGuardBeforeUpgradeRefuses: with plan_before_upgrade listing the cluster, a Terraform
// plan that would replace the cluster secrets stops the upgrade (R5) before
// any snapshot or node call.
func TestPlanGuardBeforeUpgradeRefuses(t *testing.T) {
	bin := tftest.Binary(t)
	root := tftest.Root(t, bin, nil)
	e := start(t, 1, 1, false, nil)
	req := e.request(t, target)
	req.Evidence.Terraform = &sdk.Terraform{Root: root, Binary: bin, ConfigKey: "clusters[0].credentials.terraform"}
	req.Config = []byte(`{"plan_before_upgrade": ["staging"]}`) // plugins.talosupgrade
	ctx := ctxFor(t, 2*time.Minute)
	plan, err := (&Plugin{}).Plan(ctx, req)
	if err != nil || plan.Steps[0].ID != planguard.Step().ID {
		t.Fatalf("the plan does not start with the guard: %v %v", plan, err)
	}
	t.Setenv("TF_VAR_secrets_generation", "2") // the fixture replaces talos_machine_secrets
	t.Setenv("TF_CLI_CONFIG_FILE", "")         // a stale one on the machine is not this test's subject
	rec, _ := sdktest.Run(ctx, &Plugin{}, req, nil)
	res := rec.FinalResult()
	if res.OK || res.Refusal.Rule != "R5" || !strings.Contains(res.Refusal.Reason, "talos_machine_secrets") {
		t.Fatalf("want an R5 refusal, got %v", res)
	}
	for _, n := range e.names() {
		if c := e.upgradeCalls(n); c != 0 {
			t.Fatalf("%s got %d upgrade calls after the plan guard refused", n, c)
		}
	}
	if len(rec.Artifacts()) != 0 {
		t.Fatal("a snapshot was taken before the guard refused")
	}
}

// TestPlanGuardRunsOnceForAPath: with plan_before_upgrade listing the cluster, a path of three
// hops runs the R5 guard once, before the first hop (as the Kubernetes
// upgrade does), not once per hop.
func TestPlanGuardRunsOnceForAPath(t *testing.T) {
	slow(t)
	bin := tftest.Binary(t)
	root := tftest.Root(t, bin, nil)
	_, req := startHops(t, 1, 1)
	req.Evidence.Terraform = &sdk.Terraform{Root: root, Binary: bin, ConfigKey: "clusters[0].credentials.terraform"}
	req.Config = []byte(`{"plan_before_upgrade": ["staging"]}`) // plugins.talosupgrade
	t.Setenv("TF_CLI_CONFIG_FILE", "")
	rec := runWatched(ctxFor(t, 8*time.Minute), &Plugin{}, req, nil)
	if res := rec.FinalResult(); !res.OK {
		t.Fatalf("run failed: %s: %s\n%s", res.Summary, res.Error, dump(rec.Steps()))
	}
	started := 0
	for i, s := range rec.Steps() {
		if s.StepID == planguard.Step().ID && s.Status == sdk.StepRunning {
			started++
			if i != 0 {
				t.Errorf("the guard started at event %d, not first", i)
			}
		}
	}
	if started != 1 {
		t.Fatalf("the plan guard ran %d times in a path of 3 hops, want once:\n%s", started, dump(rec.Steps()))
	}
}
