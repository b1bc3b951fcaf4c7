package engine_test

import (
	"testing"
	"time"

	"github.com/talosbot/talosbot/bot/engine"
	"github.com/talosbot/talosbot/config"
	"github.com/talosbot/talosbot/plugins/sdk"
	"github.com/talosbot/talosbot/state"
)

// R6: only a real success in the staging environment, on the same target,
// ended within the promotion window, is staging evidence. A production or
// development success, another target, an older one, or a dry run is not.
// (Issue 34: which environment counts survived mutation.)
func TestStagingEvidenceIsAStagingSuccessOfTheSameTarget(t *testing.T) {
	since := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	good := state.Operation{Environment: config.EnvStaging, Target: "v1.13.9", EndedAt: since.Add(time.Hour)}
	if !engine.StagingEvidence(&good, "v1.13.9", since) {
		t.Fatal("a staging success of the target is not evidence")
	}
	atEdge := good
	atEdge.EndedAt = since
	if !engine.StagingEvidence(&atEdge, "v1.13.9", since) {
		t.Error("a staging success ending exactly at the window's start is not evidence")
	}
	for name, mutate := range map[string]func(o *state.Operation){
		"production":     func(o *state.Operation) { o.Environment = config.EnvProduction },
		"development":    func(o *state.Operation) { o.Environment = "development" },
		"another target": func(o *state.Operation) { o.Target = "v1.13.8" },
		"too old":        func(o *state.Operation) { o.EndedAt = since.Add(-time.Second) },
		"a dry run":      func(o *state.Operation) { o.Args = map[string]string{sdk.ArgDryRun: "true"} },
	} {
		o := good
		mutate(&o)
		if engine.StagingEvidence(&o, "v1.13.9", since) {
			t.Errorf("%s counts as staging evidence", name)
		}
	}
}
