package sdk_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/talosbot/talosbot/plugins/sdk"
)

func TestRefusalThroughWrappedErrors(t *testing.T) {
	err := fmt.Errorf("checking gate: %w", sdk.Refuse("R1", "the health gate failed", "fix the cluster, then retry"))
	plan, perr := sdk.RefusalPlan(err)
	if perr != nil || plan.Refusal.Rule != "R1" || plan.Refusal.Fix != "fix the cluster, then retry" {
		t.Fatalf("RefusalPlan(wrapped refusal) = %v, %v; want a refused plan naming R1 with its fix", plan, perr)
	}
	res := sdk.RefusedResult(err, "")
	if res == nil || res.OK || res.Summary != "refused" || res.Refusal.Reason != "the health gate failed" {
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

// Quote and Clip show at most QuoteRunes runes of what a user typed.
func TestQuoteAndClipAreShort(t *testing.T) {
	long := strings.Repeat("é", 60<<10)
	if got, want := sdk.Quote(long), `"`+strings.Repeat("é", sdk.QuoteRunes)+`"…`; got != want {
		t.Fatalf("Quote = %.100q…", got)
	}
	if got, want := sdk.Clip(long), strings.Repeat("é", sdk.QuoteRunes)+"…"; got != want {
		t.Fatalf("Clip = %.100q…", got)
	}
	if sdk.Quote("cp-9") != `"cp-9"` || sdk.Clip("cp-9") != "cp-9" {
		t.Fatalf("short values change: %s %s", sdk.Quote("cp-9"), sdk.Clip("cp-9"))
	}
}
