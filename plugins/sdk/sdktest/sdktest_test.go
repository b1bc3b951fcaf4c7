package sdktest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/talosbot/talosbot/plugins/sdk"
)

type plug struct {
	run func(ctx context.Context, r sdk.Reporter) error
}

func (plug) Describe(context.Context) (*sdk.Manifest, error) {
	return &sdk.Manifest{Commands: []*sdk.Command{{Name: "x"}}}, nil
}
func (plug) Plan(context.Context, *sdk.OperationRequest) (*sdk.OperationPlan, error) {
	return &sdk.OperationPlan{}, nil
}
func (p plug) Run(ctx context.Context, _ *sdk.OperationRequest, r sdk.Reporter) error {
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
		_ = r.Artifact(&sdk.Artifact{ID: "snap-1"})
		_ = r.StepFailed("gate", "etcd")
		return errors.New("gate failed")
	}}, &sdk.OperationRequest{Command: "x"}, clock)
	if err == nil || err.Error() != "gate failed" {
		t.Fatalf("err = %v", err)
	}
	if n := len(rec.Events()); n != 5 {
		t.Fatalf("events = %d, want 5", n)
	}
	steps := rec.Steps()
	if len(steps) != 2 || steps[0].Status != sdk.StepRunning || steps[1].Status != sdk.StepFailed {
		t.Fatalf("steps = %v", steps)
	}
	if len(rec.Logs()) != 1 || len(rec.Artifacts()) != 1 {
		t.Fatalf("logs/artifacts = %v / %v", rec.Logs(), rec.Artifacts())
	}
	res := rec.FinalResult()
	if res == nil || res.OK || res.Error != "gate failed" {
		t.Fatalf("result = %v", res)
	}
	if got := rec.Events()[0].UnixNano; got != now.UnixNano() {
		t.Fatalf("timestamp = %d, want injected clock", got)
	}
	if err := leaked.Log("info", "", "late"); err == nil {
		t.Fatal("reporting after Run returned must fail")
	}
}

func TestRunReturnsFirstReportErrorAndChecksCommand(t *testing.T) {
	rec, err := Run(t.Context(), plug{run: func(_ context.Context, r sdk.Reporter) error {
		_ = r.Step(&sdk.StepEvent{StepID: "s"}) // no status: dropped
		return nil
	}}, &sdk.OperationRequest{Command: "x"}, nil)
	if err == nil || rec.FinalResult().OK {
		t.Fatalf("err = %v, result = %v: a dropped report error must fail the run", err, rec.FinalResult())
	}
	if _, err := Run(t.Context(), plug{}, &sdk.OperationRequest{Command: "y"}, nil); err == nil {
		t.Fatal("an undeclared command must be refused")
	}
	if _, err := Plan(t.Context(), plug{}, &sdk.OperationRequest{Command: "y"}); err == nil {
		t.Fatal("Plan: an undeclared command must be refused")
	}
}
