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
	"github.com/talosbot/talosbot/plugins/cluster/etcd"
	"github.com/talosbot/talosbot/plugins/cluster/gate"
	"github.com/talosbot/talosbot/plugins/cluster/identity"
	"github.com/talosbot/talosbot/plugins/cluster/k8s"
	"github.com/talosbot/talosbot/plugins/cluster/talos"
	"github.com/talosbot/talosbot/plugins/sdk"
	"k8s.io/apimachinery/pkg/util/wait"
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
func (*Plugin) Describe(context.Context) (*sdk.Manifest, error) {
	return &sdk.Manifest{Name: Name, Version: version.Version, Commands: []*sdk.Command{{
		Name: Command,
		Summary: "Rolling Talos upgrade, one adjacent minor at a time: snapshot, gate, workers one by one, " +
			"then control planes (etcd leader last) with quorum checks, gates between nodes, final check and Terraform note",
		Args: []*sdk.Arg{
			{Name: "version", Description: "target Talos version, e.g. v1.13.9", Required: true},
			{Name: "cluster", Description: "cluster to upgrade (default: the channel's cluster)"},
			{Name: "nodes", Description: "only these nodes, comma separated (same order rules apply)", Flag: true},
		},
		Effect:        sdk.EffectDisruptive,
		NeedsSnapshot: true,
		Drill:         sdk.DrillTalosUpgrade,
		Example:       "/talos upgrade talos v1.13.9 staging",

		PausesBetweenNodes: true, // checks sdk.PauseRequested before each node
	}}}, nil
}

// nodeStep is one node of the roll.
type nodeStep struct {
	idx, total int
	node       cluster.Node
	from       talos.Release
	image      string
	mechanics  talos.Mechanics
	skip       bool   // already at (or, in a hop before the last, past) the target
	prefix     string // the hop's step id prefix (hops.go)
}

func (n nodeStep) id(part string) string { return n.prefix + "node/" + n.node.Name + "/" + part }

// title is the chat line of the node's step: "node 2/5 cp-2: v1.12.6 → v1.13.9".
func (n nodeStep) title(target talos.Release) string {
	return fmt.Sprintf("node %d/%d %s: %s → %s", n.idx, n.total, n.node.Name, n.from, target)
}

// roll is the computed plan of one hop (hops.go: the path of hops).
type roll struct {
	inv    cluster.Inventory
	ids    *identity.Map // every node's resolved names
	target talos.Release
	leader string
	steps  []nodeStep
	// hop and hops place the roll in its path (1/1 for a one-hop
	// upgrade); prefix starts its step ids (hops.go).
	hop, hops int
	prefix    string
	// storage: Longhorn or CloudNativePG is installed, and each node gets
	// its storage steps (storage.go).
	storage bool
}

// hopRoll decides the roll of one hop to target from the nodes' versions
// at (read, or assumed after the hops before it). It changes nothing. A
// *sdk.Refusal means refuse.
func hopRoll(req *sdk.OperationRequest, inv cluster.Inventory, states map[string]talos.NodeState, at map[string]talos.Release,
	target talos.Release, leader string, only map[string]bool, prefix string, last bool) (*roll, error) {
	r := &roll{inv: inv, target: target, leader: leader, prefix: prefix}
	order := talos.UpgradeOrder(inv, leader)
	if only != nil {
		order = slices.DeleteFunc(order, func(n cluster.Node) bool { return !only[n.Name] })
	}
	for i, n := range order {
		st, from := states[n.Name], at[n.Name]
		ns := nodeStep{idx: i + 1, total: len(order), node: n, from: from, prefix: prefix, skip: hopDone(from, target, last)}
		if !ns.skip {
			if re := talos.CheckUpgradePath(n.Name, from, target); re != nil {
				return nil, re
			}
			inst, err := talos.TargetInstaller(st, req.Cluster.Declared, target)
			if err != nil {
				return nil, err
			}
			if re := talos.CheckInstallerChange(st, inst); re != nil {
				return nil, re
			}
			ns.image, ns.mechanics = inst.Ref(), talos.MechanicsFor(from)
		}
		r.steps = append(r.steps, ns)
	}
	return r, nil
}

// hopDone reports whether a node running v is done with the hop to target:
// at the target, or, in a hop before the last, past it (a node the operator
// upgraded further, or one a resumed run finished). The one place of this
// decision: hopRoll skips such a node and verify (R17) accepts it.
func hopDone(v, target talos.Release, last bool) bool {
	return v == target || (!last && v.Compare(target) > 0)
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
			return nil, &sdk.Refusal{Rule: "R15", Reason: fmt.Sprintf("--nodes names %s, which is not in the inventory of %s", sdk.Quote(name), inv.Name),
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
func (r *roll) canonical(req *sdk.OperationRequest) []byte {
	st := &req.Settings
	c := sdk.NewCanonical(req).Str("target", r.target.String()).Str("leader", r.leader).Str("snapshot_dir", st.SnapshotDir).
		Int("node_timeout_ms", st.NodeTimeoutMs).Int("gate_timeout_ms", st.GateTimeoutMs)
	r.writeSteps(c)
	return c.List("nodes", cluster.Names(r.inv.Nodes)).Bytes()
}

// writeSteps adds every node step of the roll to c.
func (r *roll) writeSteps(c *sdk.Canonical) {
	for _, s := range r.steps {
		c.Sub("step", s.idx).Str("node", s.node.Name).Str("role", s.node.Role).Str("address", s.node.Address).Str("kube_node", r.ids.KubeNode(s.node.Name)).
			Str("from", s.from.String()).Str("image", s.image).Str("mechanics", fmt.Sprint(s.mechanics)).Bool("skip", s.skip)
	}
}

// Plan computes the roll. It reads the cluster and changes nothing.
func (p *Plugin) Plan(ctx context.Context, req *sdk.OperationRequest) (*sdk.OperationPlan, error) {
	inv, err := cluster.InventoryFrom(&req.Cluster)
	if err != nil {
		return nil, err
	}
	if err := cluster.CheckSnapshotDir(req.Settings.SnapshotDir, "an upgrade"); err != nil {
		return sdk.RefusalPlan(err)
	}
	if err := cluster.CheckRole(req.Credentials.Talosconfig, "the Talos upgrade", cluster.GateMethods, cluster.SnapshotMethods, cluster.TalosUpgradeMethods); err != nil {
		return sdk.RefusalPlan(err)
	}
	s, err := cluster.Open(ctx, inv, &req.Credentials)
	if err != nil {
		return nil, err
	}
	defer s.Close() //nolint:errcheck
	pa, err := compute(ctx, req, s)
	if err != nil {
		return sdk.RefusalPlan(err)
	}
	// A roll with no node to upgrade would still take a snapshot and run
	// both gates: say so and plan nothing. Not for a resume (attempt > 1,
	// planned again by the host): a run interrupted after its last node
	// still owes its verify and closing gate.
	if last := pa.hops[len(pa.hops)-1]; !pa.multi() && len(last.toUpgrade()) == 0 && req.Attempt <= 1 {
		who := "every node of " + inv.Name
		if sel := strings.TrimSpace(req.Args["nodes"]); sel != "" {
			who = "every node named by --nodes (" + sel + ")"
		}
		return sdk.RefusalPlan(&sdk.Refusal{Reason: fmt.Sprintf("already at %s: %s runs it, so there is nothing to upgrade", pa.target, who),
			Fix: "nothing to do; /talos status shows the running versions"})
	}
	pa.warnings = append(pa.warnings, gate.PlanWarnings(ctx, s.Clients)...)
	forecast, _, err := planStorage(ctx, s, pa, req)
	if err != nil {
		return sdk.RefusalPlan(err)
	}
	plan := pa.operationPlan(req)
	forecast.AddTo(plan)
	plan.Preconditions = append(plan.Preconditions, &sdk.Precondition{Name: "node identity", OK: true, Rule: identity.Rule, Detail: strings.Join(pa.hops[0].ids.Lines(), "; ")})
	plan.Preconditions = append(plan.Preconditions, &sdk.Precondition{Name: "target pre-flight", OK: true, Rule: "R10", Detail: pa.preflight})
	return plan, nil
}

func planSteps(r *roll) []*sdk.Step {
	var steps []*sdk.Step
	for _, s := range etcd.SnapshotSteps() {
		steps = append(steps, &sdk.Step{ID: r.prefix + s[0], Title: r.titlePrefix() + "snapshot: " + s[1], Kind: "snapshot"})
	}
	for _, pi := range gate.Probes() {
		steps = append(steps, &sdk.Step{ID: r.prefix + "gate-before/" + pi.Name, Title: r.titlePrefix() + "gate before: " + pi.Title, Kind: "gate"})
	}
	for _, n := range r.steps {
		if !n.skip && n.mechanics == talos.MechanicsLifecycle {
			steps = append(steps, &sdk.Step{ID: n.id("pull"), Title: n.node.Name + ": pull " + n.image + " (every node before the first cordon)",
				Node: n.node.Name, Image: n.image, Kind: "pull"})
		}
	}
	for _, n := range r.steps {
		cp := n.node.IsControlPlane()
		if cp {
			steps = append(steps, &sdk.Step{ID: n.id("quorum-before"), Title: n.node.Name + ": etcd quorum before", Node: n.node.Name, Kind: "quorum"})
		}
		title := r.titlePrefix() + n.title(r.target)
		if n.skip {
			title += " (already there)"
		}
		if r.storage && !n.skip {
			steps = append(steps, storageBeforeStep(r, n))
		}
		steps = append(steps, &sdk.Step{ID: n.id("upgrade"), Title: title, Node: n.node.Name,
			FromVersion: n.from.String(), ToVersion: r.target.String(), Image: n.image, Kind: "upgrade"})
		if cp {
			steps = append(steps, &sdk.Step{ID: n.id("quorum-after"), Title: n.node.Name + ": etcd quorum after", Node: n.node.Name, Kind: "quorum"})
		}
		if r.storage && !n.skip {
			steps = append(steps, storageAfterStep(r, n))
		}
		steps = append(steps, &sdk.Step{ID: n.id("gate"), Title: n.node.Name + ": health gate", Node: n.node.Name, Kind: "gate"})
	}
	at := r.target.String()
	if r.hop < r.hops {
		at += " or later"
	}
	steps = append(steps, &sdk.Step{ID: r.prefix + "verify", Title: r.titlePrefix() + "every node at " + at + "; Flux Ready if it can be checked", Kind: "verify"})
	for _, pi := range gate.Probes() {
		steps = append(steps, &sdk.Step{ID: r.prefix + "gate-after/" + pi.Name, Title: r.titlePrefix() + "gate after: " + pi.Title, Kind: "gate"})
	}
	if r.hop == r.hops {
		steps = append(steps, &sdk.Step{ID: "drift", Title: "Terraform talos_version note", Kind: "note"})
	}
	return steps
}

// run is one Run's state.
type run struct {
	p      *Plugin
	req    *sdk.OperationRequest
	s      *cluster.Session
	r      sdk.Reporter
	roll   *roll // the hop running now
	path   *path
	lines  []string
	nodeTO time.Duration
	gateTO time.Duration
	// afterTO is how long the gate after a node may be re-run until it
	// passes (settings.gate_after_timeout_ms).
	afterTO time.Duration
	cluster string
	resumed bool // a later attempt of an interrupted operation
	// pulled: nodes whose installer the roll pulled before its first cordon.
	pulled map[string]bool
}

// Run executes the roll.
func (p *Plugin) Run(ctx context.Context, req *sdk.OperationRequest, r sdk.Reporter) error {
	if err := cluster.CheckSnapshotDir(req.Settings.SnapshotDir, "an upgrade"); err != nil {
		return r.Result(sdk.RefusedResult(err, "refused"))
	}
	if err := cluster.CheckRole(req.Credentials.Talosconfig, "the Talos upgrade", cluster.GateMethods, cluster.SnapshotMethods, cluster.TalosUpgradeMethods); err != nil {
		return r.Result(sdk.RefusedResult(err, "refused"))
	}
	s, err := cluster.OpenRequest(ctx, req)
	if err != nil {
		return err
	}
	inv := s.Inv
	defer s.Close() //nolint:errcheck
	resumed := req.Attempt > 1
	var ro *path
	if resumed {
		// The interrupted run may have left a node rebooting: wait for every
		// node to answer and etcd to agree on a leader before planning again.
		// A node can answer once and still be on its way back (its API goes
		// down again as the boot goes on), so a node that cannot be read
		// (R1) is waited for again, within the node timeout.
		deadline := time.Now().Add(talos.NodeTimeout(req.Settings))
		for {
			settle(ctx, s, time.Until(deadline))
			ro, err = compute(ctx, req, s)
			// A node still booting may answer one call and not the next: an
			// unreadable node (R1) or unresolvable name is waited for again.
			if re, ok := sdk.AsRefusal(err); !ok || (re.Rule != "R1" && re.Rule != identity.Rule) || !time.Now().Before(deadline) || ctx.Err() != nil {
				break
			}
		}
	} else {
		ro, err = compute(ctx, req, s)
	}
	if err != nil {
		if re, ok := sdk.AsRefusal(err); ok {
			return r.Result(&sdk.Result{OK: false, Summary: "refused", Error: re.Error(), Refusal: re})
		}
		return err
	}
	if _, _, err := planStorage(ctx, s, ro, req); err != nil {
		// The waits before each node make the forecast's warnings true;
		// only what cannot finish stops the run here (R3).
		if re, ok := sdk.AsRefusal(err); ok {
			return r.Result(&sdk.Result{OK: false, Summary: "refused", Error: re.Error(), Refusal: re})
		}
		return err
	}
	for _, w := range ro.warnings {
		_ = r.Log("warn", "", w)
	}
	x := &run{p: p, req: req, s: s, r: r, path: ro, nodeTO: talos.NodeTimeout(req.Settings), pulled: map[string]bool{},
		gateTO: gate.Timeout(req.Settings), afterTO: gate.AfterWait(req.Settings), cluster: inv.Name, resumed: resumed}
	if err := x.hops(ctx); err != nil && !errors.Is(err, errReported) {
		return err
	}
	return nil
}

// settle waits, up to timeout, until every node answers, none is in the
// middle of a sequence, and etcd agrees on a leader. Whatever is still wrong afterwards, planning reports.
func settle(ctx context.Context, s *cluster.Session, timeout time.Duration) {
	_ = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		_, err := talos.ReadNodeStates(ctx, s, s.Inv.Nodes)
		return err == nil && allSettled(ctx, s) &&
			etcd.ReadQuorum(ctx, s.Clients, identity.Resolve(ctx, s.Clients, s.Inv, identity.Options{})).Leader != "", nil
	})
}

// allSettled reports whether every node's machine is running and ready
// (talos.Settled reads its MachineStatus), so that none is in the middle of
// a sequence the interrupted run started.
func allSettled(ctx context.Context, s *cluster.Session) bool {
	results := make(chan bool, len(s.Inv.Nodes))
	for _, n := range s.Inv.Nodes {
		go func() {
			ok, _, err := talos.Settled(ctx, s, n)
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
func (x *run) fail(summary string, err error, actions ...*sdk.SuggestedAction) error {
	res := &sdk.Result{OK: false, Summary: summary, Error: err.Error(), Lines: append(x.lines, x.reachedLines()...), SuggestedActions: actions}
	if re, ok := sdk.AsRefusal(err); ok {
		res.Refusal = re
	}
	if serr := x.r.Result(res); serr != nil {
		return serr
	}
	return errReported
}

func (x *run) execute(ctx context.Context) error {
	ro := x.roll
	// 0. A resume: first the nodes whose upgrade was in flight (inflight.go).
	if err := x.resumeInFlight(ctx); err != nil {
		return err
	}
	// 1. Verified snapshot, off-cluster (R12). (The R5 plan guard ran
	// once, before the first hop: hops.)
	opts := etcd.SnapshotOptionsFor(x.req)
	opts.Now, opts.FreeSpace = x.p.now, x.p.freeSpace
	opts.Step = func(id, detail string, err error) { etcd.ReportStep(x.r, ro.prefix+id, detail, err) }
	snap, err := etcd.TakeSnapshot(ctx, x.s.Clients, x.s.Inv, opts)
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
	x.gateStarted(ro.prefix + "gate-before/")
	// Each node read at its own address: a hop after the first starts right
	// after its last node came back (see verify).
	directGate := x.s.DirectClients()
	verdict := gate.Run(ctx, directGate, x.s.Inv, x.gateOptions(drain))
	if x.resumed && !verdict.Passed {
		// Resuming right after a crash: a node may still be coming back, so
		// the cluster gets the wait after a node before refusing.
		verdict = gate.Until(ctx, directGate, x.s.Inv, x.gateOptions(drain), x.afterTO)
	}
	_ = directGate.Close()
	if err := gate.Report(x.r, ro.prefix+"gate-before/", verdict); err != nil {
		return err
	}
	if err := cluster.CheckGateBefore("the upgrade", verdict.Reasons); err != nil {
		return x.fail("refused: the health gate failed; no node was touched", err)
	}

	// 3. The installer on every v1.13 node first, as talosctl pulls before
	// it installs: a registry failure on any node, the last included, stops
	// the roll before the first node is cordoned.
	if err := x.pullAll(ctx); err != nil {
		return err
	}

	// 4. Node by node (R15, R16).
	upgraded := 0
	for i, n := range ro.steps {
		if n.skip {
			x.skipNode(n)
			continue
		}
		// Pause between nodes: the host's mark is checked before a node
		// is touched, never inside one (sdk.PauseRequested).
		if sdk.PauseRequested(x.req) {
			return x.r.Result(sdk.PausedResult(n.node.Name, x.lines))
		}
		if err := x.node(ctx, n, ro.steps[i+1:]); err != nil {
			return err
		}
		upgraded++
	}

	// 4. Final verification (R17).
	_ = x.r.StepStarted(ro.prefix+"verify", "")
	running, flux, verr := x.verify(ctx)
	if verr != nil {
		_ = x.r.StepFailed(ro.prefix+"verify", verr.Error())
		return x.fail("the roll finished but the final check failed", verr)
	}
	at := ro.target.String()
	if ro.hop < ro.hops {
		at += " or later"
	}
	_ = x.r.StepOK(ro.prefix+"verify", fmt.Sprintf("%s on every node; %s", at, flux))

	// Gate after (R1): nothing left to drain.
	x.gateStarted(ro.prefix + "gate-after/")
	// The gates after a node read each node at its own address (see verify).
	directGate = x.s.DirectClients()
	verdict = gate.Until(ctx, directGate, x.s.Inv, x.gateOptions([]string{}), x.afterTO)
	_ = directGate.Close()
	if err := gate.Report(x.r, ro.prefix+"gate-after/", verdict); err != nil {
		return err
	}
	if !verdict.Passed {
		return x.fail("every node runs "+ro.target.String()+" but the closing health gate failed", verdict.Err())
	}
	if ro.hop < ro.hops {
		// A hop before the last: the next hop starts from here (hops.go).
		x.lines = append(x.lines, fmt.Sprintf("🏁 hop %d/%d done: every node at %s or later (%d upgraded, %d already there); gates passed",
			ro.hop, ro.hops, ro.target, upgraded, len(ro.steps)-upgraded))
		return nil
	}

	// 5. Terraform drift note (R18).
	schematic := x.req.Cluster.Declared[talos.DeclaredSchematic]
	note := talos.DriftNote(x.cluster, x.req.Cluster.Declared, running, ro.target, schematic)
	_ = x.r.StepOK("drift", note[0])
	x.lines = append(x.lines, note...)
	// Every node runs the target and the gate passed: the declared version
	// may follow now, and only now (R18).
	summary := fmt.Sprintf("Talos %s on every node of %s (%d upgraded, %d already there)", ro.target, x.cluster, upgraded, len(ro.steps)-upgraded)
	if x.path.multi() {
		summary = fmt.Sprintf("Talos %s on every node of %s after %d hops (%s; last hop: %d upgraded, %d already there)",
			ro.target, x.cluster, ro.hops, x.path.spelled(), upgraded, len(ro.steps)-upgraded)
	}
	return x.r.Result(&sdk.Result{OK: true, Lines: x.lines, Declared: map[string]string{talos.DeclaredVersion: ro.target.String()},
		Summary: summary})
}

// gateOptions are the gate's options of this run, with the resolved names.
func (x *run) gateOptions(drain []string) gate.Options {
	o := gate.OptionsFor(x.s, x.req.Settings, drain)
	o.Identity, o.Storage = x.roll.ids, gateStorage(x.req)
	return o
}

// gateStarted marks every probe of a gate as running (the gate reports them
// all at its end).
func (x *run) gateStarted(prefix string) {
	for _, p := range gate.Probes() {
		_ = x.r.StepStarted(prefix+p.Name, p.What)
	}
}

func (x *run) skipNode(n nodeStep) {
	to := x.roll.target.String()
	if n.node.IsControlPlane() {
		_ = x.r.StepSkipped(n.id("quorum-before"), "already at "+to)
	}
	_ = x.r.Step(&sdk.StepEvent{StepID: n.id("upgrade"), Status: sdk.StepSkipped,
		Detail: "already at " + to, Node: n.node.Name, FromVersion: n.from.String(), ToVersion: to})
	if n.node.IsControlPlane() {
		_ = x.r.StepSkipped(n.id("quorum-after"), "already at "+to)
	}
	_ = x.r.StepSkipped(n.id("gate"), "already at "+to)
	x.lines = append(x.lines, fmt.Sprintf("⏭️ %s already at %s", n.node.Name, to))
}

// node upgrades one node; a non-nil error has been reported as the Result.
func (x *run) node(ctx context.Context, n nodeStep, later []nodeStep) error {
	to := x.roll.target.String()
	stepEv := func(st sdk.StepStatus, detail string) {
		_ = x.r.Step(&sdk.StepEvent{StepID: n.id("upgrade"), Status: st, Detail: detail,
			Node: n.node.Name, FromVersion: n.from.String(), ToVersion: to})
	}
	cp := n.node.IsControlPlane()
	if cp {
		_ = x.r.StepStarted(n.id("quorum-before"), "")
		q, err := etcd.WaitQuorum(ctx, x.s.Clients, x.roll.ids, x.gateTO, func(q etcd.Quorum) error { return q.CheckDisruption(n.node.Name) })
		if err != nil {
			_ = x.r.StepFailed(n.id("quorum-before"), err.Error())
			return x.fail(fmt.Sprintf("stopped before %s: etcd quorum is not safe; %s and later nodes were not touched", n.node.Name, n.node.Name), err)
		}
		_ = x.r.StepOK(n.id("quorum-before"), q.Summary())
	}
	affected, err := x.storageBefore(ctx, n)
	if err != nil {
		return err
	}

	stepEv(sdk.StepRunning, fmt.Sprintf("%s via %s", n.image, n.mechanics))
	logf := func(msg string) { _ = x.r.Log("info", n.id("upgrade"), msg) }
	o := &outcome{node: n.node.Name, kubeNode: x.roll.ids.KubeNode(n.node.Name), from: n.from.String(), to: to, p: &talos.Progress{}}
	if o.kubeNode == "" && n.mechanics == talos.MechanicsLifecycle {
		// Without a configured kubeconfig the Node is not looked up in Kubernetes: drain the
		// name the kubelet registers, the node's k8s.Nodename, as talosctl's drain does.
		if id, ok := x.roll.ids.Of(n.node.Name); ok {
			o.kubeNode = id.Nodename
		}
	}
	failNode := func(err error) error {
		stepEv(sdk.StepFailed, err.Error())
		x.settleCordon(ctx, o)
		x.lines = append(x.lines, "🩺 "+o.line())
		return x.fail(fmt.Sprintf("upgrade of %s failed; the roll stopped, no later node was touched. %s", n.node.Name, o.line()), err, x.actions(o)...)
	}
	bootID, err := talos.BootID(ctx, x.s, n.node)
	if err != nil {
		return failNode(err)
	}
	// What the node must run afterwards (landing.go): read before the upgrade changes it.
	plan, unchecked := talos.PlanLanding(ctx, x.s, n.node, x.roll.target, n.image)
	if unchecked != "" {
		logf(unchecked)
	}
	o.p, err = talos.StartUpgrade(ctx, x.s, talos.NodeUpgrade{Node: n.node, KubeNode: o.kubeNode, From: n.from, To: x.roll.target, Image: n.image, Pulled: x.pulled[n.node.Name]},
		talos.UpgradeOptions{Drain: k8s.DrainOptions{Timeout: min(x.nodeTO/2, k8s.DefaultDrainTimeout), Log: logf}, Log: logf,
			Pull: talos.PullOptions{Stall: talos.PullStall(x.req.Settings)}})
	if err != nil {
		return failNode(err)
	}
	res, err := talos.TrackReboot(ctx, x.s, n.node, talos.TrackOptions{Timeout: x.nodeTO, OldBootID: bootID, Actor: o.p.Actor, Log: logf})
	var (
		seq         *talos.SequenceError
		notRebooted *talos.NotRebootedError
		notReady    *talos.NotReadyError
	)
	switch {
	case errors.As(err, &seq):
		o.sequenceFailed = true
	case errors.As(err, &notRebooted):
		o.notRebooted = true
	case errors.As(err, &notReady):
		o.notReady = notReady.Error()
	case err == nil:
		o.back, o.version, o.note = true, res.Version, res.Note
	}
	if err == nil {
		err = x.landed(ctx, n, o, res, plan)
	}
	if err == nil && o.p.Cordoned {
		// Uncordon only once the Node is Ready again, as talosctl does.
		if err = k8s.WaitReady(ctx, x.s.DrainedWith(), o.kubeNode, 0, x.nodeTO); err == nil {
			if err = k8s.Uncordon(ctx, x.s.DrainedWith(), o.kubeNode); err == nil {
				o.uncordoned = true
			}
		}
	}
	if err != nil {
		return failNode(err)
	}
	stepEv(sdk.StepOK, fmt.Sprintf("%s: boot id changed, running and ready", to))
	x.lines = append(x.lines, fmt.Sprintf("✅ %s %s → %s", n.node.Name, n.from, to))
	x.reach(n.node.Name, x.roll.target)

	if cp {
		_ = x.r.StepStarted(n.id("quorum-after"), "")
		// Each member read at its own address: the endpoint's apid may still
		// be waiting out its redial backoff to the node just back.
		direct := x.s.DirectClients()
		q, err := etcd.WaitQuorum(ctx, direct, x.roll.ids, x.gateTO, etcd.Quorum.CheckRestored)
		_ = direct.Close()
		if err != nil {
			_ = x.r.StepFailed(n.id("quorum-after"), err.Error())
			x.lines = append(x.lines, "🩺 "+o.line())
			return x.fail(fmt.Sprintf("etcd quorum did not recover after %s; the roll stopped, no later node was touched. %s", n.node.Name, o.line()), err,
				x.actions(o)...)
		}
		_ = x.r.StepOK(n.id("quorum-after"), q.Summary())
	}

	if err := x.storageAfter(ctx, n, later, affected); err != nil {
		return err
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
	directGate := x.s.DirectClients()
	verdict := gate.Until(ctx, directGate, x.s.Inv, x.gateOptions(drain), x.afterTO)
	_ = directGate.Close()
	if !verdict.Passed { // rule:R15-gate
		_ = x.r.StepFailed(n.id("gate"), strings.Join(verdict.Reasons, "; "))
		x.lines = append(x.lines, "🩺 "+o.line())
		return x.fail(fmt.Sprintf("health gate after %s failed; the roll stopped, no later node was touched. %s", n.node.Name, o.line()), verdict.Err(),
			x.actions(o)...)
	}
	_ = x.r.StepOK(n.id("gate"), verdict.Summary())
	return nil
}

// verify is R17: every node of the roll runs the target (read from the
// nodes now, not remembered; in a hop before the last, the hop's target or
// later, as hopRoll skips a node already past it), and Flux is Ready.
// The Flux note says "not checked" when Flux could not be read or has
// nothing to be Ready, never "ready".
func (x *run) verify(ctx context.Context) (map[string]string, string, error) {
	running := map[string]string{}
	var problems []string
	// At each node's own address: the last node just came back, and the
	// endpoint's apid may still be waiting out its redial backoff to it.
	direct := x.s.DirectClients()
	defer direct.Close() //nolint:errcheck
	for _, n := range x.s.Inv.Nodes {
		tag, err := talos.TalosTagFrom(ctx, direct.Machine, n)
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		running[n.Name] = tag
	}
	last := x.roll.hop == x.roll.hops
	for _, st := range x.roll.steps {
		v := running[st.node.Name]
		if v == "" {
			continue // unreadable: already a problem above
		}
		if rv, err := talos.ParseRelease(v); err != nil || !hopDone(rv, x.roll.target, last) {
			problems = append(problems, fmt.Sprintf("%s runs %s", st.node.Name, v))
		}
	}
	flux := "Flux " + gate.NotChecked + ": " + gate.NoKubeconfig
	if x.s.Dynamic != nil {
		objs, installed, err := gate.FluxStatus(ctx, x.s.Dynamic)
		switch {
		case err != nil:
			problems = append(problems, "Flux: "+err.Error())
		case !installed:
			flux = "Flux " + gate.NotChecked + ": " + gate.FluxNotInstalled
		case len(objs) == 0:
			flux = "Flux " + gate.NotChecked + ": " + gate.FluxEmpty
		default:
			flux = fmt.Sprintf("Flux Ready (%d object(s))", len(objs))
		}
		for _, o := range objs {
			if !o.Ready && !o.Suspended {
				problems = append(problems, fmt.Sprintf("Flux %s not Ready (%s)", o.Ref(), o.Reason))
			}
		}
	}
	if len(problems) > 0 { // rule:R17
		return running, "", fmt.Errorf("after the roll (R17): %s", strings.Join(problems, "; "))
	}
	return running, flux, nil
}
