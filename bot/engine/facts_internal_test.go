package engine

import (
	"testing"

	"google.golang.org/protobuf/encoding/protojson"

	lifecyclev1 "github.com/talosbot/talosbot/plugins/sdk/proto/lifecycle/v1"
	"github.com/talosbot/talosbot/state"
)

// The thread gets failures, warnings and each node's result; not every step.
func TestThreadWorthy(t *testing.T) {
	o := &state.Operation{Steps: []state.Step{
		{ID: "snapshot-write"}, {ID: "gate-before/etcd"},
		{ID: "w1/upgrade", Node: "w1"}, {ID: "w1/gate", Node: "w1"},
	}}
	ev := func(id string, st lifecyclev1.StepStatus, detail string) *lifecyclev1.StepEvent {
		return &lifecyclev1.StepEvent{StepId: id, Status: st, Detail: detail}
	}
	ok, failed, running := lifecyclev1.StepStatus_STEP_STATUS_OK, lifecyclev1.StepStatus_STEP_STATUS_FAILED, lifecyclev1.StepStatus_STEP_STATUS_RUNNING
	for _, c := range []struct {
		ev   *lifecyclev1.StepEvent
		want bool
	}{
		{ev("snapshot-write", ok, "32 MiB, sha256 ab12"), false},
		{ev("gate-before/etcd", ok, "3/3 healthy"), false},
		{ev("gate-before/etcd", ok, "⚠️ 1 member slow"), true},
		{ev("gate-before/etcd", failed, "no leader"), true},
		{ev("w1/upgrade", ok, "v1.13.9, boot id changed"), false}, // not the node's last step
		{ev("w1/gate", ok, "gate passed"), true},                  // the node's result
		{ev("w1/gate", running, "waiting"), false},
		{ev("w1/gate", ok, ""), false},
	} {
		if got := threadWorthy(o, c.ev); got != c.want {
			t.Errorf("%s %s %q: %v, want %v", c.ev.GetStepId(), c.ev.GetStatus(), c.ev.GetDetail(), got, c.want)
		}
	}
}

// A rollback's target is the version the node ran before the newest upgrade
// on record that brought it to its current one, and only if that step ran.
func TestPreviousVersions(t *testing.T) {
	plan := func(from, to string) []byte {
		raw, _ := protojson.Marshal(&lifecyclev1.OperationPlan{Steps: []*lifecyclev1.Step{
			{Id: "w1/upgrade", Node: "w1", FromVersion: from, ToVersion: to, Kind: "upgrade"}}})
		return raw
	}
	back := map[string]string{"w1": "v1.13.10"}
	f := &Facts{}
	notRun := &state.Operation{Plan: plan("v1.13.9", "v1.13.10"), Steps: []state.Step{{ID: "w1/upgrade", Status: "failed"}}}
	previousVersions(notRun, back, f)
	if f.Previous["w1"] != "" {
		t.Fatalf("a step that did not run counted: %v", f.Previous)
	}
	ran := &state.Operation{Plan: plan("v1.13.9", "v1.13.10"), Steps: []state.Step{{ID: "w1/upgrade", Status: "ok"}}}
	older := &state.Operation{Plan: plan("v1.13.8", "v1.13.10"), Steps: []state.Step{{ID: "w1/upgrade", Status: "ok"}}}
	previousVersions(ran, back, f)
	previousVersions(older, back, f) // newest first: the older one does not replace it
	if f.Previous["w1"] != "v1.13.9" {
		t.Fatalf("previous = %v, want w1: v1.13.9", f.Previous)
	}
}
