package engine

import (
	"context"
	"time"

	"github.com/talosbot/talosbot/approvals"
	"github.com/talosbot/talosbot/bot/credentials"
	"github.com/talosbot/talosbot/bot/grammar"
	"github.com/talosbot/talosbot/config"
	lifecyclev1 "github.com/talosbot/talosbot/plugins/sdk/proto/lifecycle/v1"
	"github.com/talosbot/talosbot/state"
)

// Plugins is what the engine needs from the plugin host (plugins/host.Manager).
type Plugins interface {
	Manifests(ctx context.Context) ([]*lifecyclev1.Manifest, error)
	Plan(ctx context.Context, name string, req *lifecyclev1.OperationRequest) (*lifecyclev1.OperationPlan, error)
	Run(ctx context.Context, name string, req *lifecyclev1.OperationRequest, onProgress func(*lifecyclev1.Progress) error) (*lifecyclev1.Result, error)
}

// CredentialSource resolves a cluster's credentials when an operation needs
// them (files or Terraform outputs). Implementations must not cache secrets
// beyond the call.
type CredentialSource interface {
	Resolve(ctx context.Context, cl *config.Cluster) (*credentials.Credentials, error)
}

// Commands serves the commands the bot answers itself, without a plugin
// (package bot's router: help, status, resume, audit, freeze, …). The engine
// parses every line with one grammar, built from Specs and the plugin
// manifests, and hands an invocation of one of these to Serve. Serve gets
// the invocation and nothing else: what a command reads (store, policy,
// sink, clock) is given to the implementation when it is built, so the
// engine is not re-entered for its state.
type Commands interface {
	Specs() []grammar.CommandSpec
	Serve(ctx context.Context, from Origin, inv *grammar.Invocation) error
}

// Origin says who asked and where to answer.
type Origin struct {
	User    string
	Channel string
	// System marks the bot's own scheduler (bot/schedule): its authority
	// comes from the configuration, not from a role, and it may run only
	// commands that do not disrupt the cluster. Chat adapters never set it,
	// and it is never read from a request.
	System bool `json:"-"`
	// Click marks a button click's answers (a refused or repeated Approve):
	// they concern the clicker alone, so a Sink may answer privately.
	Click bool `json:"-"`
}

// Button is an action offered on an operation's message. ID is an opaque
// token; what it means lives in the store.
type Button struct {
	ID    string
	Label string
	Style string // "primary", "danger" or ""
}

// Update is a change to an operation's live message.
type Update struct {
	Op      *state.Operation
	Plan    *lifecyclev1.OperationPlan
	Buttons []Button
	// Lines are report lines (health probes, refusal details).
	Lines []string
	// Facts reads what the message shows beside the operation (approvers,
	// evidence, past runs; facts.go). It is called on demand, so a Sink
	// that shows none of it costs the engine nothing; nil means none.
	Facts func(context.Context) *Facts
}

// Sink receives what the engine has to say; the chat layer implements it.
type Sink interface {
	// Reply answers a command that did not become an operation (usage errors,
	// refusals before planning, status, help).
	Reply(ctx context.Context, to Origin, text string)
	// ReplyButtons is Reply with buttons (e.g. "more", suggested commands).
	ReplyButtons(ctx context.Context, to Origin, text string, buttons []Button)
	// Operation creates or edits the operation's one message.
	Operation(ctx context.Context, u Update)
	// Thread posts a detail line in the operation's thread.
	Thread(ctx context.Context, op *state.Operation, text string)
}

// Policy decides who may do what (implemented by package approvals).
type Policy interface {
	// Authorize refuses a request the user may not make (roles, freezes,
	// windows, promotion). It is called before anything is stored.
	Authorize(ctx context.Context, req PolicyRequest) error
	// RequiredApprovals returns how many distinct approvals op needs (0:
	// none). declared is the min_approvals its command's manifest declares
	// (0: none); the engine passes it from the command's spec, so every
	// Policy sees what each plugin declares without being told separately.
	RequiredApprovals(op *state.Operation, declared int) int
	// CanApprove refuses an approver who may not approve op.
	CanApprove(op *state.Operation, user string) error
	// Expiry is how long an approval request stays open.
	Expiry(op *state.Operation) time.Duration
	// Promotion applies the staging-first rule (R6) to a planned operation
	// whose target is known. It returns the flags to record (e.g.
	// "skip-staging") or a refusal.
	Promotion(op *state.Operation, last StagingLookup, now time.Time) (flags []string, err error)
}

// The policy's inputs are package approvals' own types, so approvals
// imports nothing of bot/ (the arrow runs bot → approvals).
type (
	// StagingLookup finds the newest succeeded staging operation of command
	// with target that ended at or after since.
	StagingLookup = approvals.StagingLookup
	// Freeze is a cluster freeze: disruptive operations are refused while it holds.
	Freeze = approvals.Freeze
	// PolicyRequest describes a request for Policy.Authorize.
	PolicyRequest = approvals.Request
)

// Observer is told about engine events, for metrics. Calls must not block.
type Observer interface {
	// Input counts a command or a button click ("command", "action") from a channel.
	Input(channel, kind string)
	// OperationEnded is called once an operation reaches a terminal state.
	OperationEnded(op *state.Operation)
	// Approved is called when an operation has all its approvals; latency is
	// the time since approval was requested.
	Approved(op *state.Operation, latency time.Duration)
	// AuditFailed is called when an audit record (named by its action)
	// could not be appended.
	AuditFailed(action string)
}

type nopObserver struct{}

func (nopObserver) Input(string, string)                     {}
func (nopObserver) OperationEnded(*state.Operation)          {}
func (nopObserver) Approved(*state.Operation, time.Duration) {}
func (nopObserver) AuditFailed(string)                       {}
