// Package talosupgrade is the built-in plugin behind
// `/talos upgrade talos <version> [cluster] [--nodes a,b]`: a rolling Talos
// upgrade (rules R10–R18). See docs/UPGRADES.md.
//
// Plan reads the cluster (versions, install images, etcd leader) and changes
// nothing. Run: verified etcd snapshot (R12), gate (R1), then node by node —
// workers first, control planes after with the etcd leader last (R15, R16) —
// quorum check, upgrade, track the reboot, quorum check, gate; then the final
// verification (R17), the closing gate and the Terraform drift note (R18).
// A node already at the target is skipped, so a resumed run carries on.
package talosupgrade

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/talosbot/talosbot/internal/version"
	"github.com/talosbot/talosbot/plugins/cluster"
	lifecyclev1 "github.com/talosbot/talosbot/plugins/proto/lifecycle/v1"
	"github.com/talosbot/talosbot/plugins/sdk"
	"github.com/talosbot/talosbot/plugins/tfguard"
)

// Name is the plugin's catalogue name.
const Name = "talosupgrade"

// Command is the chat command.
const Command = "upgrade talos"

// Plugin implements sdk.Plugin. It keeps no per-call state.
type Plugin struct {
	now       func() time.Time
	freeSpace func(string) (uint64, error)
}

// New returns the plugin.
func New() sdk.Plugin { return &Plugin{} }

// Describe returns the manifest.
func (*Plugin) Describe(context.Context) (*lifecyclev1.Manifest, error) {
	return &lifecyclev1.Manifest{Name: Name, Version: version.Version, Commands: []*lifecyclev1.Command{{
		Name: Command,
		Summary: "Rolling Talos upgrade, one adjacent minor at a time: snapshot, gate, workers one by one, " +
			"then control planes (etcd leader last) with quorum checks, gates between nodes, final check and Terraform note",
		Args: []*lifecyclev1.Arg{
			{Name: "version", Description: "target Talos version, e.g. v1.13.9", Required: true},
			{Name: "cluster", Description: "cluster to upgrade (default: the channel's cluster)"},
			{Name: "nodes", Description: "only these nodes, comma separated (same order rules apply)", Flag: true},
		},
		Effect:        lifecyclev1.Effect_EFFECT_DISRUPTIVE,
		NeedsSnapshot: true,
		Drill:         lifecyclev1.Drill_DRILL_TALOS_UPGRADE,
		Example:       "/talos upgrade talos v1.13.9 staging",
	}}}, nil
}

// nodeStep is one node of the roll.
type nodeStep struct {
	idx, total int
	node       cluster.Node
	from       cluster.Release
	image      string
	mechanics  cluster.Mechanics
	skip       bool // already at the target
}

func (n nodeStep) id(part string) string { return "node/" + n.node.Name + "/" + part }

// title is the chat line of the node's step: "node 2/5 cp-2: v1.12.6 → v1.13.9".
func (n nodeStep) title(target cluster.Release) string {
	return fmt.Sprintf("node %d/%d %s: %s → %s", n.idx, n.total, n.node.Name, n.from, target)
}

// roll is the computed plan.
type roll struct {
	inv      cluster.Inventory
	target   cluster.Release
	leader   string
	steps    []nodeStep
	versions map[string]string // every node's running version
	warnings []string
}

// compute reads the cluster and decides the roll. It changes nothing. A
// *cluster.RuleError means refuse.
func compute(ctx context.Context, req *lifecyclev1.OperationRequest, s *cluster.Session) (*roll, error) {
	inv := s.Inv
	target, err := cluster.ParseRelease(req.GetArgs()["version"])
	if err != nil {
		return nil, &cluster.RuleError{Rule: "R10", Reason: err.Error(), Fix: "give the target as vMAJOR.MINOR.PATCH, e.g. /talos upgrade talos v1.13.9"}
	}
	only, err := selection(inv, req.GetArgs()["nodes"])
	if err != nil {
		return nil, err
	}
	states, err := cluster.ReadNodeStates(ctx, s, inv.Nodes)
	if err != nil {
		return nil, &cluster.RuleError{Rule: "R1", Reason: "cannot read every node: " + err.Error(),
			Fix: "run /talos health and bring every node back before upgrading"}
	}
	q := cluster.ReadQuorum(ctx, s.Clients, inv)
	if q.Leader == "" {
		return nil, &cluster.RuleError{Rule: "R16", Reason: "etcd has no agreed leader: " + q.Summary(),
			Fix: "restore etcd quorum first (/talos health shows the members)"}
	}
	r := &roll{inv: inv, target: target, leader: q.Leader, versions: map[string]string{}}
	for name, st := range states {
		r.versions[name] = st.Version
	}
	order := cluster.UpgradeOrder(inv, q.Leader)
	if only != nil {
		order = slices.DeleteFunc(order, func(n cluster.Node) bool { return !only[n.Name] })
	}
	for i, n := range order {
		st := states[n.Name]
		from, err := cluster.ParseRelease(st.Version)
		if err != nil {
			return nil, &cluster.RuleError{Rule: "R10", Reason: fmt.Sprintf("%s reports version %q: %v", n.Name, st.Version, err),
				Fix: "the bot upgrades released versions only; upgrade this node by hand"}
		}
		ns := nodeStep{idx: i + 1, total: len(order), node: n, from: from, skip: from == target}
		if !ns.skip {
			if re := cluster.CheckUpgradePath(n.Name, from, target); re != nil {
				return nil, re
			}
			inst, err := cluster.TargetInstaller(st, req.GetCluster().GetDeclared(), target)
			if err != nil {
				return nil, err
			}
			if re := cluster.CheckInstallerChange(st, inst); re != nil {
				return nil, re
			}
			ns.image, ns.mechanics = inst.Ref(), cluster.MechanicsFor(from)
		}
		r.steps = append(r.steps, ns)
	}
	warn, re := cluster.PatchCheck(target, req.GetSettings().GetKnownTalosReleases(), req.GetSettings().GetRefuseNonLatestPatch())
	if re != nil {
		return nil, re
	}
	if warn != "" {
		r.warnings = append(r.warnings, warn+" (R10)")
	}
	if len(inv.ControlPlanes()) == 1 {
		r.warnings = append(r.warnings, "one control plane: the Kubernetes API and etcd are down while it reboots")
	}
	if len(req.GetCredentials().GetKubeconfig()) == 0 {
		r.warnings = append(r.warnings, "no kubeconfig: the gates cannot check Kubernetes and v1.13+ nodes are rebooted without a client-side drain")
	}
	return r, nil
}

// selection parses --nodes; nil means every node.
func selection(inv cluster.Inventory, arg string) (map[string]bool, error) {
	if strings.TrimSpace(arg) == "" {
		return nil, nil
	}
	out := map[string]bool{}
	for _, name := range strings.Split(arg, ",") {
		name = strings.TrimSpace(name)
		n, ok := inv.Node(name)
		if !ok {
			return nil, &cluster.RuleError{Rule: "R15", Reason: fmt.Sprintf("--nodes names %q, which is not in the inventory of %s", name, inv.Name),
				Fix: "use node names from the inventory: " + strings.Join(cluster.Names(inv.Nodes), ", ")}
		}
		out[n.Name] = true
	}
	return out, nil
}

func (r *roll) toUpgrade() []nodeStep {
	var out []nodeStep
	for _, s := range r.steps {
		if !s.skip {
			out = append(out, s)
		}
	}
	return out
}

// canonical is everything that changes what Run does: a node's version
// moving changes the digest, and so voids an approval.
func (r *roll) canonical(req *lifecyclev1.OperationRequest) []byte {
	st := req.GetSettings()
	c := sdk.NewCanonical(req).Str("target", r.target.String()).Str("leader", r.leader).Str("snapshot_dir", st.GetSnapshotDir()).
		Int("node_timeout_ms", st.GetNodeTimeoutMs()).Int("gate_timeout_ms", st.GetGateTimeoutMs())
	for _, s := range r.steps {
		c.Sub("step", s.idx).Str("node", s.node.Name).Str("role", s.node.Role).Str("address", s.node.Address).
			Str("from", s.from.String()).Str("image", s.image).Str("mechanics", fmt.Sprint(s.mechanics)).Bool("skip", s.skip)
	}
	return c.List("nodes", cluster.Names(r.inv.Nodes)).Bytes()
}

// Plan computes the roll. It reads the cluster and changes nothing.
func (p *Plugin) Plan(ctx context.Context, req *lifecyclev1.OperationRequest) (*lifecyclev1.OperationPlan, error) {
	inv, err := cluster.InventoryFrom(req.GetCluster())
	if err != nil {
		return nil, err
	}
	if err := cluster.CheckSnapshotDir(req.GetSettings().GetSnapshotDir(), "an upgrade"); err != nil {
		return sdk.RefusalPlan(err)
	}
	s, err := cluster.Open(ctx, inv, req.GetCredentials())
	if err != nil {
		return nil, err
	}
	defer s.Close() //nolint:errcheck
	r, err := compute(ctx, req, s)
	if err != nil {
		return cluster.RefusalPlan(err)
	}
	up := r.toUpgrade()
	plan := &lifecyclev1.OperationPlan{
		Summary: fmt.Sprintf("Talos %s on %s: %d node(s) to upgrade one at a time (workers first, etcd leader %s last), %d already there",
			r.target, inv.Name, len(up), r.leader, len(r.steps)-len(up)),
		Target:          r.target.String(),
		Warnings:        r.warnings,
		CanonicalInputs: r.canonical(req),
	}
	plan.Steps = planSteps(r)
	if tfguard.Wanted(req.GetSettings()) {
		plan.Steps = append([]*lifecyclev1.Step{tfguard.GuardStep()}, plan.Steps...)
	}
	plan.Preconditions = []*lifecyclev1.Precondition{
		{Name: "upgrade path", Ok: true, Rule: "R10", Detail: fmt.Sprintf("every node at %s or one adjacent step below it", r.target)},
		{Name: "installer platform and schematic", Ok: true, Rule: "R14", Detail: "unchanged on every node"},
	}
	return plan, nil
}

func planSteps(r *roll) []*lifecyclev1.Step {
	var steps []*lifecyclev1.Step
	for _, s := range cluster.SnapshotSteps() {
		steps = append(steps, &lifecyclev1.Step{Id: s[0], Title: "snapshot: " + s[1], Kind: "snapshot"})
	}
	for _, pi := range cluster.Probes() {
		steps = append(steps, &lifecyclev1.Step{Id: "gate-before/" + pi.Name, Title: "gate before: " + pi.Title, Kind: "gate"})
	}
	for _, n := range r.steps {
		cp := n.node.IsControlPlane()
		if cp {
			steps = append(steps, &lifecyclev1.Step{Id: n.id("quorum-before"), Title: n.node.Name + ": etcd quorum before", Node: n.node.Name, Kind: "quorum"})
		}
		title := n.title(r.target)
		if n.skip {
			title += " (already there)"
		}
		steps = append(steps, &lifecyclev1.Step{Id: n.id("upgrade"), Title: title, Node: n.node.Name,
			FromVersion: n.from.String(), ToVersion: r.target.String(), Image: n.image, Kind: "upgrade"})
		if cp {
			steps = append(steps, &lifecyclev1.Step{Id: n.id("quorum-after"), Title: n.node.Name + ": etcd quorum after", Node: n.node.Name, Kind: "quorum"})
		}
		steps = append(steps, &lifecyclev1.Step{Id: n.id("gate"), Title: n.node.Name + ": health gate", Node: n.node.Name, Kind: "gate"})
	}
	steps = append(steps, &lifecyclev1.Step{Id: "verify", Title: "every node at " + r.target.String() + ", Flux ready", Kind: "verify"})
	for _, pi := range cluster.Probes() {
		steps = append(steps, &lifecyclev1.Step{Id: "gate-after/" + pi.Name, Title: "gate after: " + pi.Title, Kind: "gate"})
	}
	steps = append(steps, &lifecyclev1.Step{Id: "drift", Title: "Terraform talos_version note", Kind: "note"})
	return steps
}

// run is one Run's state.
type run struct {
	p       *Plugin
	req     *lifecyclev1.OperationRequest
	s       *cluster.Session
	r       sdk.Reporter
	roll    *roll
	lines   []string
	nodeTO  time.Duration
	gateTO  time.Duration
	cluster string
	resumed bool // a later attempt of an interrupted operation
}

// Run executes the roll.
func (p *Plugin) Run(ctx context.Context, req *lifecyclev1.OperationRequest, r sdk.Reporter) error {
	if err := cluster.CheckSnapshotDir(req.GetSettings().GetSnapshotDir(), "an upgrade"); err != nil {
		return r.Result(sdk.RefusedResult(err, "refused"))
	}
	s, err := cluster.OpenRequest(ctx, req)
	if err != nil {
		return err
	}
	inv := s.Inv
	defer s.Close() //nolint:errcheck
	resumed := req.GetAttempt() > 1
	var ro *roll
	if resumed {
		// The interrupted run may have left a node rebooting: wait for every
		// node to answer and etcd to agree on a leader before planning again.
		// A node can answer once and still be on its way back (its API goes
		// down again as the boot goes on), so a node that cannot be read
		// (R1) is waited for again, within the node timeout.
		deadline := time.Now().Add(cluster.NodeTimeout(req.GetSettings()))
		for {
			settle(ctx, s, time.Until(deadline))
			ro, err = compute(ctx, req, s)
			if re, ok := cluster.AsRuleError(err); !ok || re.Rule != "R1" || !time.Now().Before(deadline) || ctx.Err() != nil {
				break
			}
		}
	} else {
		ro, err = compute(ctx, req, s)
	}
	if err != nil {
		if re, ok := cluster.AsRuleError(err); ok {
			return r.Result(&lifecyclev1.Result{Ok: false, Summary: "refused", Error: re.Error(), Refusal: re.Proto()})
		}
		return err
	}
	for _, w := range ro.warnings {
		_ = r.Log("warn", "", w)
	}
	x := &run{p: p, req: req, s: s, r: r, roll: ro, nodeTO: cluster.NodeTimeout(req.GetSettings()),
		gateTO: cluster.GateTimeout(req.GetSettings()), cluster: inv.Name, resumed: resumed}
	if err := x.execute(ctx); err != nil && !errors.Is(err, errReported) {
		return err
	}
	return nil
}

// settle waits, up to timeout, until every node answers, none is in the
// middle of a sequence, and etcd agrees on a leader. Whatever is still wrong afterwards, planning reports.
func settle(ctx context.Context, s *cluster.Session, timeout time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, err := cluster.ReadNodeStates(ctx, s, s.Inv.Nodes); err == nil && cluster.ReadQuorum(ctx, s.Clients, s.Inv).Leader != "" && allSettled(ctx, s) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// allSettled reports whether no node is in the middle of a sequence (an
// upgrade the interrupted run started that has not rebooted yet).
func allSettled(ctx context.Context, s *cluster.Session) bool {
	results := make(chan bool, len(s.Inv.Nodes))
	for _, n := range s.Inv.Nodes {
		go func() {
			ok, err := cluster.Settled(ctx, s, n, 400*time.Millisecond)
			results <- err == nil && ok
		}()
	}
	all := true
	for range s.Inv.Nodes {
		all = <-results && all
	}
	return all
}

// errReported means the failure was already sent as the Result: stop.
var errReported = errors.New("result reported")

// fail sends the failure as the Result and returns errReported (or the
// error sending it), so callers stop whatever comes next.
func (x *run) fail(summary string, err error, actions ...*lifecyclev1.SuggestedAction) error {
	res := &lifecyclev1.Result{Ok: false, Summary: summary, Error: err.Error(), Lines: x.lines, SuggestedActions: actions}
	if re, ok := cluster.AsRuleError(err); ok {
		res.Refusal = re.Proto()
	}
	if serr := x.r.Result(res); serr != nil {
		return serr
	}
	return errReported
}

func (x *run) execute(ctx context.Context) error {
	ro := x.roll
	// 0. R5: with plan_before_upgrade, no upgrade on top of a migration.
	if ref := tfguard.BeforeUpgrade(ctx, x.cluster, x.req.GetSettings(), x.r); ref != nil {
		return x.fail("refused: the Terraform plan guard stopped the upgrade; no node was touched",
			&cluster.RuleError{Rule: ref.GetRule(), Reason: ref.GetReason(), Fix: ref.GetFix()})
	}
	// 1. Verified snapshot, off-cluster (R12).
	opts := cluster.SnapshotOptionsFor(x.req)
	opts.Now, opts.FreeSpace = x.p.now, x.p.freeSpace
	opts.Step = func(id, detail string, err error) {
		if err != nil {
			_ = x.r.StepFailed(id, err.Error())
			return
		}
		_ = x.r.StepOK(id, detail)
	}
	snap, err := cluster.TakeSnapshot(ctx, x.s.Clients, x.s.Inv, opts)
	if snap == nil {
		return x.fail("etcd snapshot before the upgrade failed; nothing was changed", fmt.Errorf("R12: %w", err))
	}
	if err := x.r.Artifact(snap.Artifact()); err != nil {
		return err
	}
	x.lines = append(x.lines, "💾 snapshot "+snap.ID+" (verified)")

	// 2. Gate before (R1): every node about to be drained.
	var drain []string
	for _, n := range ro.toUpgrade() {
		drain = append(drain, n.node.Name)
	}
	x.gateStarted("gate-before/")
	gate := cluster.Gate(ctx, x.s.Clients, x.s.Inv, x.s.GateOptions(x.req.GetSettings(), drain))
	if x.resumed && !gate.Passed {
		// Resuming right after a crash: give the cluster the gate timeout to
		// finish what the interrupted run started before refusing.
		gate = cluster.GateUntil(ctx, x.s.Clients, x.s.Inv, x.s.GateOptions(x.req.GetSettings(), drain), x.gateTO)
	}
	if err := cluster.ReportGate(x.r, "gate-before/", gate); err != nil {
		return err
	}
	if err := cluster.CheckGateBefore("the upgrade", gate.Reasons); err != nil {
		return x.fail("refused: the health gate failed; no node was touched", err)
	}

	// 3. Node by node (R15, R16).
	upgraded := 0
	for i, n := range ro.steps {
		if n.skip {
			x.skipNode(n)
			continue
		}
		if err := x.node(ctx, n, ro.steps[i+1:]); err != nil {
			return err
		}
		upgraded++
	}

	// 4. Final verification (R17).
	_ = x.r.StepStarted("verify", "")
	running, verr := x.verify(ctx)
	if verr != nil {
		_ = x.r.StepFailed("verify", verr.Error())
		return x.fail("the roll finished but the final check failed", verr)
	}
	_ = x.r.StepOK("verify", fmt.Sprintf("%s on every node; Flux ready", ro.target))

	// Gate after (R1): nothing left to drain.
	x.gateStarted("gate-after/")
	gate = cluster.GateUntil(ctx, x.s.Clients, x.s.Inv, x.s.GateOptions(x.req.GetSettings(), []string{}), x.gateTO)
	if err := cluster.ReportGate(x.r, "gate-after/", gate); err != nil {
		return err
	}
	if !gate.Passed {
		return x.fail("every node runs "+ro.target.String()+" but the closing health gate failed", gate.Err())
	}

	// 5. Terraform drift note (R18).
	schematic := x.req.GetCluster().GetDeclared()[cluster.DeclaredSchematic]
	note := cluster.TalosDriftNote(x.cluster, x.req.GetCluster().GetDeclared(), running, ro.target, schematic)
	_ = x.r.StepOK("drift", note[0])
	x.lines = append(x.lines, note...)
	// Every node runs the target and the gate passed: the declared version
	// may follow now, and only now (R18).
	return x.r.Result(&lifecyclev1.Result{Ok: true, Lines: x.lines, Declared: map[string]string{cluster.DeclaredTalosVersion: ro.target.String()},
		Summary: fmt.Sprintf("Talos %s on every node of %s (%d upgraded, %d already there)", ro.target, x.cluster, upgraded, len(ro.steps)-upgraded)})
}

// gateStarted marks every probe of a gate as running (the gate reports them
// all at its end).
func (x *run) gateStarted(prefix string) {
	for _, p := range cluster.Probes() {
		_ = x.r.StepStarted(prefix+p.Name, p.What)
	}
}

func (x *run) skipNode(n nodeStep) {
	to := x.roll.target.String()
	if n.node.IsControlPlane() {
		_ = x.r.StepSkipped(n.id("quorum-before"), "already at "+to)
	}
	_ = x.r.Step(&lifecyclev1.StepEvent{StepId: n.id("upgrade"), Status: lifecyclev1.StepStatus_STEP_STATUS_SKIPPED,
		Detail: "already at " + to, Node: n.node.Name, FromVersion: n.from.String(), ToVersion: to})
	if n.node.IsControlPlane() {
		_ = x.r.StepSkipped(n.id("quorum-after"), "already at "+to)
	}
	_ = x.r.StepSkipped(n.id("gate"), "already at "+to)
	x.lines = append(x.lines, fmt.Sprintf("⏭️ %s already at %s", n.node.Name, to))
}

func rollbackAction(node, clusterName string) *lifecyclev1.SuggestedAction {
	return &lifecyclev1.SuggestedAction{Label: "Rollback node " + node, Command: "/talos rollback " + node + " " + clusterName}
}

// node upgrades one node; a non-nil error has been reported as the Result.
func (x *run) node(ctx context.Context, n nodeStep, later []nodeStep) error {
	to := x.roll.target.String()
	stepEv := func(st lifecyclev1.StepStatus, detail string) {
		_ = x.r.Step(&lifecyclev1.StepEvent{StepId: n.id("upgrade"), Status: st, Detail: detail,
			Node: n.node.Name, FromVersion: n.from.String(), ToVersion: to})
	}
	cp := n.node.IsControlPlane()
	if cp {
		_ = x.r.StepStarted(n.id("quorum-before"), "")
		q, err := cluster.WaitQuorum(ctx, x.s.Clients, x.s.Inv, x.gateTO, func(q cluster.Quorum) error { return q.CheckDisruption(n.node.Name) })
		if err != nil {
			_ = x.r.StepFailed(n.id("quorum-before"), err.Error())
			return x.fail(fmt.Sprintf("stopped before %s: etcd quorum is not safe; %s and later nodes were not touched", n.node.Name, n.node.Name), err)
		}
		_ = x.r.StepOK(n.id("quorum-before"), q.Summary())
	}

	stepEv(lifecyclev1.StepStatus_STEP_STATUS_RUNNING, fmt.Sprintf("%s via %s", n.image, n.mechanics))
	stopped := fmt.Sprintf("upgrade of %s failed; the roll stopped, no later node was touched", n.node.Name)
	logf := func(msg string) { _ = x.r.Log("info", n.id("upgrade"), msg) }
	bootID, err := cluster.BootID(ctx, x.s, n.node)
	if err != nil {
		stepEv(lifecyclev1.StepStatus_STEP_STATUS_FAILED, err.Error())
		return x.fail(stopped, err)
	}
	started, err := cluster.StartUpgrade(ctx, x.s, cluster.NodeUpgrade{Node: n.node, From: n.from, To: x.roll.target, Image: n.image},
		cluster.UpgradeOptions{DrainTimeout: min(x.nodeTO/2, cluster.DefaultDrainTimeout), Log: logf})
	if err != nil {
		stepEv(lifecyclev1.StepStatus_STEP_STATUS_FAILED, err.Error())
		if !started.Cordoned {
			return x.fail(stopped, err)
		}
		// The drain failed after the new image was installed for the next
		// boot: uncordon, and offer the rollback since the node changed.
		_ = cluster.SetUnschedulable(context.WithoutCancel(ctx), x.s.Kube, n.node.Name, false)
		return x.fail(stopped, err, rollbackAction(n.node.Name, x.cluster))
	}
	res, err := cluster.TrackReboot(ctx, x.s, n.node, cluster.TrackOptions{Timeout: x.nodeTO, OldBootID: bootID, Actor: started.Actor, Log: logf})
	if err == nil && res.Version != to {
		err = fmt.Errorf("%s came back on %s, not %s", n.node.Name, res.Version, to)
		if res.Note != "" {
			err = fmt.Errorf("%w: %s (automatic rollback)", err, res.Note)
		}
	}
	if err == nil && started.Cordoned {
		err = cluster.SetUnschedulable(ctx, x.s.Kube, n.node.Name, false)
	}
	if err != nil {
		stepEv(lifecyclev1.StepStatus_STEP_STATUS_FAILED, err.Error())
		var seq *cluster.SequenceError
		if errors.As(err, &seq) {
			// The node stayed up on its old version: nothing to roll back.
			return x.fail(stopped, err)
		}
		return x.fail(stopped, err, rollbackAction(n.node.Name, x.cluster))
	}
	stepEv(lifecyclev1.StepStatus_STEP_STATUS_OK, fmt.Sprintf("%s: boot id changed, running and ready", to))
	x.lines = append(x.lines, fmt.Sprintf("✅ %s %s → %s", n.node.Name, n.from, to))

	if cp {
		_ = x.r.StepStarted(n.id("quorum-after"), "")
		q, err := cluster.WaitQuorum(ctx, x.s.Clients, x.s.Inv, x.gateTO, cluster.Quorum.CheckRestored)
		if err != nil {
			_ = x.r.StepFailed(n.id("quorum-after"), err.Error())
			return x.fail(fmt.Sprintf("etcd quorum did not recover after %s; the roll stopped, no later node was touched", n.node.Name), err,
				rollbackAction(n.node.Name, x.cluster))
		}
		_ = x.r.StepOK(n.id("quorum-after"), q.Summary())
	}

	// Gate between nodes (R15): the nodes still to be drained must be
	// drainable; the node just upgraded must be back in Kubernetes.
	_ = x.r.StepStarted(n.id("gate"), "")
	var drain []string
	for _, l := range later {
		if !l.skip {
			drain = append(drain, l.node.Name)
		}
	}
	if drain == nil {
		drain = []string{}
	}
	gate := cluster.GateUntil(ctx, x.s.Clients, x.s.Inv, x.s.GateOptions(x.req.GetSettings(), drain), x.gateTO)
	if !gate.Passed {
		_ = x.r.StepFailed(n.id("gate"), strings.Join(gate.Reasons, "; "))
		return x.fail(fmt.Sprintf("health gate after %s failed; the roll stopped, no later node was touched", n.node.Name), gate.Err(),
			rollbackAction(n.node.Name, x.cluster))
	}
	_ = x.r.StepOK(n.id("gate"), gate.Summary())
	return nil
}

// verify is R17: every node of the roll runs the target (read from the
// nodes now, not remembered), and Flux is Ready.
func (x *run) verify(ctx context.Context) (map[string]string, error) {
	running := map[string]string{}
	var problems []string
	for _, n := range x.s.Inv.Nodes {
		tag, err := cluster.TalosTag(ctx, x.s, n)
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		running[n.Name] = tag
	}
	for _, st := range x.roll.steps {
		if v := running[st.node.Name]; v != "" && v != x.roll.target.String() {
			problems = append(problems, fmt.Sprintf("%s runs %s", st.node.Name, v))
		}
	}
	if x.s.Dynamic != nil {
		objs, _, err := cluster.FluxStatus(ctx, x.s.Dynamic)
		if err != nil {
			problems = append(problems, "Flux: "+err.Error())
		}
		for _, o := range objs {
			if !o.Ready && !o.Suspended {
				problems = append(problems, fmt.Sprintf("Flux %s not Ready (%s)", o.Ref(), o.Reason))
			}
		}
	}
	if len(problems) > 0 {
		return running, fmt.Errorf("after the roll (R17): %s", strings.Join(problems, "; "))
	}
	return running, nil
}
