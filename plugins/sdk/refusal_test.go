package sdk_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/talosbot/talosbot/plugins/sdk"
)

func TestRefusalThroughWrappedErrors(t *testing.T) {
	err := fmt.Errorf("checking gate: %w", sdk.Refuse("R1", "the health gate failed", "fix the cluster, then retry"))
	plan, perr := sdk.RefusalPlan(err)
	if perr != nil || plan.GetRefusal().GetRule() != "R1" || plan.GetRefusal().GetFix() != "fix the cluster, then retry" {
		t.Fatalf("RefusalPlan(wrapped refusal) = %v, %v; want a refused plan naming R1 with its fix", plan, perr)
	}
	res := sdk.RefusedResult(err, "")
	if res == nil || res.GetOk() || res.GetSummary() != "refused" || res.GetRefusal().GetReason() != "the health gate failed" {
		t.Fatalf("RefusedResult = %v; want ok=false, summary refused, the reason", res)
	}

	other := errors.New("connection refused")
	if plan, perr := sdk.RefusalPlan(other); plan != nil || !errors.Is(perr, other) {
		t.Fatalf("RefusalPlan(plain error) = %v, %v; want the error passed through", plan, perr)
	}
	if sdk.RefusedResult(other, "") != nil {
		t.Fatal("RefusedResult(plain error) must be nil: only rules refuse")
	}
}
