package engine

import (
	"strings"
	"testing"

	"github.com/talosbot/talosbot/bot/grammar"
	lifecyclev1 "github.com/talosbot/talosbot/plugins/sdk/proto/lifecycle/v1"
)

// The scheduler may start a disruptive command only when its manifest
// declares maintenance; the window and the freeze are the policy's
// (approvals.TestScheduledDisruptionPolicy).
func TestScheduledDisruptionOnlyMaintenance(t *testing.T) {
	e := &Engine{}
	defrag := &grammar.Invocation{Spec: grammar.CommandSpec{Plugin: "etcdops", Command: &lifecyclev1.Command{Name: "etcd defrag", Effect: lifecyclev1.Effect_EFFECT_DISRUPTIVE, Maintenance: true}}}
	roll := &grammar.Invocation{Spec: grammar.CommandSpec{Plugin: "up", Command: &lifecyclev1.Command{Name: "upgrade talos", Effect: lifecyclev1.Effect_EFFECT_DISRUPTIVE}}}
	if err := e.scheduledDisruption(defrag); err != nil {
		t.Fatalf("maintenance command: %v", err)
	}
	if err := e.scheduledDisruption(roll); err == nil || !strings.Contains(err.Error(), "a scheduled run may not run upgrade talos") {
		t.Fatalf("a disruptive command without maintenance: %v", err)
	}
}
