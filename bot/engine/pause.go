package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/talosbot/talosbot/bot/chat"
	"github.com/talosbot/talosbot/state"
)

// Pause between nodes (docs/ENDINGS.md): the engine names a pause mark (a
// file under the data dir) in every disruptive run's settings and creates it
// when Pause is clicked; a plugin working node by node checks it before it
// touches the next node and ends the run as paused (plugins/sdk/pause.go).
// The operation then waits as interrupted, its lock held, until Resume
// (which plans again) or Abandon. A plugin that never checks the mark runs
// to its end, so Pause is offered (and accepted) only for a command whose
// manifest declares pauses_between_nodes (pausable); Pause changes nothing
// else, so it is always safe to click.

func (e *Engine) pauseMark(id string) string {
	return filepath.Join(e.o.Config.DataDir, "pause", id)
}

func (e *Engine) pauseRequested(id string) bool {
	_, err := os.Stat(e.pauseMark(id))
	return err == nil
}

// Pause asks a running disruptive operation to stop at its next node
// boundary. Who may cancel may pause.
func (e *Engine) Pause(ctx context.Context, from Origin, id string) error {
	op, err := e.Operation(ctx, id)
	if err != nil {
		return e.refuseAction(ctx, from, nil, "pause", fmt.Sprintf("no operation %s", chat.Echo(id)))
	}
	if from.User != op.Requester && e.o.Policy.CanApprove(op, from.User) != nil {
		return e.refuseAction(ctx, from, op, "pause", "only the requester or an approver may pause "+id)
	}
	if op.State != state.StateRunning || !op.Disruptive {
		return e.refuseAction(ctx, from, op, "pause", fmt.Sprintf("operation %s is %s; only a running disruptive operation can pause", id, op.State))
	}
	if !e.pausable(op) {
		return e.refuseAction(ctx, from, op, "pause", fmt.Sprintf("operation %s (/talos %s) cannot pause: its plugin does not stop between nodes, so it runs to its end; `/talos cancel %s` stops it now", id, op.Command, id))
	}
	if err := e.markPause(ctx, op, from.User, nil); err != nil {
		return err
	}
	e.o.Sink.Reply(ctx, public(from), "pausing "+id+" before its next node at "+from.User+"'s request; the node in progress finishes first")
	return nil
}

// paused ends a run its plugin paused: interrupted, lock held, with the
// ending and Resume/Abandon.
func (e *Engine) paused(ctx context.Context, id string, lines []string) {
	// The mark holds who asked, then (a host's own pause, PauseFor) why.
	mark, err := os.ReadFile(e.pauseMark(id))
	who, why, _ := strings.Cut(string(mark), "\n")
	actor := orDefault(who, "someone")
	head := "⏸️ paused by " + actor + " between nodes"
	if err != nil {
		// No mark: nobody asked, the plugin paused on its own (a wait
		// past its limit; its lines say why).
		actor, head = "system", "⏸️ the run paused itself"
	}
	if why != "" {
		lines = append(strings.Split(why, "\n"), lines...)
	}
	op, err := e.transition(ctx, id, state.StateInterrupted, actor, "paused", "paused", nil, func(o *state.Operation) {
		closeRunning(o, "was running when the run paused")
		o.Result = head
		for _, l := range lines {
			o.Result += "\n" + l
		}
		if end := endingText(o, state.StateInterrupted); end != "" {
			o.Result += "\n" + end
		}
	})
	if err != nil {
		e.log.Error("record the pause", "op", id, "err", err)
		return
	}
	buttons, err := e.CommandButtons(ctx, nextCommands(op, op.State))
	if err == nil {
		e.emit(ctx, Update{Op: op, Buttons: buttons})
	}
}

// pausable reports whether op's command declares that it pauses between
// nodes (Command.pauses_between_nodes): Pause is offered and accepted only
// where the plugin honours it, so the button never promises a stop that
// will not come.
func (e *Engine) pausable(op *state.Operation) bool {
	s, ok := e.grammar.Lookup(op.Command)
	return ok && s.Plugin != "" && s.GetPausesBetweenNodes()
}

// runButtons are the buttons of a running disruptive operation: Cancel, and
// Pause where its command pauses between nodes.
func (e *Engine) runButtons(ctx context.Context, op *state.Operation) {
	var buttons []Button
	err := e.o.Store.Update(ctx, func(tx *state.Tx) error {
		var err error
		if e.pausable(op) {
			buttons, err = e.mintButtons(tx, op, []Button{{Label: "Cancel", Style: "danger"}, {Label: "Pause"}}, "cancel", "pause")
		} else {
			buttons, err = e.mintButtons(tx, op, []Button{{Label: "Cancel", Style: "danger"}}, "cancel")
		}
		return err
	})
	if err != nil {
		e.log.Warn("run buttons", "op", op.ID, "err", err)
		return
	}
	e.emit(ctx, Update{Op: op, Buttons: buttons})
}

// clearPause removes a pause mark: a run starts (or resumes) unpaused, and
// one that ended leaves none behind. A mark that is already gone is fine.
func (e *Engine) clearPause(id string) { _ = os.Remove(e.pauseMark(id)) }

// ErrNotPausable is returned by PauseFor for a run whose plugin does not
// stop between nodes.
var ErrNotPausable = errors.New("its plugin does not stop between nodes")

// PauseFor asks a running disruptive operation to stop before its next node
// on the bot's own behalf (a run hook: alertpause on a firing alert). by
// names the asker in the ending ("paused by BY between nodes") and the audit;
// why comes first in the operation's result. A mark already there is kept.
func (e *Engine) PauseFor(ctx context.Context, id, by string, why []string) error {
	op, err := e.Operation(ctx, id)
	if err != nil {
		return err
	}
	if op.State != state.StateRunning || !op.Disruptive {
		return fmt.Errorf("operation %s is %s; only a running disruptive operation can pause", id, op.State)
	}
	if !e.pausable(op) {
		return fmt.Errorf("operation %s (/talos %s) cannot pause: %w", id, op.Command, ErrNotPausable)
	}
	if e.pauseRequested(id) {
		return nil
	}
	return e.markPause(ctx, op, by, why)
}

// markPause writes op's pause mark (who asked on its first line, then why)
// and audits the request: the one writer of the mark, for Pause and
// PauseFor.
func (e *Engine) markPause(ctx context.Context, op *state.Operation, by string, why []string) error {
	mark := e.pauseMark(op.ID)
	if err := os.MkdirAll(filepath.Dir(mark), 0o700); err != nil {
		return fmt.Errorf("pause %s: %w", op.ID, err)
	}
	body := strings.Join(append([]string{strings.ReplaceAll(by, "\n", " ")}, why...), "\n")
	if err := os.WriteFile(mark, []byte(body), 0o600); err != nil {
		return fmt.Errorf("pause %s: %w", op.ID, err)
	}
	var detail map[string]string
	if len(why) > 0 {
		detail = map[string]string{"why": strings.Join(why, "; ")}
	}
	return e.audit(ctx, e.event(by, "pause requested", op, "ok", detail))
}
