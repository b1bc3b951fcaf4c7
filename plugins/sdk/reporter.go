package sdk

import (
	"errors"
	"fmt"
	"sync"
	"time"
)

// Reporter sends progress events to the host. It is safe for concurrent use
// and stamps every event with the current time. Every method fails once the
// Result has been sent, once Run has returned, or when the host has gone.
type Reporter interface {
	StepStarted(id, detail string) error
	StepOK(id, detail string) error
	StepFailed(id, detail string) error
	StepSkipped(id, detail string) error
	// Step is the full form, with node and from/to versions.
	Step(ev *StepEvent) error
	// Log sends a log line; level is "debug", "info", "warn" or "error"
	// (empty means "info"); stepID may be empty.
	Log(level, stepID, msg string) error
	Artifact(a *Artifact) error
	// Result sends the final result; it must be the last event.
	Result(r *Result) error
}

// ErrResultSent is returned for any event sent after the final Result: the
// host stops reading at the Result, so anything later would be lost silently.
var ErrResultSent = errors.New("result already sent: the Result must be the last event of a run")

// ErrClosed is returned when a goroutine reports after Run has returned.
var ErrClosed = errors.New("run has returned: report from goroutines that outlive Run is not possible")

// EventReporter is the one implementation of Reporter: it validates and
// stamps events and hands them to a sink. Serve's sink sends them over gRPC
// and sdktest's records them, so a plugin's unit tests exercise exactly the
// validation and end-of-run rules of production runs. It is safe for
// concurrent use (a gRPC stream must not be written from two goroutines).
type EventReporter struct {
	mu     sync.Mutex
	sink   func(*Event) error
	now    func() time.Time
	result bool
	closed bool
	// first is the first error any report returned. Plugins often drop
	// report errors (`_ = r.StepOK(...)`); Finish and Err surface it so a
	// broken stream or a malformed event fails the run instead of vanishing.
	first error
}

var _ Reporter = (*EventReporter)(nil)

// NewEventReporter returns a reporter writing to sink, which is never called
// concurrently; now stamps events (nil: time.Now).
func NewEventReporter(sink func(*Event) error, now func() time.Time) *EventReporter {
	if now == nil {
		now = time.Now
	}
	return &EventReporter{sink: sink, now: now}
}

func (r *EventReporter) send(e *Event) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.keep(r.sendLocked(e))
}

// keep records err if it is the first; r.mu must be held.
func (r *EventReporter) keep(err error) error {
	if err != nil && r.first == nil {
		r.first = err
	}
	return err
}

// invalid records a rejected event.
func (r *EventReporter) invalid(err error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.keep(err)
}

// Err returns the first error any report returned, or nil.
func (r *EventReporter) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.first
}

func (r *EventReporter) sendLocked(e *Event) error {
	if r.closed {
		return ErrClosed
	}
	if r.result {
		return ErrResultSent
	}
	e.UnixNano = r.now().UnixNano()
	if err := r.sink(e); err != nil {
		return fmt.Errorf("send progress: %w", err)
	}
	if e.Result != nil {
		r.result = true
	}
	return nil
}

func (r *EventReporter) step(id, detail string, st StepStatus) error {
	return r.Step(&StepEvent{StepID: id, Status: st, Detail: detail})
}

// StepStarted reports that step id is running.
func (r *EventReporter) StepStarted(id, detail string) error { return r.step(id, detail, StepRunning) }

// StepOK reports that step id finished successfully.
func (r *EventReporter) StepOK(id, detail string) error { return r.step(id, detail, StepOK) }

// StepFailed reports that step id failed.
func (r *EventReporter) StepFailed(id, detail string) error { return r.step(id, detail, StepFailed) }

// StepSkipped reports that step id's effect was already in place.
func (r *EventReporter) StepSkipped(id, detail string) error { return r.step(id, detail, StepSkipped) }

// Step reports a full step event (node, versions).
func (r *EventReporter) Step(ev *StepEvent) error {
	switch {
	case ev == nil:
		return r.invalid(errors.New("step event is nil"))
	case ev.StepID == "":
		return r.invalid(errors.New("step event has no StepID: use the ID of a step from the plan"))
	case ev.Status == StepUnspecified:
		return r.invalid(fmt.Errorf("step %q: status is unspecified: set StepRunning, StepOK, StepFailed or StepSkipped", ev.StepID))
	}
	c := *ev // the plugin may reuse its event
	return r.send(&Event{Step: &c})
}

// Log reports a log line; an empty level means "info".
func (r *EventReporter) Log(level, stepID, msg string) error {
	if level == "" {
		level = "info"
	}
	return r.send(&Event{Log: &LogLine{Level: level, StepID: stepID, Message: msg}})
}

// Artifact reports an artifact (e.g. a snapshot copied off-cluster).
func (r *EventReporter) Artifact(a *Artifact) error {
	if a == nil {
		return r.invalid(errors.New("artifact is nil"))
	}
	c := *a
	return r.send(&Event{Artifact: &c})
}

// Result reports the final result; nothing may follow it.
func (r *EventReporter) Result(res *Result) error {
	if res == nil {
		return r.invalid(errors.New("result is nil"))
	}
	return r.send(&Event{Result: res})
}

// Finish applies the end-of-run rule once Run has returned with runErr: if no
// Result was sent, it sends Result{OK: false, Error: runErr} or
// Result{OK: true}. A nil runErr is replaced by the first report error (see
// Err), so a run whose reports failed does not end OK. Afterwards every
// report fails with ErrClosed.
func (r *EventReporter) Finish(runErr error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if runErr == nil && r.first != nil {
		runErr = fmt.Errorf("reporting progress: %w", r.first)
	}
	var err error
	if !r.result && !r.closed {
		res := &Result{OK: true}
		if runErr != nil {
			res = &Result{OK: false, Error: runErr.Error()}
		}
		err = r.sendLocked(&Event{Result: res})
	}
	r.closed = true
	return err
}

// Close makes every later report fail with ErrClosed without sending
// anything; used when the host has gone away and the stream is dead.
func (r *EventReporter) Close() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
}
