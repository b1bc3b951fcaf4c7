package engine

import (
	"context"
	"slices"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/talosbot/talosbot/bot/opfacts"
	lifecyclev1 "github.com/talosbot/talosbot/plugins/sdk/proto/lifecycle/v1"
	"github.com/talosbot/talosbot/state"
)

// Facts are what an operation's message shows beside the operation
// (package opfacts, so that test fixtures and renderers can build them
// without importing the engine).
type Facts = opfacts.Facts

// pastRuns bounds Facts.Past; scanBack bounds how many of the cluster's
// operations are read to find the facts.
const (
	pastRuns = 10
	scanBack = 200
)

// emit sends u to the Sink with its Facts.
func (e *Engine) emit(ctx context.Context, u Update) {
	if u.Facts == nil && u.Op != nil {
		op := u.Op
		u.Facts = func(ctx context.Context) *Facts { return e.facts(ctx, op) }
	}
	e.o.Sink.Operation(ctx, u)
}

// pastElsewhere fills f.Past from succeeded runs of op's command on other
// clusters with as many nodes as op's cluster, newest first.
func (e *Engine) pastElsewhere(tx *state.Tx, op *state.Operation, f *Facts) error {
	here := e.o.Config.Cluster(op.Cluster)
	if here == nil {
		return nil
	}
	ops, err := tx.Operations(state.OpFilter{Command: op.Command, States: []state.OpState{state.StateSucceeded}, Limit: scanBack})
	if err != nil {
		return err
	}
	for _, o := range ops {
		if len(f.Past) == pastRuns {
			break
		}
		there := e.o.Config.Cluster(o.Cluster)
		if o.Cluster == op.Cluster || there == nil || len(there.Nodes) != len(here.Nodes) || dryRun(o) || o.StartedAt.IsZero() {
			continue
		}
		f.Past = append(f.Past, o)
		if !slices.Contains(f.PastFrom, o.Cluster) {
			f.PastFrom = append(f.PastFrom, o.Cluster)
		}
	}
	return nil
}

func (e *Engine) facts(ctx context.Context, op *state.Operation) *Facts {
	f := &Facts{Now: e.now(), Required: e.requiredApprovals(op), Roles: map[string]string{}}
	if cl := e.o.Config.Cluster(op.Cluster); cl != nil {
		for _, n := range cl.Nodes {
			f.Roles[n.Name] = n.Role
		}
	}
	var promoted string
	for _, fl := range op.Flags {
		if id, ok := strings.CutPrefix(fl, FlagPromotedFrom); ok {
			promoted = id
		}
	}
	err := e.o.Store.View(ctx, func(tx *state.Tx) error {
		apps, err := tx.Approvals(op.ID)
		if err != nil {
			return err
		}
		for _, a := range apps {
			if a.Digest == op.Digest {
				f.Approvals = append(f.Approvals, a)
			}
		}
		if f.Required > 0 {
			members, _ := e.o.Config.Members(e.o.Config.Policy[op.Environment].Approvers)
			for _, u := range members {
				if slices.Contains(f.Approvers, u) || slices.ContainsFunc(f.Approvals, func(a state.Approval) bool { return a.User == u }) {
					continue
				}
				if e.o.Policy.CanApprove(op, u) == nil {
					f.Approvers = append(f.Approvers, u)
				}
			}
		}
		if promoted != "" {
			if s, err := tx.Operation(promoted); err == nil {
				f.Staging = s
			}
		}
		back := map[string]string{} // node → the version a plan step leaves without naming a target
		if p := DecodePlan(op.Plan); p != nil {
			for _, s := range p.GetSteps() {
				if s.GetNode() != "" && s.GetFromVersion() != "" && s.GetToVersion() == "" {
					back[s.GetNode()] = s.GetFromVersion()
				}
			}
		}
		ops, err := tx.Operations(state.OpFilter{Cluster: op.Cluster, Limit: scanBack})
		if err != nil {
			return err
		}
		for _, o := range ops {
			if o.ID == op.ID || !o.State.Terminal() {
				continue
			}
			spec, known := e.grammar.Lookup(o.Command)
			switch {
			case o.Command == op.Command && o.State == state.StateSucceeded && !dryRun(o) && len(f.Past) < pastRuns && !o.StartedAt.IsZero():
				f.Past = append(f.Past, o)
			}
			if f.Snapshot == nil && known && spec.GetNeedsSnapshot() && o.State == state.StateSucceeded && !dryRun(o) {
				f.Snapshot = o
			}
			if len(back) > 0 && (o.State == state.StateSucceeded || o.State == state.StateFailed) {
				previousVersions(o, back, f)
			}
			if f.Gate == nil && known && spec.GetEffect() == lifecyclev1.Effect_EFFECT_READ_ONLY && hasGateSteps(o.Plan) {
				f.Gate = o
			}
		}
		if len(f.Past) == 0 {
			return e.pastElsewhere(tx, op, f)
		}
		return nil
	})
	if err != nil {
		e.log.Warn("read operation facts", "op", op.ID, "err", err)
	}
	return f
}

// previousVersions fills f.Previous from o, an older operation: a node of
// back it upgraded to the version back names ran the step's from version
// before. The newest such operation wins.
func previousVersions(o *state.Operation, back map[string]string, f *Facts) {
	p := DecodePlan(o.Plan)
	for _, s := range p.GetSteps() {
		n := s.GetNode()
		cur, ok := back[n]
		if !ok || s.GetKind() != "upgrade" || s.GetToVersion() != cur || s.GetFromVersion() == cur || f.Previous[n] != "" {
			continue
		}
		// Only a step that ran counts: the node really went from → to.
		if !slices.ContainsFunc(o.Steps, func(st state.Step) bool { return st.ID == s.GetId() && st.Status == "ok" }) {
			continue
		}
		if f.Previous == nil {
			f.Previous = map[string]string{}
		}
		f.Previous[n] = s.GetFromVersion()
	}
}

// DecodePlan decodes a stored plan (Operation.Plan); nil when there is none
// or it does not decode (the renderer then shows the steps without it).
func DecodePlan(raw []byte) *lifecyclev1.OperationPlan {
	if len(raw) == 0 {
		return nil
	}
	var p lifecyclev1.OperationPlan
	if protojson.Unmarshal(raw, &p) != nil {
		return nil
	}
	return &p
}

// hasGateSteps reports whether a stored plan has health-gate steps.
func hasGateSteps(raw []byte) bool {
	return slices.ContainsFunc(DecodePlan(raw).GetSteps(), func(s *lifecyclev1.Step) bool { return s.GetKind() == "gate" })
}
