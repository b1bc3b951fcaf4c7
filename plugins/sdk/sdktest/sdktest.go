// Package sdktest helps unit-test lifecycle plugins in process: Recorder is a
// Reporter that collects events, and Run drives Plugin.Run with the same
// validation and end-of-run rule (a final Result is always present) that
// sdk.Serve applies over gRPC.
package sdktest

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/talosbot/talosbot/plugins/sdk"
	"github.com/talosbot/talosbot/plugins/sdk/internal/report"
	lifecyclev1 "github.com/talosbot/talosbot/plugins/sdk/proto/lifecycle/v1"
)

// Recorder is an sdk.Reporter that keeps every event. Safe for concurrent use.
type Recorder struct {
	*report.Reporter

	mu     sync.Mutex
	events []*lifecyclev1.Progress
}

var _ sdk.Reporter = (*Recorder)(nil)

// NewRecorder returns an empty Recorder; now stamps events (nil: time.Now).
func NewRecorder(now func() time.Time) *Recorder {
	rec := &Recorder{}
	rec.Reporter = report.New(func(p *lifecyclev1.Progress) error {
		rec.mu.Lock()
		rec.events = append(rec.events, p)
		rec.mu.Unlock()
		return nil
	}, now)
	return rec
}

// Run checks the command against p's manifest and calls p.Run with a new
// Recorder, then applies the SDK's end-of-run rule, as sdk.Serve does. The
// returned error is Run's own error or, when Run returned nil, the first
// report error (both also reflected in the Result when none was sent).
func Run(ctx context.Context, p sdk.Plugin, req *lifecyclev1.OperationRequest, now func() time.Time) (*Recorder, error) {
	rec := NewRecorder(now)
	err := checkCommand(ctx, p, req.GetCommand())
	if err == nil {
		err = p.Run(ctx, req, rec)
	}
	if err == nil && rec.Err() != nil {
		err = fmt.Errorf("reporting progress: %w", rec.Err())
	}
	_ = rec.Finish(err) // the in-memory sink cannot fail
	return rec, err
}

// Plan checks the command against p's manifest and calls p.Plan, as
// sdk.Serve does.
func Plan(ctx context.Context, p sdk.Plugin, req *lifecyclev1.OperationRequest) (*lifecyclev1.OperationPlan, error) {
	if err := checkCommand(ctx, p, req.GetCommand()); err != nil {
		return nil, err
	}
	return p.Plan(ctx, req)
}

func checkCommand(ctx context.Context, p sdk.Plugin, command string) error {
	m, err := p.Describe(ctx)
	if err != nil {
		return fmt.Errorf("describe: %w", err)
	}
	return sdk.CheckCommand(sdk.CommandNames(m), command)
}

// Events returns a copy of all events in the order they were sent.
func (r *Recorder) Events() []*lifecyclev1.Progress {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*lifecyclev1.Progress(nil), r.events...)
}

// Steps returns the step events in order.
func (r *Recorder) Steps() []*lifecyclev1.StepEvent {
	var out []*lifecyclev1.StepEvent
	for _, e := range r.Events() {
		if s := e.GetStep(); s != nil {
			out = append(out, s)
		}
	}
	return out
}

// Logs returns the log lines in order.
func (r *Recorder) Logs() []*lifecyclev1.LogLine {
	var out []*lifecyclev1.LogLine
	for _, e := range r.Events() {
		if l := e.GetLog(); l != nil {
			out = append(out, l)
		}
	}
	return out
}

// Artifacts returns the artifacts in order.
func (r *Recorder) Artifacts() []*lifecyclev1.Artifact {
	var out []*lifecyclev1.Artifact
	for _, e := range r.Events() {
		if a := e.GetArtifact(); a != nil {
			out = append(out, a)
		}
	}
	return out
}

// FinalResult returns the Result event, or nil if none was sent yet.
func (r *Recorder) FinalResult() *lifecyclev1.Result {
	for _, e := range r.Events() {
		if res := e.GetResult(); res != nil {
			return res
		}
	}
	return nil
}
