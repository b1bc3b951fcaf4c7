package engine_test

import (
	"context"
	"strings"
	"testing"

	"github.com/talosbot/talosbot/bot/engine"
	"github.com/talosbot/talosbot/state"
)

// maintenanceConfig lets the scheduler run the maintenance command tidy on
// staging unattended, Mondays 11:00–13:00 (the test clock starts Monday
// 12:00).
var maintenanceConfig = strings.Replace(testConfig, `  staging:
    operators: [alice, bob, carol]
`, `  staging:
    operators: [alice, bob, carol]
    no_approval_commands: [tidy]
    maintenance_windows: [{days: [mon], start: "11:00", end: "13:00", timezone: UTC}]
`, 1)

// A scheduled maintenance command (a System origin) in its window runs to
// the end on the configuration's authority, although the scheduler holds
// no role: the check right before Run must not refuse it for that.
func TestScheduledMaintenanceRunsInTheWindow(t *testing.T) {
	e := newEnvConfig(t, maintenanceConfig)
	sys := engine.Origin{User: "talosbot-schedule", Channel: "stg", System: true}
	id, err := e.eng.Submit(context.Background(), sys, "/talos tidy")
	if err != nil {
		t.Fatal(err)
	}
	e.await(id, state.StateSucceeded)
}

// A freeze stops scheduled maintenance as it stops any disruptive command:
// the scheduler's authority does not reach past a person's freeze.
func TestScheduledMaintenanceRespectsTheFreeze(t *testing.T) {
	e := newEnvConfig(t, maintenanceConfig)
	ctx := context.Background()
	if err := e.store.Update(ctx, func(tx *state.Tx) error {
		return engine.PutFreeze(tx, "staging", engine.Freeze{Reason: "release party", By: "dave", Since: e.clock.Now()})
	}); err != nil {
		t.Fatal(err)
	}
	sys := engine.Origin{User: "talosbot-schedule", Channel: "stg", System: true}
	id, err := e.eng.Submit(ctx, sys, "/talos tidy")
	if err == nil {
		op := e.await(id, state.StateRefused)
		t.Fatalf("a scheduled maintenance run was accepted on a frozen cluster (%s, %s)", op.ID, op.State)
	}
	if !strings.Contains(err.Error(), "frozen") {
		t.Fatalf("refusal %v, want the freeze named", err)
	}
}
