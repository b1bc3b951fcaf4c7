package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/talosbot/talosbot/plugins/host"
	lifecyclev1 "github.com/talosbot/talosbot/plugins/sdk/proto/lifecycle/v1"
	"github.com/talosbot/talosbot/state"
)

// resumeReplanned plans an interrupted operation again before it goes on.
// The approvals were given to a digest: when the remaining plan's digest
// differs (a node changed while talosbot was down, or the run got further
// than the approved plan foresaw), they are void and the new plan asks for
// approval again, saying what changed. Either way the interrupted attempt's
// step results move to the operation's history, so the record keeps every
// attempt.
func (e *Engine) resumeReplanned(ctx context.Context, from Origin, op *state.Operation) error {
	// One resume at a time: planning the rest reads the whole cluster and
	// can take a minute on a cluster that is settling, during which the
	// operation still reads interrupted. A second resume would plan again
	// only to find the first one running it (soak seed 1055: a resume every
	// 10 s, each refused "illegal state transition from running to running"
	// a minute later).
	e.mu.Lock()
	busy := e.resuming[op.ID]
	e.resuming[op.ID] = true
	e.mu.Unlock()
	if busy {
		return e.refuseAction(ctx, from, op, "resume", fmt.Sprintf("operation %s is being resumed already (the rest is being planned); its message shows when it runs", op.ID))
	}
	defer func() {
		e.mu.Lock()
		delete(e.resuming, op.ID)
		e.mu.Unlock()
	}()
	next := *op
	next.Attempts = op.Attempts + 1 // the plugin plans the attempt it will run
	// Built once: the run that follows uses it too (executeWith), so the
	// credentials are loaded once for the plan and the run.
	req, err := e.request(ctx, &next)
	if err != nil {
		return e.refuseAction(ctx, from, op, "resume", "could not plan the resume: "+err.Error())
	}
	archive := func(o *state.Operation) {
		o.History = append(o.History, state.Attempt{N: o.Attempts, StartedAt: o.StartedAt, EndedAt: o.UpdatedAt, End: string(o.State), Steps: o.Steps})
	}
	plan, err := e.o.Plugins.Plan(ctx, e.pluginFor(op), req)
	if err == nil && plan.GetRefusal() != nil {
		err = errors.New(refusalText(plan.GetRefusal()))
	}
	if err != nil {
		// Right after a crash the cluster is often still settling (a node
		// rebooting cannot be read, R1), so a plan may fail where the
		// resumed run would not: the plugin's resume waits for the nodes
		// and checks every rule again before it touches one. The approved
		// plan goes on, and the thread says why it was not planned again.
		if _, terr := e.transition(ctx, op.ID, state.StateRunning, from.User, "resumed", "", map[string]string{"replan": err.Error()}, func(o *state.Operation) {
			archive(o)
			o.Steps = freshSteps(o.Steps)
			o.Result = ""
		}); terr != nil {
			return e.refuseAction(ctx, from, op, "resume", terr.Error())
		}
		if cur, _ := e.Operation(ctx, op.ID); cur != nil {
			e.o.Sink.Thread(ctx, cur, "⚠️ could not plan the rest again ("+FirstLine(err.Error())+"); resuming the approved plan — the plugin waits for the nodes and checks every rule before touching one")
		}
		e.goRun(func(ctx context.Context) { e.executeWith(ctx, op.ID, req) })
		return nil
	}
	digest := host.Digest(plan)
	if digest != op.Digest && op.Disruptive && e.requiredApprovals(op) > 0 {
		e.voidApprovals(ctx, op, plan, digest, archive)
		return nil
	}
	planJSON, _ := protojson.Marshal(plan)
	if _, err := e.transition(ctx, op.ID, state.StateRunning, from.User, "resumed", "", map[string]string{"digest": digest}, func(o *state.Operation) {
		archive(o)
		o.Digest, o.Plan, o.Target, o.Steps = digest, planJSON, plan.GetTarget(), stepsFromPlan(plan)
		o.Result = ""
	}); err != nil {
		return e.refuseAction(ctx, from, op, "resume", err.Error())
	}
	e.goRun(func(ctx context.Context) { e.executeWith(ctx, op.ID, req) })
	return nil
}

// freshSteps are steps as a new attempt starts them: pending.
func freshSteps(steps []state.Step) []state.Step {
	out := make([]state.Step, len(steps))
	for i, s := range steps {
		out[i] = state.Step{ID: s.ID, Title: s.Title, Node: s.Node, Status: "pending"}
	}
	return out
}

// planChanges words how a new plan differs from the approved one, step by
// step: versions, images, steps added or gone.
func planChanges(oldRaw []byte, now *lifecyclev1.OperationPlan) []string {
	var old lifecyclev1.OperationPlan
	if len(oldRaw) == 0 || protojson.Unmarshal(oldRaw, &old) != nil {
		return nil
	}
	describe := func(s *lifecyclev1.Step) string {
		d := s.GetTitle()
		if s.GetFromVersion() != "" || s.GetToVersion() != "" {
			d += fmt.Sprintf(" %s → %s", s.GetFromVersion(), s.GetToVersion())
		}
		if s.GetImage() != "" {
			d += " " + s.GetImage()
		}
		return d
	}
	was := map[string]*lifecyclev1.Step{}
	for _, s := range old.GetSteps() {
		was[s.GetId()] = s
	}
	var out []string
	seen := map[string]bool{}
	for _, s := range now.GetSteps() {
		seen[s.GetId()] = true
		o, ok := was[s.GetId()]
		switch {
		case !ok:
			out = append(out, "• new: "+describe(s))
		case describe(o) != describe(s):
			out = append(out, "• "+describe(o)+" ⇒ now "+describe(s))
		}
	}
	for _, s := range old.GetSteps() {
		if !seen[s.GetId()] {
			out = append(out, "• gone: "+describe(s))
		}
	}
	if old.GetTarget() != now.GetTarget() {
		out = append(out, fmt.Sprintf("• target %s ⇒ now %s", old.GetTarget(), now.GetTarget()))
	}
	if len(out) == 0 && !strings.EqualFold(old.GetSummary(), now.GetSummary()) {
		out = append(out, "• "+old.GetSummary()+" ⇒ now "+now.GetSummary())
	}
	if len(out) == 0 {
		out = append(out, "• the steps read the same; the inputs behind them changed (the cluster's state or the settings)")
	}
	return out
}

// interruptedSteps are the steps a stopped attempt left in flight
// (StepStopped) that no later attempt has run since: a resumed run is told
// them (OperationRequest.interrupted_steps), because the cluster alone cannot show
// whether an upgrade in flight was issued and fell back or never began. The
// attempts are read in order, so a step a later attempt finished (or found
// done) is no longer in flight, and one a later attempt never reached (it
// stopped again before) still is.
func interruptedSteps(op *state.Operation) []*lifecyclev1.InterruptedStep {
	last := map[string]string{}
	node := map[string]string{}
	var order []string
	see := func(steps []state.Step) {
		for _, s := range steps {
			if s.Status == "" || s.Status == "pending" {
				continue
			}
			if _, ok := last[s.ID]; !ok {
				order = append(order, s.ID)
			}
			last[s.ID] = s.Status
			node[s.ID] = s.Node
		}
	}
	for _, a := range op.History {
		see(a.Steps)
	}
	see(op.Steps)
	var out []*lifecyclev1.InterruptedStep
	for _, id := range order {
		if st := last[id]; st == StepStopped || st == "running" {
			out = append(out, &lifecyclev1.InterruptedStep{Id: id, Node: node[id]})
		}
	}
	return out
}
