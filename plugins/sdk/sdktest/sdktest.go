// Package sdktest runs a lifecycle plugin in process against a fake host, on
// the SDK's Go types: Recorder is a Reporter that collects events, and Plan
// and Run drive the plugin with the same checks (the command must be in the
// manifest), validation and end-of-run rule (a final Result is always
// present) that sdk.Serve applies over gRPC. Request builds an
// OperationRequest the way the host fills one.
package sdktest

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/talosbot/talosbot/plugins/sdk"
)

// Recorder is an sdk.Reporter that keeps every event. Safe for concurrent use.
type Recorder struct {
	*sdk.EventReporter

	mu     sync.Mutex
	events []*sdk.Event
}

var _ sdk.Reporter = (*Recorder)(nil)

// NewRecorder returns an empty Recorder; now stamps events (nil: time.Now).
func NewRecorder(now func() time.Time) *Recorder {
	rec := &Recorder{}
	rec.EventReporter = sdk.NewEventReporter(func(e *sdk.Event) error {
		rec.mu.Lock()
		rec.events = append(rec.events, e)
		rec.mu.Unlock()
		return nil
	}, now)
	return rec
}

// Request returns a request for command on a cluster with the given nodes,
// as the host sends one (attempt 1, empty maps rather than nil). Tests set
// further fields on the result.
func Request(command, cluster string, nodes ...*sdk.Node) *sdk.OperationRequest {
	return &sdk.OperationRequest{
		OperationID: "op-test",
		Command:     command,
		Args:        map[string]string{},
		Cluster:     sdk.Cluster{Name: cluster, Environment: "staging", Nodes: nodes, Declared: map[string]string{}},
		Requester:   "tester",
		Attempt:     1,
	}
}

// Run checks the command against p's manifest and calls p.Run with a new
// Recorder, then applies the SDK's end-of-run rule, as sdk.Serve does. The
// returned error is Run's own error or, when Run returned nil, the first
// report error (both also reflected in the Result when none was sent).
func Run(ctx context.Context, p sdk.Plugin, req *sdk.OperationRequest, now func() time.Time) (*Recorder, error) {
	rec := NewRecorder(now)
	if req == nil {
		req = &sdk.OperationRequest{}
	}
	err := checkCommand(ctx, p, req.Command)
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
func Plan(ctx context.Context, p sdk.Plugin, req *sdk.OperationRequest) (*sdk.OperationPlan, error) {
	if req == nil {
		req = &sdk.OperationRequest{}
	}
	if err := checkCommand(ctx, p, req.Command); err != nil {
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
func (r *Recorder) Events() []*sdk.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*sdk.Event(nil), r.events...)
}

// Steps returns the step events in order.
func (r *Recorder) Steps() []*sdk.StepEvent {
	var out []*sdk.StepEvent
	for _, e := range r.Events() {
		if e.Step != nil {
			out = append(out, e.Step)
		}
	}
	return out
}

// Logs returns the log lines in order.
func (r *Recorder) Logs() []*sdk.LogLine {
	var out []*sdk.LogLine
	for _, e := range r.Events() {
		if e.Log != nil {
			out = append(out, e.Log)
		}
	}
	return out
}

// Artifacts returns the artifacts in order.
func (r *Recorder) Artifacts() []*sdk.Artifact {
	var out []*sdk.Artifact
	for _, e := range r.Events() {
		if e.Artifact != nil {
			out = append(out, e.Artifact)
		}
	}
	return out
}

// FinalResult returns the Result event, or nil if none was sent yet.
func (r *Recorder) FinalResult() *sdk.Result {
	for _, e := range r.Events() {
		if e.Result != nil {
			return e.Result
		}
	}
	return nil
}

// Releases is release evidence (sdk.Evidence.Releases) that knows the
// given Talos releases as both known versions and targets, as the bot sends
// the configured releases.talos when it has no Image Factory list.
func Releases(talos ...string) *sdk.Releases {
	return &sdk.Releases{Versions: talos, Targets: talos, Origin: "releases.talos (test)"}
}
