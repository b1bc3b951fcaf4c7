package engine

import (
	"strings"
	"testing"
	"time"

	"github.com/talosbot/talosbot/bot/grammar"
	"github.com/talosbot/talosbot/config"
	lifecyclev1 "github.com/talosbot/talosbot/plugins/sdk/proto/lifecycle/v1"
)

// The scheduler may start a disruptive command only when its manifest
// declares maintenance and only inside the maintenance window of the
// cluster's environment; anything else is refused, naming why.
func TestScheduledDisruptionOnlyMaintenanceInWindow(t *testing.T) {
	cfg := &config.Config{Policy: map[string]config.Policy{"production": {Windows: []config.Window{{Days: []string{"sun"}, Start: "02:00", End: "05:00", Timezone: "UTC"}}}}}
	cl := &config.Cluster{Name: "prod", Environment: "production"}
	now := time.Date(2026, 12, 6, 3, 0, 0, 0, time.UTC) // a Sunday, 03:00
	e := &Engine{o: Options{Config: cfg, Clock: func() time.Time { return now }}}
	defrag := &grammar.Invocation{Spec: grammar.CommandSpec{Plugin: "etcdops", Command: &lifecyclev1.Command{Name: "etcd defrag", Effect: lifecyclev1.Effect_EFFECT_DISRUPTIVE, Maintenance: true}}}
	roll := &grammar.Invocation{Spec: grammar.CommandSpec{Plugin: "up", Command: &lifecyclev1.Command{Name: "upgrade talos", Effect: lifecyclev1.Effect_EFFECT_DISRUPTIVE}}}

	if err := e.scheduledDisruption(defrag, cl); err != nil {
		t.Fatalf("maintenance command in the window: %v", err)
	}
	if err := e.scheduledDisruption(roll, cl); err == nil || !strings.Contains(err.Error(), "a scheduled run may not run upgrade talos") {
		t.Fatalf("a disruptive command without maintenance: %v", err)
	}
	now = now.Add(3 * time.Hour) // 06:00, the window closed at 05:00
	if err := e.scheduledDisruption(defrag, cl); err == nil || !strings.Contains(err.Error(), "only inside the maintenance window of production (sun 02:00–05:00 UTC)") {
		t.Fatalf("outside the window: %v", err)
	}
	if err := e.scheduledDisruption(defrag, &config.Cluster{Name: "lab", Environment: "lab"}); err == nil {
		t.Fatal("an environment without windows let a scheduled disruption start")
	}
}
