// Package report is the one implementation of the progress reporter shared by
// the gRPC server in package sdk and the in-process recorder in sdktest, so
// plugin unit tests exercise exactly the validation and final-Result rules
// that production runs use.
package report

import (
	"errors"
	"fmt"
	"sync"
	"time"

	lifecyclev1 "github.com/talosbot/talosbot/plugins/sdk/proto/lifecycle/v1"
)

// ErrResultSent is returned for any event sent after the final Result: the
// host stops reading at the Result, so anything later would be lost silently.
var ErrResultSent = errors.New("result already sent: the Result must be the last event of a run")

// ErrClosed is returned when a goroutine reports after Run has returned.
var ErrClosed = errors.New("run has returned: report from goroutines that outlive Run is not possible")

// Sink delivers one event. It is never called concurrently.
type Sink func(*lifecyclev1.Progress) error

// Reporter stamps and validates events and hands them to a Sink. It is safe
// for concurrent use: gRPC streams must not be written from two goroutines.
type Reporter struct {
	mu     sync.Mutex
	sink   Sink
	now    func() time.Time
	result bool
	closed bool
	// first is the first error any report returned. Plugins often drop
	// report errors (`_ = r.StepOK(...)`); Finish and Err surface it so a
	// broken stream or a malformed event fails the run instead of vanishing.
	first error
}

// New returns a Reporter writing to sink; now defaults to time.Now.
func New(sink Sink, now func() time.Time) *Reporter {
	if now == nil {
		now = time.Now
	}
	return &Reporter{sink: sink, now: now}
}

func (r *Reporter) send(p *lifecyclev1.Progress, isResult bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.keep(r.sendLocked(p, isResult))
}

// keep records err if it is the first; r.mu must be held.
func (r *Reporter) keep(err error) error {
	if err != nil && r.first == nil {
		r.first = err
	}
	return err
}

// invalid records a rejected event.
func (r *Reporter) invalid(err error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.keep(err)
}

// Err returns the first error any report returned, or nil.
func (r *Reporter) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.first
}

func (r *Reporter) sendLocked(p *lifecyclev1.Progress, isResult bool) error {
	if r.closed {
		return ErrClosed
	}
	if r.result {
		return ErrResultSent
	}
	p.UnixNano = r.now().UnixNano()
	if err := r.sink(p); err != nil {
		return fmt.Errorf("send progress: %w", err)
	}
	if isResult {
		r.result = true
	}
	return nil
}

func (r *Reporter) step(id, detail string, st lifecyclev1.StepStatus) error {
	return r.Step(&lifecyclev1.StepEvent{StepId: id, Status: st, Detail: detail})
}

// StepStarted reports that step id is running.
func (r *Reporter) StepStarted(id, detail string) error {
	return r.step(id, detail, lifecyclev1.StepStatus_STEP_STATUS_RUNNING)
}

// StepOK reports that step id finished successfully.
func (r *Reporter) StepOK(id, detail string) error {
	return r.step(id, detail, lifecyclev1.StepStatus_STEP_STATUS_OK)
}

// StepFailed reports that step id failed.
func (r *Reporter) StepFailed(id, detail string) error {
	return r.step(id, detail, lifecyclev1.StepStatus_STEP_STATUS_FAILED)
}

// StepSkipped reports that step id's effect was already in place.
func (r *Reporter) StepSkipped(id, detail string) error {
	return r.step(id, detail, lifecyclev1.StepStatus_STEP_STATUS_SKIPPED)
}

// Step reports a full step event (node, versions).
func (r *Reporter) Step(ev *lifecyclev1.StepEvent) error {
	switch {
	case ev == nil:
		return r.invalid(errors.New("step event is nil"))
	case ev.GetStepId() == "":
		return r.invalid(errors.New("step event has no step_id: use the id of a step from the plan"))
	case ev.GetStatus() == lifecyclev1.StepStatus_STEP_STATUS_UNSPECIFIED:
		return r.invalid(fmt.Errorf("step %q: status is unspecified: set RUNNING, OK, FAILED or SKIPPED", ev.GetStepId()))
	}
	return r.send(&lifecyclev1.Progress{Event: &lifecyclev1.Progress_Step{Step: ev}}, false)
}

// Log reports a log line; an empty level means "info".
func (r *Reporter) Log(level, stepID, msg string) error {
	if level == "" {
		level = "info"
	}
	return r.send(&lifecyclev1.Progress{Event: &lifecyclev1.Progress_Log{
		Log: &lifecyclev1.LogLine{Level: level, StepId: stepID, Message: msg},
	}}, false)
}

// Artifact reports an artifact (e.g. a snapshot copied off-cluster).
func (r *Reporter) Artifact(a *lifecyclev1.Artifact) error {
	if a == nil {
		return r.invalid(errors.New("artifact is nil"))
	}
	return r.send(&lifecyclev1.Progress{Event: &lifecyclev1.Progress_Artifact{Artifact: a}}, false)
}

// Result reports the final result; nothing may follow it.
func (r *Reporter) Result(res *lifecyclev1.Result) error {
	if res == nil {
		return r.invalid(errors.New("result is nil"))
	}
	return r.send(&lifecyclev1.Progress{Event: &lifecyclev1.Progress_Result{Result: res}}, true)
}

// Finish applies the end-of-run rule once Run has returned with runErr: if no
// Result was sent, it sends Result{Ok:false, Error: runErr} or Result{Ok:true}.
// A nil runErr is replaced by the first report error (see Err), so a run
// whose reports failed does not end in Ok. Afterwards every report fails
// with ErrClosed.
func (r *Reporter) Finish(runErr error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if runErr == nil && r.first != nil {
		runErr = fmt.Errorf("reporting progress: %w", r.first)
	}
	var err error
	if !r.result && !r.closed {
		res := &lifecyclev1.Result{Ok: true}
		if runErr != nil {
			res = &lifecyclev1.Result{Ok: false, Error: runErr.Error()}
		}
		err = r.sendLocked(&lifecyclev1.Progress{Event: &lifecyclev1.Progress_Result{Result: res}}, true)
	}
	r.closed = true
	return err
}

// Close makes every later report fail with ErrClosed without sending
// anything; used when the host has gone away and the stream is dead.
func (r *Reporter) Close() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
}
