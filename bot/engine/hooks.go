package engine

import (
	"context"
	"strings"

	lifecyclev1 "github.com/talosbot/talosbot/plugins/sdk/proto/lifecycle/v1"
	"github.com/talosbot/talosbot/state"
)

// RunHook follows the runs of disruptive operations, for work that belongs
// around a run but is no plugin's business (an alert silence while it runs,
// a version-control change after it succeeded). Hooks bound their own I/O:
// the engine calls them inline.
type RunHook interface {
	// RunStarting is called before a disruptive operation's plugin run
	// starts or resumes. Lines are posted in the operation's thread; an
	// error refuses the run, and its text says why.
	RunStarting(ctx context.Context, op *state.Operation) ([]string, error)
	// RunProgress is called after each recorded progress event.
	RunProgress(ctx context.Context, op *state.Operation)
	// RunEnded is called once a disruptive operation that started has
	// reached its terminal state, whatever the ending. Lines are added to
	// the operation's result and posted in its thread.
	RunEnded(ctx context.Context, op *state.Operation, out RunOutput) []string
}

// ReleaseEvidence is implemented by the hook that keeps the bot's release
// data (Image Factory's list, releases:): every request carries it as
// typed evidence (Evidence.releases), so plugins never read the core's
// release settings.
type ReleaseEvidence interface {
	ReleaseEvidence(ctx context.Context, cluster string) *lifecyclev1.Releases
}

// FollowupEvidence is implemented by the hook that prepares Terraform
// changes as Git branches: it tells the plugins, as typed evidence, which
// changes of the cluster exist and whether each is merged yet.
type FollowupEvidence interface {
	GitFollowups(ctx context.Context, cluster string) []*lifecyclev1.GitFollowup
}

// gitFollowups collects the hooks' Git follow-up evidence about cluster.
func (e *Engine) gitFollowups(ctx context.Context, cluster string) []*lifecyclev1.GitFollowup {
	var out []*lifecyclev1.GitFollowup
	for _, h := range e.o.Hooks {
		if f, ok := h.(FollowupEvidence); ok {
			out = append(out, f.GitFollowups(ctx, cluster)...)
		}
	}
	return out
}

// releaseEvidence is the first hook's release data; nil when no hook has
// any (plugins then know no release and refuse every target).
func (e *Engine) releaseEvidence(ctx context.Context, cluster string) *lifecyclev1.Releases {
	for _, h := range e.o.Hooks {
		if n, ok := h.(ReleaseEvidence); ok {
			if r := n.ReleaseEvidence(ctx, cluster); r != nil {
				return r
			}
		}
	}
	return nil
}

// RunOutput is the generic data a run's plugin reported in its final result.
type RunOutput struct {
	// Declared maps each declared (Terraform) variable the run made true
	// to its new value, e.g. talos_version → v1.13.9. Plugins set it only
	// on success, once every node was verified (R18).
	Declared map[string]string
	// Invalidated names declared variables the run made untrue, whatever
	// its ending (a node rolled back, R19): a bump prepared for them must
	// be reverted.
	Invalidated []string
}

// runStarting asks every hook before a disruptive run; the first error
// refuses it.
func (e *Engine) runStarting(ctx context.Context, op *state.Operation) error {
	if !op.Disruptive {
		return nil
	}
	for _, h := range e.o.Hooks {
		lines, err := h.RunStarting(ctx, op)
		for _, l := range lines {
			e.o.Sink.Thread(ctx, op, l)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (e *Engine) runProgress(ctx context.Context, op *state.Operation) {
	if !op.Disruptive {
		return
	}
	for _, h := range e.o.Hooks {
		h.RunProgress(ctx, op)
	}
}

// runEnded tells the hooks that op ended and records what they report in its
// result. Operations that never started (denied, expired, refused before
// the run) are not reported: no hook did anything for them.
func (e *Engine) runEnded(ctx context.Context, op *state.Operation, out RunOutput) {
	if op == nil || !op.Disruptive || op.Attempts == 0 || len(e.o.Hooks) == 0 {
		return
	}
	var lines []string
	for _, h := range e.o.Hooks {
		lines = append(lines, h.RunEnded(ctx, op, out)...)
	}
	if len(lines) == 0 {
		return
	}
	var updated *state.Operation
	err := e.o.Store.Update(ctx, func(tx *state.Tx) error {
		o, err := tx.Operation(op.ID)
		if err != nil {
			return err
		}
		o.Result = strings.TrimPrefix(o.Result+"\n"+strings.Join(lines, "\n"), "\n")
		updated = o
		return tx.PutOperation(o)
	})
	if err != nil {
		e.log.Warn("record follow-up lines", "op", op.ID, "err", err)
		updated = op
	} else {
		e.notifyChanged()
		e.emit(ctx, Update{Op: updated})
	}
	for _, l := range lines {
		e.o.Sink.Thread(ctx, updated, l)
	}
}
