package engine_test

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/talosbot/talosbot/bot/engine"
	"github.com/talosbot/talosbot/bot/render"
	lifecyclev1 "github.com/talosbot/talosbot/plugins/sdk/proto/lifecycle/v1"
	"github.com/talosbot/talosbot/state"
)

// FuzzProgressDecode feeds arbitrary bytes through what the engine does with
// a plugin's progress event: decode, apply to the operation, render. A
// misbehaving plugin must never crash the bot.
func FuzzProgressDecode(f *testing.F) {
	for _, p := range []*lifecyclev1.Progress{
		{Event: &lifecyclev1.Progress_Step{Step: &lifecyclev1.StepEvent{StepId: "a", Status: lifecyclev1.StepStatus_STEP_STATUS_OK, Node: "cp-1", FromVersion: "v1.12.6", ToVersion: "v1.13.9"}}},
		{Event: &lifecyclev1.Progress_Log{Log: &lifecyclev1.LogLine{Level: "info", Message: "x"}}},
		{Event: &lifecyclev1.Progress_Artifact{Artifact: &lifecyclev1.Artifact{Id: "s", Size: 32}}},
		{Event: &lifecyclev1.Progress_Result{Result: &lifecyclev1.Result{Ok: false, Lines: []string{"❌"}}}},
	} {
		b, _ := proto.Marshal(p)
		f.Add(b)
	}
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, raw []byte) {
		var p lifecyclev1.Progress
		if err := proto.Unmarshal(raw, &p); err != nil {
			return
		}
		op := &state.Operation{ID: "op", Command: "upgrade talos", State: state.StateRunning, StartedAt: now,
			Steps: []state.Step{{ID: "a", Title: "cp-1", Status: "pending"}}}
		if s := p.GetStep(); s != nil {
			engine.ApplyStep(op, s, now)
		}
		m := render.RenderOperation(op, p.GetResult().GetLines(), now)
		if m.Title == "" {
			t.Fatal("empty title")
		}
	})
}
