package engine

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"

	lifecyclev1 "github.com/talosbot/talosbot/plugins/sdk/proto/lifecycle/v1"
	"github.com/talosbot/talosbot/state"
)

// Honest endings (docs/ENDINGS.md): a run that stops before it succeeds —
// cancelled, failed, interrupted by a restart — closes the steps it left
// running, says where every node was left, whether the cluster now runs
// mixed versions, and offers the exact next command as a button. Everything
// here is read from the plan the approvers saw and the step events the
// plugin sent; the engine knows no plugin and no step kind.

// StepStopped is the state of a step that was running when its run stopped
// (cancel, failure elsewhere, restart): nobody knows whether it finished, so
// it is never left "running" and never called done.
const StepStopped = "stopped"

// EndingHeader opens the ending in a stopped run's result; the renderer
// shows every line after it as it is.
const EndingHeader = "Where every node was left:"

// NodeEnd is where one node was left.
type NodeEnd struct {
	Node string
	// State is "done", "already there", "not started", "stopped", "failed"
	// or "partly done".
	State string
	// Version is the version the node runs as far as the step events say;
	// "" when they do not say (a stopped or failed version change).
	Version string
	// Detail names the step that stopped or failed, and why.
	Detail string
}

// Ending is what a stopped run left behind.
type Ending struct {
	Nodes []NodeEnd
	// Mixed reports nodes left at different (or unknown) versions.
	Mixed bool
}

// closeRunning marks the steps still running as stopped, with why.
func closeRunning(o *state.Operation, why string) {
	for i := range o.Steps {
		if o.Steps[i].Status == "running" {
			o.Steps[i].Status = StepStopped
			if d := o.Steps[i].Detail; d != "" {
				why += "; " + d
			}
			o.Steps[i].Detail = why
		}
	}
}

// EndingOf reads where op's run left each node: the plan's steps that name
// a node, their from/to versions, and the steps' recorded states. nil when
// the plan names no node.
func EndingOf(op *state.Operation) *Ending {
	var plan lifecyclev1.OperationPlan
	if len(op.Plan) == 0 || protojson.Unmarshal(op.Plan, &plan) != nil {
		return nil
	}
	status := endingStatus(op)
	var order []string
	byNode := map[string][]*lifecyclev1.Step{}
	for _, s := range plan.GetSteps() {
		if s.GetNode() == "" {
			continue
		}
		if _, seen := byNode[s.GetNode()]; !seen {
			order = append(order, s.GetNode())
		}
		byNode[s.GetNode()] = append(byNode[s.GetNode()], s)
	}
	if len(order) == 0 {
		return nil
	}
	en := &Ending{}
	versions := map[string]bool{}
	for _, n := range order {
		ne := nodeEnd(n, byNode[n], status)
		en.Nodes = append(en.Nodes, ne)
		versions[ne.Version] = true
	}
	// An unknown version ("") counts as different: the cluster may be mixed.
	en.Mixed = len(versions) > 1 || (versions[""] && len(order) > 1)
	return en
}

// endingStatus is each step's state for the ending: this attempt's, or, for a
// step this attempt has not run (pending), the state the latest earlier
// attempt left it in. A resumed run that stops before it reaches a node
// leaves that node where the earlier attempt did: upgraded, or stopped
// mid-way (soak seed 1123: the resume stopped at its first node, and the
// nodes attempt 1 had upgraded read "not started, at" their old version).
func endingStatus(op *state.Operation) map[string]state.Step {
	status := map[string]state.Step{}
	ran := func(s state.Step) bool { return s.Status != "" && s.Status != "pending" }
	for _, a := range op.History {
		for _, s := range a.Steps {
			if ran(s) {
				status[s.ID] = s
			}
		}
	}
	for _, s := range op.Steps {
		if _, earlier := status[s.ID]; ran(s) || !earlier {
			status[s.ID] = s
		}
	}
	return status
}

func nodeEnd(node string, steps []*lifecyclev1.Step, status map[string]state.Step) NodeEnd {
	ne := NodeEnd{Node: node}
	// The node's version follows its version steps in plan order (one per hop
	// of a multi-hop roll): each done or skipped one moves it to its target,
	// the first pending one leaves it at that step's from version, and one
	// that failed, stopped or is still running leaves it unknown (its
	// installer may have run). A pending step from a version to the same one
	// changes nothing (a resumed plan's "already there"): it counts as
	// skipped, so a node whose parts run different versions (a Kubernetes
	// upgrade's static pods done by an earlier attempt, its kubelet not yet:
	// soak seed 1113) is "partly done" at the version still to change, not
	// "not started" at the version of its first part.
	version, versioned, settled := "", false, false
	counts := map[string]int{}
	for _, s := range steps {
		st := orDefault(status[s.GetId()].Status, "pending")
		if st == "pending" && s.GetToVersion() != "" && s.GetFromVersion() == s.GetToVersion() {
			st = "skipped"
		}
		counts[st]++
		if s.GetToVersion() != "" && !settled {
			if !versioned {
				version, versioned = s.GetFromVersion(), true
			}
			switch st {
			case "ok", "skipped":
				version = s.GetToVersion()
			case "pending":
				if f := s.GetFromVersion(); f != "" {
					version = f
				}
				settled = true
			default:
				version, settled = "", true
			}
		}
		if (st == "failed" || st == StepStopped) && ne.Detail == "" {
			ne.Detail = s.GetTitle()
			if d := status[s.GetId()].Detail; d != "" {
				ne.Detail += ": " + FirstLine(d)
			}
		}
	}
	switch {
	case counts["failed"] > 0:
		ne.State = "failed"
	case counts[StepStopped] > 0:
		ne.State = "stopped"
	case counts["pending"] == len(steps):
		ne.State = "not started"
	case counts["pending"] == 0 && counts["ok"] == 0:
		ne.State = "already there"
	case counts["pending"] == 0:
		ne.State = "done"
	default:
		ne.State = "partly done"
	}
	ne.Version = version
	return ne
}

// Lines words the ending for the operation's message.
func (en *Ending) Lines() []string {
	if en == nil {
		return nil
	}
	out := []string{EndingHeader}
	for _, n := range en.Nodes {
		l := "• " + n.Node + ": " + n.State
		switch {
		case n.Version != "":
			l += ", at " + n.Version
		case n.State == "failed" || n.State == "stopped":
			l += ", version unknown (check it before going on)"
		}
		if n.Detail != "" {
			l += " — " + n.Detail
		}
		out = append(out, l)
	}
	if en.Mixed {
		var vs []string
		for _, n := range en.Nodes {
			v := orDefault(n.Version, "unknown")
			if !slices.Contains(vs, v) {
				vs = append(vs, v)
			}
		}
		out = append(out, "⚠️ the cluster is at mixed versions ("+strings.Join(vs, ", ")+"); finish or undo the change")
	}
	return out
}

// touched reports whether any node's state changed or may have.
func (en *Ending) touched() bool {
	if en == nil {
		return false
	}
	for _, n := range en.Nodes {
		if n.State != "not started" && n.State != "already there" {
			return true
		}
	}
	return false
}

// nextCommands are the commands offered after op stopped: resume or abandon
// an interrupted one; run a cancelled or failed one again (plugins skip
// nodes already at the target, R-idempotent), alongside the plugin's own
// suggestions (a rollback, offered only where the plugin says it can work).
func nextCommands(op *state.Operation, end state.OpState) []Suggestion {
	switch end {
	case state.StateInterrupted:
		return []Suggestion{{Label: "Resume", Command: "/talos resume " + op.ID}, {Label: "Abandon", Command: "/talos abandon " + op.ID}}
	case state.StateCancelled, state.StateFailed:
		if op.Text == "" || !op.Disruptive {
			return nil
		}
		label := "Run again"
		if EndingOf(op).touched() {
			label = "Run again (finishes the rest)"
		}
		return []Suggestion{{Label: label, Command: op.Text}}
	}
	return nil
}

// endingText is the ending appended to a stopped run's result.
func endingText(op *state.Operation, end state.OpState) string {
	lines := EndingOf(op).Lines()
	if next := nextCommands(op, end); len(next) > 0 {
		var cmds []string
		for _, n := range next {
			cmds = append(cmds, "`"+n.Command+"`")
		}
		lines = append(lines, "Next: "+strings.Join(cmds, " or "))
	}
	return strings.Join(lines, "\n")
}

// offerEnding puts the next commands (and the plugin's suggested actions) as
// buttons on a stopped run's message.
func (e *Engine) offerEnding(ctx context.Context, id string, acts []*lifecyclev1.SuggestedAction) {
	op, err := e.Operation(ctx, id)
	if err != nil {
		return
	}
	var sugg []Suggestion
	for _, a := range acts {
		sugg = append(sugg, Suggestion{Label: a.GetLabel(), Command: a.GetCommand()})
	}
	sugg = append(sugg, nextCommands(op, op.State)...)
	if len(sugg) == 0 {
		return
	}
	buttons, err := e.CommandButtons(ctx, sugg)
	if err != nil {
		e.log.Warn("offer the next commands", "op", id, "err", err)
		return
	}
	e.emit(ctx, Update{Op: op, Buttons: buttons})
}

// stoppedRun reports whether a run in this state ends with an ending.
func stoppedRun(s state.OpState) bool {
	return s == state.StateCancelled || s == state.StateFailed || s == state.StateInterrupted
}

// FirstLine is s up to its first newline: a step's detail or an error in one
// line of a message.
func FirstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// describeStop says why running steps stopped, for their detail.
func describeStop(to state.OpState, actor string) string {
	switch to {
	case state.StateCancelled:
		return fmt.Sprintf("was running when %s cancelled the run", actor)
	case state.StateInterrupted:
		return "was running when talosbot stopped"
	}
	return "was running when the run " + string(to)
}

// announceInterrupted posts every interrupted operation to its channel: its
// message is edited to the ending, and a new post in the channel (the old
// message may be far up) says what was left where, with Resume and Abandon.
func (e *Engine) announceInterrupted(ctx context.Context) error {
	var ops []*state.Operation
	err := e.o.Store.View(ctx, func(tx *state.Tx) error {
		var err error
		ops, err = tx.Operations(state.OpFilter{States: []state.OpState{state.StateInterrupted}})
		return err
	})
	if err != nil {
		return fmt.Errorf("read interrupted operations: %w", err)
	}
	for _, op := range ops {
		buttons, err := e.CommandButtons(ctx, nextCommands(op, op.State))
		if err != nil {
			return fmt.Errorf("buttons for interrupted %s: %w", op.ID, err)
		}
		e.emit(ctx, Update{Op: op, Buttons: buttons})
		if op.Channel == "" {
			continue
		}
		text := fmt.Sprintf("⚠️ interrupted · `%s` /talos %s on %s (requested by %s) was running when talosbot stopped; its cluster stays locked until it is resumed or abandoned.",
			op.ID, op.Command, op.Cluster, op.Requester)
		if lines := EndingOf(op).Lines(); len(lines) > 0 {
			text += "\n" + strings.Join(lines, "\n")
		}
		text += fmt.Sprintf("\nNext: `/talos resume %s` (plans again; a changed plan needs approval again) or `/talos abandon %s`", op.ID, op.ID)
		e.o.Sink.ReplyButtons(ctx, Origin{Channel: op.Channel}, text, buttons)
	}
	return nil
}
