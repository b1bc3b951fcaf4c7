// Package rollback is the built-in plugin behind `/talos rollback <node>
// [cluster]`: boot one node back into its previous Talos version (rule R19),
// tracked like an upgrade, and verify that the version went back.
//
// One node per command. A control-plane rollback is refused while another
// control plane is not a healthy etcd member (rebooting, rolling back, down)
// and while this plugin process runs another control-plane rollback for the
// same cluster: control planes are never rolled back several at once.
package rollback

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/talosbot/talosbot/internal/version"
	"github.com/talosbot/talosbot/plugins/cluster"
	"github.com/talosbot/talosbot/plugins/cluster/etcd"
	"github.com/talosbot/talosbot/plugins/cluster/gate"
	"github.com/talosbot/talosbot/plugins/cluster/identity"
	"github.com/talosbot/talosbot/plugins/cluster/storage"
	"github.com/talosbot/talosbot/plugins/cluster/talos"
	"github.com/talosbot/talosbot/plugins/sdk"
)

// Name is the plugin's catalogue name.
const Name = "rollback"

// Command is the chat command.
const Command = "rollback"

// Plugin implements sdk.Plugin. active holds the control-plane rollbacks
// this process runs, by cluster: the host runs one disruptive operation per
// cluster, but the plugin process is shared and must not rely on that alone.
type Plugin struct {
	mu     sync.Mutex
	active map[string]string // cluster → control plane being rolled back
	// now is the storage waits' clock (their limits are measured on it);
	// nil: time.Now. Tests move it instead of sleeping a limit out.
	now func() time.Time
}

// New returns the plugin.
func New() sdk.Plugin { return &Plugin{active: map[string]string{}} }

// Describe returns the manifest.
func (*Plugin) Describe(context.Context) (*sdk.Manifest, error) {
	return &sdk.Manifest{Name: Name, Version: version.Version, Commands: []*sdk.Command{{
		Name:    Command,
		Summary: "Boot one node back into its previous Talos version (A/B), tracked until it is back; one control plane at a time",
		Args: []*sdk.Arg{
			{Name: "node", Description: "the one node to roll back", Required: true},
			{Name: "cluster", Description: "cluster of the node (default: the channel's cluster)"},
		},
		Effect:  sdk.EffectDisruptive,
		Example: "/talos rollback cp-2 staging",
	}}}, nil
}

type target struct {
	inv     cluster.Inventory
	node    cluster.Node
	ids     *identity.Map
	version string
}

// check resolves the node and applies R19. It reads and changes nothing.
func check(ctx context.Context, req *sdk.OperationRequest, s *cluster.Session) (*target, error) {
	arg := strings.TrimSpace(req.Args["node"])
	if arg == "" || strings.ContainsAny(arg, ", ") {
		return nil, &sdk.Refusal{Rule: "R19", Reason: fmt.Sprintf("rollback takes exactly one node, got %s", sdk.Quote(arg)),
			Fix: "roll back one node, check it, then the next: /talos rollback <node>"}
	}
	n, ok := s.Inv.Node(arg)
	if !ok {
		return nil, &sdk.Refusal{Rule: "R19", Reason: fmt.Sprintf("%s is not in the inventory of %s", sdk.Clip(arg), s.Inv.Name),
			Fix: "use a node name from the inventory: " + strings.Join(cluster.Names(s.Inv.Nodes), ", ")}
	}
	tag, err := talos.TalosTag(ctx, s, n)
	if err != nil {
		return nil, &sdk.Refusal{Rule: "R19", Reason: err.Error(), Fix: "a rollback needs the node's Talos API; check that the node is up"}
	}
	ids := identity.Resolve(ctx, s.Clients, s.Inv, identity.Options{})
	if err := ids.Require(identity.Talos, n.Name); err != nil {
		return nil, err
	}
	if n.IsControlPlane() {
		q := etcd.ReadQuorum(ctx, s.Clients, ids)
		var others []string
		for _, cp := range s.Inv.ControlPlanes() {
			if cp.Name != n.Name && !q.IsHealthy(cp.Name) {
				others = append(others, cp.Name)
			}
		}
		// The one R19 check: the node itself may be the unhealthy one (that
		// is why it is rolled back), every other control plane must be a
		// healthy member. With no agreed leader none is, so this also
		// refuses when etcd has no quorum at all.
		if len(others) > 0 { // rule:R19
			return nil, sdk.Refuse("R19",
				fmt.Sprintf("control plane(s) %s are not healthy etcd members (another rollback, upgrade or reboot may be running): %s",
					strings.Join(others, ", "), q.Summary()),
				"never roll back several control planes at once: wait until every other control plane is back and healthy (/talos health)")
		}
		// R16 around the reboot: the members left must keep a majority (a
		// two-member etcd cannot lose one). One control plane has no quorum
		// to keep.
		after := len(q.Healthy)
		if q.IsHealthy(n.Name) {
			after--
		}
		if m := len(q.Members); m > 1 && after < etcd.Majority(m) { // rule:R16-rollback
			return nil, sdk.Refuse("R16", fmt.Sprintf("etcd quorum would be lost while %s reboots: %d of %d members would remain, %d needed", n.Name, after, m, etcd.Majority(m)),
				"add a control plane and wait until it is a voting member (R7), or restore the cluster from the etcd snapshot")
		}
	}
	return &target{inv: s.Inv, node: n, ids: ids, version: tag}, nil
}

// Plan reads the node and the quorum; it changes nothing.
func (p *Plugin) Plan(ctx context.Context, req *sdk.OperationRequest) (*sdk.OperationPlan, error) {
	if _, err := decodeConfig(req.Config); err != nil {
		return nil, err
	}
	if err := cluster.CheckRole(req.Credentials.Talosconfig, "the rollback", cluster.GateMethods, cluster.RollbackMethods); err != nil {
		return sdk.RefusalPlan(err)
	}
	s, err := cluster.OpenRequest(ctx, req)
	if err != nil {
		return nil, err
	}
	inv := s.Inv
	defer s.Close() //nolint:errcheck
	t, err := check(ctx, req, s)
	if err != nil {
		return sdk.RefusalPlan(err)
	}
	summary := fmt.Sprintf("Roll %s of %s back from %s to its previous Talos version", t.node.Name, inv.Name, t.version)
	if d := rolledBack(ctx, s, t, req); d != nil {
		// A resume after the rollback (storage.go): the same inputs as
		// the approved plan, and no second rollback.
		summary = fmt.Sprintf("%s of %s is already rolled back %s → %s; wait for its Longhorn volumes, then the closing gate", t.node.Name, inv.Name, d.from, d.to)
		t.version = d.from
	}
	plan := &sdk.OperationPlan{
		Summary:  summary,
		Target:   t.node.Name,
		Warnings: append([]string{"do not bump talos_version in Terraform until the failure is understood (R19)"}, gate.PlanWarnings(ctx, s.Clients)...),
		CanonicalInputs: sdk.NewCanonical(req).Str("node", t.node.Name).Str("address", t.node.Address).Str("role", t.node.Role).
			Str("from", t.version).Int("node_timeout_ms", req.Settings.NodeTimeoutMs).Bytes(),
	}
	for _, pi := range gate.Probes() {
		plan.Steps = append(plan.Steps, &sdk.Step{ID: "gate-before/" + pi.Name, Title: "gate before: " + pi.Title, Kind: "gate"})
	}
	plan.Steps = append(plan.Steps, &sdk.Step{ID: "rollback", Title: fmt.Sprintf("%s: %s → previous version", t.node.Name, t.version),
		Node: t.node.Name, FromVersion: t.version, Kind: "rollback"})
	if t.node.IsControlPlane() {
		plan.Steps = append(plan.Steps, &sdk.Step{ID: "quorum-after", Title: "etcd quorum after", Node: t.node.Name, Kind: "quorum"})
	}
	for _, pi := range gate.Probes() {
		plan.Steps = append(plan.Steps, &sdk.Step{ID: "gate-after/" + pi.Name, Title: "gate after: " + pi.Title, Kind: "gate"})
	}
	if err := forecast(ctx, s, t, req, plan); err != nil {
		return sdk.RefusalPlan(err)
	}
	return plan, nil
}

// claim registers a control-plane rollback; it fails while another runs.
func (p *Plugin) claim(clusterName, node string) (func(), error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.active == nil {
		p.active = map[string]string{}
	}
	if other, busy := p.active[clusterName]; busy {
		return nil, &sdk.Refusal{Rule: "R19", Reason: fmt.Sprintf("a rollback of control plane %s is running on %s", other, clusterName),
			Fix: "never roll back several control planes at once: wait for it to finish"}
	}
	p.active[clusterName] = node
	return func() {
		p.mu.Lock()
		delete(p.active, clusterName)
		p.mu.Unlock()
	}, nil
}

// Run rolls the node back and tracks it.
func (p *Plugin) Run(ctx context.Context, req *sdk.OperationRequest, r sdk.Reporter) error {
	if _, err := decodeConfig(req.Config); err != nil {
		return err
	}
	s, err := cluster.OpenRequest(ctx, req)
	if err != nil {
		return err
	}
	inv := s.Inv
	defer s.Close() //nolint:errcheck
	refuse := func(err error) error {
		re, _ := sdk.AsRefusal(err)
		return r.Result(&sdk.Result{OK: false, Summary: "refused", Error: err.Error(), Refusal: re})
	}
	t, err := check(ctx, req, s)
	if err != nil {
		if _, ok := sdk.AsRefusal(err); ok {
			return refuse(err)
		}
		return err
	}
	if t.node.IsControlPlane() {
		release, err := p.claim(inv.Name, t.node.Name)
		if err != nil {
			return refuse(err)
		}
		defer release()
	}

	w, kn := waiter(s, t, req, r, p.now)
	ev := func(st sdk.StepStatus, detail, to string) {
		_ = r.Step(&sdk.StepEvent{StepID: "rollback", Status: st, Detail: detail, Node: t.node.Name, FromVersion: t.version, ToVersion: to})
	}
	var (
		storageLines, affected []string
		now                    string // the version the node runs after the rollback
		marked                 bool   // the rolled-back mark is on the Node (storage.go)
		keepMark               bool   // the run pauses after the rollback: its resume reads the mark
	)
	defer func() {
		// A run stopped (ctx done: the bot shutting down) is interrupted,
		// not finished: its resume reads the mark too.
		if marked && !keepMark && ctx.Err() == nil {
			_ = clearRolledBack(context.WithoutCancel(ctx), s, kn)
		}
	}()
	if d := rolledBack(ctx, s, t, req); d != nil {
		// Resumed after a pause past the rollback: the node is already
		// back on d.to; a second rollback would boot the newer entry.
		marked, t.version, now = true, d.from, d.to
		skipped := fmt.Sprintf("%s was rolled back %s → %s by an earlier attempt of this operation", t.node.Name, d.from, d.to)
		for _, pi := range gate.Probes() {
			_ = r.StepSkipped("gate-before/"+pi.Name, skipped)
		}
		ev(sdk.StepSkipped, skipped, d.to)
		if w != nil {
			if affected, err = w.Affected(ctx, kn); err != nil {
				return r.Result(&sdk.Result{OK: false, Summary: "cannot read Longhorn", Error: err.Error()})
			}
		}
	} else {
		// Gate before (R1). The node itself may be what is wrong (workloads
		// failing after an upgrade), so only the rest of the cluster must pass:
		// failures that name nothing but this node are tolerated.
		gopts := gate.OptionsFor(s, req.Settings, []string{t.node.Name})
		gopts.Identity, gopts.Storage = t.ids, gateStorage(req)
		verdict := gate.Run(ctx, s.Clients, inv, gopts)
		if err := gate.Report(r, "gate-before/", verdict); err != nil {
			return err
		}
		if err := cluster.CheckGateBefore("the rollback", othersFailing(verdict, t.ids, t.node.Name)); err != nil {
			// A rollback fixes one node, not the cluster.
			return refuse(err)
		}

		ev(sdk.StepRunning, "", "")
		failRes := func(err error) error {
			ev(sdk.StepFailed, err.Error(), "")
			return r.Result(&sdk.Result{OK: false, Summary: "rollback of " + t.node.Name + " failed", Error: err.Error()})
		}
		// Storage first (storage.go): primaries off the node, last replicas
		// elsewhere; the volumes with a replica here are waited for afterwards.
		if w != nil {
			if storageLines, err = w.Before(ctx, kn); err == nil {
				affected, err = w.Affected(ctx, kn)
			}
			if err != nil {
				ev(sdk.StepFailed, err.Error(), "")
				if storage.IsLimit(err) {
					// Nothing rebooted: Resume plans the whole rollback again.
					return r.Result(pausedResult(t.node.Name, storageLines, err, "Resume once Longhorn has a healthy replica elsewhere, or Abandon"))
				}
				res := &sdk.Result{OK: false, Summary: "stopped before the rollback: storage cannot tolerate " + t.node.Name + " going down; nothing was rebooted",
					Error: err.Error(), Lines: storageLines}
				if re, ok := sdk.AsRefusal(err); ok {
					res.Refusal = re
				}
				return r.Result(res)
			}
		}
		bootID, err := talos.BootID(ctx, s, t.node)
		if err != nil {
			return failRes(err)
		}
		if err := talos.StartRollback(ctx, s, t.node); err != nil {
			return failRes(err)
		}
		res, err := talos.TrackReboot(ctx, s, t.node, talos.TrackOptions{Timeout: talos.NodeTimeout(req.Settings), OldBootID: bootID,
			Log: func(msg string) { _ = r.Log("info", "rollback", msg) }})
		if err != nil {
			return failRes(err)
		}
		if err := wentBack(t.version, res.Version); err != nil {
			return failRes(fmt.Errorf("%s: %w", t.node.Name, err))
		}
		now = res.Version
		ev(sdk.StepOK, fmt.Sprintf("%s → %s: boot id changed, running and ready", t.version, now), now)
		if w != nil && len(affected) > 0 {
			// Without the mark a wait past its limit fails instead of
			// pausing: a resume could not tell the rollback was done.
			if err := markRolledBack(ctx, s, kn, req, done{from: t.version, to: now}); err != nil {
				_ = r.Log("warn", "rollback", err.Error())
			} else {
				marked = true
			}
		}
	}
	lines := append(storageLines, fmt.Sprintf("↩️ %s rolled back %s → %s", t.node.Name, t.version, now))
	// The node is back on its old version: not every node runs the newer
	// one, so a talos_version bump made for it must be reverted (R19).
	invalidated := []string{talos.DeclaredVersion}

	if t.node.IsControlPlane() {
		_ = r.StepStarted("quorum-after", "")
		q, err := etcd.WaitQuorum(ctx, s.Clients, t.ids, gate.Timeout(req.Settings), etcd.Quorum.CheckRestored)
		if err != nil {
			_ = r.StepFailed("quorum-after", err.Error())
			return r.Result(&sdk.Result{OK: false, Summary: t.node.Name + " is back on " + now + " but etcd is not healthy", Error: err.Error(), Lines: lines, Invalidated: invalidated})
		}
		_ = r.StepOK("quorum-after", q.Summary())
	}
	if w != nil {
		after, err := w.After(ctx, kn, affected)
		if err != nil && storage.IsLimit(err) && marked {
			// The rollback is done; the run pauses (it does not fail):
			// Resume waits again and runs the closing gate, Abandon ends it.
			keepMark = true
			return r.Result(&sdk.Result{OK: false, Summary: sdk.PausedSummary, Invalidated: invalidated, Lines: append(lines,
				"⏸️ "+err.Error()+": Resume waits for Longhorn again and then runs the closing gate (it does not roll "+t.node.Name+" back twice), or Abandon")})
		}
		if err != nil {
			return r.Result(&sdk.Result{OK: false, Summary: t.node.Name + " is back on " + now + " but Longhorn is not healthy again", Error: err.Error(), Lines: lines, Invalidated: invalidated})
		}
		lines = append(lines, after...)
	}
	aopts := gate.OptionsFor(s, req.Settings, []string{})
	aopts.Identity, aopts.Storage = t.ids, gateStorage(req)
	verdict := gate.Until(ctx, s.Clients, inv, aopts, gate.AfterWait(req.Settings))
	if err := gate.Report(r, "gate-after/", verdict); err != nil {
		return err
	}
	lines = append(lines, "📝 Terraform: do not bump talos_version until the failure is understood; if you already did, revert it before the next apply (R19).")
	if !verdict.Passed {
		return r.Result(&sdk.Result{OK: false, Summary: t.node.Name + " rolled back but the closing health gate failed", Error: verdict.Err().Error(), Lines: lines, Invalidated: invalidated})
	}
	return r.Result(&sdk.Result{OK: true, Summary: fmt.Sprintf("%s rolled back to %s", t.node.Name, now), Lines: lines, Invalidated: invalidated})
}

// wentBack verifies the rollback: the node now runs an older version.
func wentBack(before, after string) error {
	b, errB := talos.ParseRelease(before)
	a, errA := talos.ParseRelease(after)
	if err := errors.Join(errB, errA); err != nil {
		if before == after {
			return fmt.Errorf("still runs %s after the rollback", after)
		}
		return nil
	}
	if a.Compare(b) >= 0 {
		return fmt.Errorf("runs %s after the rollback, not an older version than %s", after, before)
	}
	return nil
}

// othersFailing returns the gate's failures that are not only about node:
// a failing probe is tolerated when the target is the only inventory node
// its detail names, by any of its resolved names (a PDB names the
// Kubernetes Node), since the node being rolled back is expected to be unwell.
func othersFailing(g *gate.Result, ids *identity.Map, node string) []string {
	names := func(n identity.Node) []string {
		return slices.DeleteFunc([]string{n.Name, n.KubeNode, n.Hostname}, func(s string) bool { return s == "" })
	}
	mentions := func(detail string, n identity.Node) bool {
		return slices.ContainsFunc(names(n), func(s string) bool { return mentionsName(detail, s) })
	}
	self, _ := ids.Of(node)
	var out []string
	for _, p := range g.Probes {
		if p.Status != gate.StatusFail {
			continue
		}
		onlyTarget := mentions(p.Detail, self)
		for _, n := range ids.Nodes() {
			if n.Name != node && mentions(p.Detail, n) {
				onlyTarget = false
			}
		}
		if !onlyTarget {
			out = append(out, p.Title+": "+p.Detail)
		}
	}
	return out
}

// mentionsName reports whether detail names name as a whole word: worker-1
// is not named by "worker-10 not ready", nor cp-1 by "cp-1a". A name ends
// where a character that cannot continue it follows: anything but a letter,
// digit, '-' or '_', or a '.' that ends a sentence (not followed by one).
func mentionsName(detail, name string) bool {
	if name == "" {
		return false
	}
	word := func(b byte) bool {
		return b == '-' || b == '_' || b >= '0' && b <= '9' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z'
	}
	for from := 0; ; {
		i := strings.Index(detail[from:], name)
		if i < 0 {
			return false
		}
		start, end := from+i, from+i+len(name)
		before := start == 0 || !(word(detail[start-1]) || detail[start-1] == '.')
		after := end == len(detail) || !word(detail[end]) && (detail[end] != '.' || end+1 == len(detail) || !word(detail[end+1]))
		if before && after {
			return true
		}
		from = start + 1
	}
}
