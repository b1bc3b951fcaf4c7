package sdktest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/talosbot/talosbot/plugins/sdk"
	lifecyclev1 "github.com/talosbot/talosbot/plugins/sdk/proto/lifecycle/v1"
)

type plug struct {
	run func(ctx context.Context, r sdk.Reporter) error
}

func (plug) Describe(context.Context) (*lifecyclev1.Manifest, error) {
	return &lifecyclev1.Manifest{Commands: []*lifecyclev1.Command{{Name: "x"}}}, nil
}
func (plug) Plan(context.Context, *lifecyclev1.OperationRequest) (*lifecyclev1.OperationPlan, error) {
	return &lifecyclev1.OperationPlan{}, nil
}
func (p plug) Run(ctx context.Context, _ *lifecyclev1.OperationRequest, r sdk.Reporter) error {
	return p.run(ctx, r)
}

func TestRunRecordsAndFinishes(t *testing.T) {
	now := time.Unix(100, 0)
	clock := func() time.Time { return now }
	var leaked sdk.Reporter
	rec, err := Run(t.Context(), plug{run: func(_ context.Context, r sdk.Reporter) error {
		leaked = r
		_ = r.StepStarted("gate", "")
		_ = r.Log("warn", "gate", "slow")
		_ = r.Artifact(&lifecyclev1.Artifact{Id: "snap-1"})
		_ = r.StepFailed("gate", "etcd")
		return errors.New("gate failed")
	}}, &lifecyclev1.OperationRequest{Command: "x"}, clock)
	if err == nil || err.Error() != "gate failed" {
		t.Fatalf("err = %v", err)
	}
	if n := len(rec.Events()); n != 5 {
		t.Fatalf("events = %d, want 5", n)
	}
	steps := rec.Steps()
	if len(steps) != 2 || steps[0].GetStatus() != lifecyclev1.StepStatus_STEP_STATUS_RUNNING || steps[1].GetStatus() != lifecyclev1.StepStatus_STEP_STATUS_FAILED {
		t.Fatalf("steps = %v", steps)
	}
	if len(rec.Logs()) != 1 || len(rec.Artifacts()) != 1 {
		t.Fatalf("logs/artifacts = %v / %v", rec.Logs(), rec.Artifacts())
	}
	res := rec.FinalResult()
	if res == nil || res.GetOk() || res.GetError() != "gate failed" {
		t.Fatalf("result = %v", res)
	}
	if got := rec.Events()[0].GetUnixNano(); got != now.UnixNano() {
		t.Fatalf("timestamp = %d, want injected clock", got)
	}
	if err := leaked.Log("info", "", "late"); err == nil {
		t.Fatal("reporting after Run returned must fail")
	}
}

func TestRunReturnsFirstReportErrorAndChecksCommand(t *testing.T) {
	rec, err := Run(t.Context(), plug{run: func(_ context.Context, r sdk.Reporter) error {
		_ = r.Step(&lifecyclev1.StepEvent{StepId: "s"}) // no status: dropped
		return nil
	}}, &lifecyclev1.OperationRequest{Command: "x"}, nil)
	if err == nil || rec.FinalResult().GetOk() {
		t.Fatalf("err = %v, result = %v: a dropped report error must fail the run", err, rec.FinalResult())
	}
	if _, err := Run(t.Context(), plug{}, &lifecyclev1.OperationRequest{Command: "y"}, nil); err == nil {
		t.Fatal("an undeclared command must be refused")
	}
	if _, err := Plan(t.Context(), plug{}, &lifecyclev1.OperationRequest{Command: "y"}); err == nil {
		t.Fatal("Plan: an undeclared command must be refused")
	}
}
