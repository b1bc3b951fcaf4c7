package state

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// OpState is the lifecycle state of an Operation. The only legal moves between
// states are the ones CanTransition allows.
type OpState string

// Operation states.
const (
	StatePlanned          OpState = "planned"
	StateAwaitingApproval OpState = "awaiting_approval"
	StateApproved         OpState = "approved"
	StateRunning          OpState = "running"
	StateSucceeded        OpState = "succeeded"
	StateFailed           OpState = "failed"
	StateCancelled        OpState = "cancelled"
	StateDenied           OpState = "denied"
	StateExpired          OpState = "expired"
	StateInterrupted      OpState = "interrupted"
	// StateRefused ends an operation a rule or the policy stopped before it
	// changed anything (a plan refusal, R6, a freeze at run time, a required
	// silence). Records written before it existed say "failed" with the
	// flag "refused"; they stay as they are and read as before.
	StateRefused OpState = "refused"
)

// AllStates lists every state, in lifecycle order. It returns a fresh slice so
// callers cannot change the package's view of the states.
func AllStates() []OpState {
	return []OpState{
		StatePlanned, StateAwaitingApproval, StateApproved, StateRunning,
		StateSucceeded, StateFailed, StateCancelled, StateDenied, StateExpired,
		StateInterrupted, StateRefused,
	}
}

// transitions is THE transition table. It is a function (not a package
// variable) so nothing can modify it at run time.
func transitions(from OpState) []OpState {
	switch from {
	case StatePlanned:
		return []OpState{StateAwaitingApproval, StateApproved, StateRunning, StateCancelled, StateFailed, StateRefused}
	case StateAwaitingApproval:
		return []OpState{StateApproved, StateDenied, StateExpired, StateCancelled, StateFailed, StateRefused}
	case StateApproved:
		// approved → awaiting_approval happens when the re-plan before Run
		// produced a different digest: the approvals are voided.
		return []OpState{StateRunning, StateAwaitingApproval, StateCancelled, StateExpired, StateFailed, StateRefused}
	case StateRunning:
		// refused: a hook (a required silence) or the plugin refused the
		// run before it changed anything.
		return []OpState{StateSucceeded, StateFailed, StateCancelled, StateInterrupted, StateRefused}
	case StateInterrupted:
		// running again = resume; cancelled = abandon; awaiting_approval =
		// a resume whose new plan differs from the approved one.
		return []OpState{StateRunning, StateCancelled, StateAwaitingApproval}
	default:
		return nil
	}
}

// CanTransition reports whether an operation may move from one state to
// another. A state never transitions to itself.
func CanTransition(from, to OpState) bool {
	for _, s := range transitions(from) {
		if s == to {
			return true
		}
	}
	return false
}

// Terminal reports whether no further transition is possible.
func (s OpState) Terminal() bool {
	switch s {
	case StateSucceeded, StateFailed, StateCancelled, StateDenied, StateExpired, StateRefused:
		return true
	}
	return false
}

// Valid reports whether s is one of the known states.
func (s OpState) Valid() bool {
	for _, k := range AllStates() {
		if s == k {
			return true
		}
	}
	return false
}

// Step is one step of an operation's run, as reported by the plugin.
type Step struct {
	ID        string    `json:"id"`
	Title     string    `json:"title"`
	Node      string    `json:"node,omitempty"`
	Status    string    `json:"status"`
	Detail    string    `json:"detail,omitempty"`
	StartedAt time.Time `json:"started_at,omitzero"`
	EndedAt   time.Time `json:"ended_at,omitzero"`
}

// Artifact is something an operation produced (e.g. an etcd snapshot).
type Artifact struct {
	ID       string `json:"id"`
	Name     string `json:"name"`
	SHA256   string `json:"sha256"`
	Size     int64  `json:"size"`
	Location string `json:"location"`
	Revision int64  `json:"revision,omitempty"`
}

// SnapshotOf reports whether a is a snapshot of cluster: snapshot ids are
// "<cluster>/<file>" (docs/BACKUPS.md), the one convention both retention
// protection and the maintenance record go by, so neither needs to know
// which plugin took it or what it named the artifact.
func (a Artifact) SnapshotOf(cluster string) bool {
	return cluster != "" && strings.HasPrefix(a.ID, cluster+"/")
}

// Operation is one requested lifecycle command and everything known about it.
type Operation struct {
	ID          string            `json:"id"`
	Cluster     string            `json:"cluster"`
	Environment string            `json:"environment"`
	Command     string            `json:"command"` // e.g. "upgrade talos"
	Args        map[string]string `json:"args,omitempty"`
	Text        string            `json:"text,omitempty"` // what the user typed
	Target      string            `json:"target,omitempty"`
	Disruptive  bool              `json:"disruptive"`
	Requester   string            `json:"requester"`
	Channel     string            `json:"channel,omitempty"`
	MessageRef  string            `json:"message_ref,omitempty"`
	State       OpState           `json:"state"`
	Digest      string            `json:"digest,omitempty"`
	Plan        []byte            `json:"plan,omitempty"` // JSON of the plan shown to approvers
	Steps       []Step            `json:"steps,omitempty"`
	Artifacts   []Artifact        `json:"artifacts,omitempty"`
	Result      string            `json:"result,omitempty"`
	Error       string            `json:"error,omitempty"`
	Flags       []string          `json:"flags,omitempty"`
	CreatedAt   time.Time         `json:"created_at"`
	UpdatedAt   time.Time         `json:"updated_at"`
	StartedAt   time.Time         `json:"started_at,omitzero"`
	EndedAt     time.Time         `json:"ended_at,omitzero"`
	ExpiresAt   time.Time         `json:"expires_at,omitzero"`
	Attempts    int               `json:"attempts,omitempty"` // times it entered running
	// History keeps the step results of every earlier attempt (a resume
	// starts the next one with the new plan's steps); older records have none.
	History []Attempt `json:"history,omitempty"`
}

// Attempt is one earlier run of an operation, with its step results.
type Attempt struct {
	N         int       `json:"n"`
	StartedAt time.Time `json:"started_at,omitzero"`
	EndedAt   time.Time `json:"ended_at,omitzero"`
	// End is how the attempt ended (interrupted).
	End   string `json:"end"`
	Steps []Step `json:"steps"`
}

// DoneIn returns the earliest attempt in which step id finished ok (0: none).
func (o *Operation) DoneIn(id string) int {
	for _, a := range o.History {
		for _, s := range a.Steps {
			if s.ID == id && s.Status == "ok" {
				return a.N
			}
		}
	}
	return 0
}

// Approval is one user's approval of one plan digest of an operation.
type Approval struct {
	OpID   string    `json:"op_id"`
	User   string    `json:"user"`
	Digest string    `json:"digest"`
	At     time.Time `json:"at"`
}

// Lock is the per-cluster lock a disruptive operation holds from approval to
// its end.
type Lock struct {
	Cluster string    `json:"cluster"`
	OpID    string    `json:"op_id"`
	Holder  string    `json:"holder"` // user who caused the op to take the lock
	Command string    `json:"command"`
	Since   time.Time `json:"since"`
}

// OpFilter selects operations. Zero fields do not filter. Limit <= 0 means
// no limit.
type OpFilter struct {
	Cluster string
	States  []OpState
	Command string
	Since   time.Time // CreatedAt >= Since
	Limit   int
}

// LogLine is one verbose log line of an operation (kept outside the audit
// chain; pruned by age).
type LogLine struct {
	Seq  uint64    `json:"-"`
	Time time.Time `json:"t"`
	Line string    `json:"l"`
}

// ErrNotFound is returned (wrapped) when a requested record does not exist.
var ErrNotFound = errors.New("not found")

// ErrReadOnly is returned when a write is attempted on a store opened with
// Options.ReadOnly.
var ErrReadOnly = errors.New("state store is open read-only")

// ErrIllegalTransition matches every *TransitionError via errors.Is.
var ErrIllegalTransition = errors.New("illegal operation state transition")

// ErrLocked matches every *LockedError via errors.Is.
var ErrLocked = errors.New("cluster is locked")

// ErrSchemaTooNew is returned by Open when the database was written by a newer
// talosbot.
var ErrSchemaTooNew = errors.New("database schema is newer than this talosbot")

// ErrChainBroken matches every *ChainError via errors.Is.
var ErrChainBroken = errors.New("audit chain broken")

// TransitionError reports a move the transition table does not allow.
type TransitionError struct {
	ID   string
	From OpState
	To   OpState
}

func (e *TransitionError) Error() string {
	allowed := transitions(e.From)
	hint := "it is terminal; start a new operation instead"
	if len(allowed) > 0 {
		hint = fmt.Sprintf("from %s it may only go to %v", e.From, allowed)
	}
	return fmt.Sprintf("operation %s: illegal state transition from %s to %s (%s)", e.ID, e.From, e.To, hint)
}

// Is makes errors.Is(err, ErrIllegalTransition) true.
func (e *TransitionError) Is(target error) bool { return target == ErrIllegalTransition }

// LockedError is returned by AcquireLock when another operation holds the
// cluster lock.
type LockedError struct {
	Holder Lock
}

func (e *LockedError) Error() string {
	return fmt.Sprintf("cluster %s is locked by operation %s (%q, by %s since %s); wait for %s to finish or cancel it, then retry",
		e.Holder.Cluster, e.Holder.OpID, e.Holder.Command, e.Holder.Holder,
		e.Holder.Since.UTC().Format(time.RFC3339), e.Holder.OpID)
}

// Is makes errors.Is(err, ErrLocked) true.
func (e *LockedError) Is(target error) bool { return target == ErrLocked }

// ChainError reports the first audit record at which the hash chain does not
// hold.
type ChainError struct {
	Seq    uint64
	Reason string
}

func (e *ChainError) Error() string {
	return fmt.Sprintf("audit chain broken at seq %d: %s; the audit bucket was modified outside talosbot — restore it from a backup and compare with `talosbot audit verify`", e.Seq, e.Reason)
}

// Is makes errors.Is(err, ErrChainBroken) true.
func (e *ChainError) Is(target error) bool { return target == ErrChainBroken }
