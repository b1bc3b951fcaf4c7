// Package recover is the built-in plugin behind `/talos recover <cluster>`:
// etcd disaster recovery when quorum is lost, on Talos's own path (the
// disaster-recovery guide; MachineService.EtcdRecover and Bootstrap with
// recover_etcd, internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go
// and internal/app/machined/pkg/system/services/etcd.go at v1.13.9), and
// `/talos recover --guide <cluster>`, the same path as talosctl commands for
// when the bot cannot act. docs/RECOVERY.md describes both.
package recover

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/talosbot/talosbot/internal/version"
	"github.com/talosbot/talosbot/plugins/cluster"
	"github.com/talosbot/talosbot/plugins/cluster/etcd"
	"github.com/talosbot/talosbot/plugins/cluster/gate"
	"github.com/talosbot/talosbot/plugins/cluster/identity"
	"github.com/talosbot/talosbot/plugins/cluster/talos"
	"github.com/talosbot/talosbot/plugins/sdk"
)

// Name is the plugin's catalogue name.
const Name = "recover"

// Commands.
const (
	Command      = "recover"
	GuideCommand = "recover --guide"
)

// DefaultMaxAge is the oldest snapshot restored without --accept-age.
const DefaultMaxAge = 24 * time.Hour

// MinApprovals is what a recovery needs in production (without
// self-approval): two people look at the plan of the one operation that
// knowingly throws data away.
const MinApprovals = 2

// Step ids, in run order.
const (
	StepConfirm   = "confirm"
	StepIsolate   = "isolate"
	StepUpload    = "upload"
	StepBootstrap = "bootstrap"
	StepEtcd      = "etcd"
	StepRejoin    = "rejoin"
	StepMembers   = "members"
)

// Plugin implements sdk.Plugin. It keeps no per-call state.
type Plugin struct {
	now func() time.Time
}

// New returns the plugin.
func New() sdk.Plugin { return &Plugin{now: time.Now} }

// WithClock is New with a clock (tests).
func WithClock(now func() time.Time) *Plugin { return &Plugin{now: now} }

// Describe returns the manifest.
func (*Plugin) Describe(context.Context) (*sdk.Manifest, error) {
	return &sdk.Manifest{Name: Name, Version: version.Version, Commands: []*sdk.Command{{
		Name: Command,
		Summary: "etcd disaster recovery when quorum is lost: restore a verified snapshot on one control plane " +
			"(EtcdRecover, Bootstrap with recover_etcd), reset the stale members' EPHEMERAL so they rejoin, then the health gate",
		Args: []*sdk.Arg{
			{Name: "cluster", Description: "the cluster that lost etcd quorum", Required: true},
			{Name: "from", Flag: true, Description: "snapshot id or file name (default: the newest)"},
			{Name: "accept-age", Flag: true, Boolean: true, Description: "restore a snapshot older than --max-age (the data written since is lost)"},
			{Name: "max-age", Flag: true, DefaultValue: DefaultMaxAge.String(), Description: "the oldest snapshot restored without --accept-age"},
			{Name: "accept-loss", Flag: true, Boolean: true, Description: "restore although a control plane that answers still holds etcd data newer than the snapshot (its newer data is wiped)"},
		},
		Effect:        sdk.EffectDisruptive,
		ReadsSnapshot: true,
		MinApprovals:  MinApprovals,
		Example:       "/talos recover production --from production/20260101T020000Z-cp-1",
	}, {
		Name:    GuideCommand,
		Summary: "The talosctl commands of an etcd disaster recovery for this cluster and snapshot, in order, with what to check before each next one (read-only; works when no node answers)",
		Args: []*sdk.Arg{
			{Name: "cluster", Description: "the cluster to recover", Required: true},
			{Name: "from", Flag: true, Description: "snapshot id or file name (default: the newest)"},
		},
		Effect:        sdk.EffectReadOnly,
		ReadsSnapshot: true,
		Example:       "/talos recover --guide production",
	}}}, nil
}

// evidenceTimeout bounds the reading of every control plane's etcd service:
// an unreachable node answers only at the deadline.
func evidenceTimeout(s sdk.Settings) time.Duration {
	return min(talos.NodeTimeout(s), 10*time.Second)
}

// checked is what Plan and Run both establish before anything changes.
type checked struct {
	view     View
	recovery Member
	done     bool // the restore already happened (a resumed run)
	snap     *Snap
	age      time.Duration
	maxAge   time.Duration
	// survivors are the stale members' own data: revision and the objects
	// newer than the snapshot (none once their EPHEMERAL was wiped).
	survivors []Survivor
}

// check reads the evidence and the snapshot and applies every refusal. On
// a resumed run (attempt > 1) a healthy quorum is the earlier attempt's
// restore, not a reason to refuse.
func (p *Plugin) check(ctx context.Context, req *sdk.OperationRequest, s *cluster.Session) (*checked, error) {
	maxAge, err := time.ParseDuration(req.Args["max-age"])
	if req.Args["max-age"] == "" {
		maxAge, err = DefaultMaxAge, nil
	}
	if err != nil || maxAge <= 0 {
		return nil, &sdk.Refusal{Reason: fmt.Sprintf("--max-age %q is not a positive duration", req.Args["max-age"]), Fix: "for example --max-age 24h"}
	}
	c := &checked{maxAge: maxAge, view: ReadView(ctx, s.Clients, s.Inv, evidenceTimeout(req.Settings))}
	resumed := req.Attempt > 1
	// On a resumed run after the restore (a member is healthy or joined) an
	// unreachable control plane is most likely the rejoin reset rebooting
	// it: the members step waits for it instead of refusing.
	restored := c.view.Count(Healthy) + c.view.Count(Joined)
	if un := c.view.Names(Unreachable); len(un) > 0 && !(resumed && restored > 0) {
		return nil, &sdk.Refusal{Rule: "R16",
			Reason: fmt.Sprintf("control plane(s) %s did not answer: their etcd could still hold data newer than any snapshot, or a quorum this recovery would compete with", strings.Join(un, ", ")),
			Fix:    "bring them back (power, network) and run /talos recover again; if they are gone for good, remove them from the inventory (Terraform) first, or follow /talos recover --guide " + s.Inv.Name}
	}
	if c.view.HasQuorum() && !resumed {
		var cmds []string
		for _, m := range c.view.Members {
			if m.State != Healthy {
				cmds = append(cmds, fmt.Sprintf("/talos node remove %s %s", m.Node, s.Inv.Name))
			}
		}
		fix := "nothing to recover; check /talos health " + s.Inv.Name
		if len(cmds) > 0 {
			fix = "replace the unhealthy member(s) instead: " + strings.Join(cmds, "; ") + ", then add a new control plane through Terraform (it joins by itself)"
		}
		return nil, &sdk.Refusal{Rule: "R16", Reason: fmt.Sprintf("etcd quorum is present (%d of %d members healthy): a recovery would throw away the data written since the snapshot",
			c.view.Count(Healthy), len(c.view.Members)), Fix: fix}
	}
	// A member whose own etcd names a leader belongs to a cluster with
	// quorum (a leader needs one): before any restore that is the cluster
	// itself, still running, and a bootstrap would compete with it.
	if j := c.view.Names(Joined); len(j) > 0 && !resumed {
		return nil, &sdk.Refusal{Rule: "R16",
			Reason: fmt.Sprintf("etcd on %s runs with a leader although its health check has not passed: a cluster with quorum exists, and a recovery would compete with it", strings.Join(j, ", ")),
			Fix:    "wait for the health check (Talos runs it every 20 s) and see /talos health " + s.Inv.Name + "; if members stay unhealthy, replace them (/talos node remove) instead of recovering"}
	}
	if c.recovery, c.done, err = c.view.RecoveryNode(); err != nil {
		return nil, &sdk.Refusal{Rule: "R16", Reason: err.Error(), Fix: "see the reason; /talos recover --guide " + s.Inv.Name + " shows every step"}
	}
	if c.snap, err = OpenSnapshot(ctx, req, s.Inv.Name, req.Args["from"], true); err != nil {
		return nil, err
	}
	c.age = p.now().Sub(c.snap.At)
	if c.age > maxAge && req.Args["accept-age"] != "true" && !c.done {
		c.snap.Close()
		return nil, &sdk.Refusal{Rule: "R12", Reason: fmt.Sprintf("snapshot %s is %s old, older than --max-age %s: everything written since would be lost",
			c.snap.ID, c.age.Round(time.Minute), maxAge), Fix: "restore a newer snapshot with --from (/talos snapshots " + s.Inv.Name + "), or add --accept-age to restore this one anyway"}
	}
	// On a resumed run after the restore a stale member not reset yet still
	// holds its newer data: read again, it names what the recovery loses.
	c.survivors = readSurvivors(ctx, s, c.view, c.snap.work, c.snap.Revision)
	if c.done || req.Args["accept-loss"] == "true" {
		return c, nil
	}
	var reasons, fixes []string
	for _, sv := range c.survivors {
		switch {
		case sv.Err != nil:
			reasons = append(reasons, fmt.Sprintf("the revision of %s's etcd data could not be read (%v), so it may be newer than the snapshot's revision %d", sv.Node, sv.Err, c.snap.Revision))
		case sv.Revision > c.snap.Revision:
			reasons = append(reasons, fmt.Sprintf("%s answers and its etcd data is at revision %d, newer than %s at revision %d: restoring would wipe the %d revision(s) only %s holds",
				sv.Node, sv.Revision, c.snap.ID, c.snap.Revision, sv.Revision-c.snap.Revision, sv.Node))
		default:
			continue
		}
		// A file named <UTC time>-<node>.db in the cluster's snapshot dir is
		// one `--from` can pick (and the refusal then passes: same revision).
		name := filepath.Join(etcd.SnapshotOptionsFor(req).Dir, s.Inv.Name, p.now().UTC().Format(etcd.TimestampLayout)+"-"+sv.Node+".db")
		fixes = append(fixes, fmt.Sprintf("talosctl -n %s -e %s etcd snapshot %s", sv.Address, sv.Address, name))
	}
	if len(reasons) > 0 {
		c.snap.Close()
		return nil, &sdk.Refusal{Rule: "R12", Reason: strings.Join(reasons, "; "),
			Fix: "take a snapshot of that member first (" + strings.Join(fixes, "; ") + ") and restore it with /talos recover " + s.Inv.Name +
				" --from <that file>, which keeps its data; or add --accept-loss to restore " + c.snap.ID + " and lose the newer data"}
	}
	return c, nil
}

// survivorLines renders the stale members' revisions against the snapshot's.
func (c *checked) survivorLines() []string {
	var out []string
	for _, sv := range c.survivors {
		if sv.Err != nil {
			out = append(out, fmt.Sprintf("%s: revision unreadable (%v)", sv.Node, sv.Err))
			continue
		}
		out = append(out, fmt.Sprintf("%s at revision %d (snapshot %d)", sv.Node, sv.Revision, c.snap.Revision))
	}
	return out
}

// lost merges the objects the stale members hold beyond the snapshot;
// from names those members, and ok is false when none holds newer data.
func (c *checked) lost() (l Lost, from []string, ok bool) {
	for _, sv := range c.survivors {
		if sv.Err == nil && sv.Revision > c.snap.Revision {
			l, from, ok = l.merge(sv.Lost), append(from, sv.Node), true
		}
	}
	return l, from, ok
}

func (c *checked) stale() []string {
	var out []string
	for _, m := range c.view.Members {
		if m.Node != c.recovery.Node && (m.State == Stale || m.State == Failed || m.State == GaveUp) {
			out = append(out, m.Node)
		}
	}
	return out
}

func lastDrill(req *sdk.OperationRequest, snap *Snap) string {
	d := strings.Fields(req.Evidence.Backups.GetLastDrill()) // "<op-id> <state> <time>"
	if len(d) < 3 {
		return "none recorded: run /talos restore-drill " + req.Cluster.Name + " --snapshot " + snap.ID + " when you can"
	}
	at, _ := time.Parse(time.RFC3339, d[2])
	rel := "before this snapshot was taken (it drilled an older one)"
	if !at.Before(snap.At) {
		rel = "after this snapshot was taken"
	}
	return fmt.Sprintf("%s %s at %s, %s", d[0], d[1], d[2], rel)
}

// Plan shows the evidence, the snapshot, the node and the steps; it changes nothing.
func (p *Plugin) Plan(ctx context.Context, req *sdk.OperationRequest) (*sdk.OperationPlan, error) {
	if req.Command == GuideCommand {
		return p.planGuide(req)
	}
	if err := cluster.CheckRole(req.Credentials.Talosconfig, "the etcd recovery", cluster.RecoverMethods); err != nil {
		return sdk.RefusalPlan(err)
	}
	s, err := cluster.OpenRequest(ctx, req)
	if err != nil {
		return nil, err
	}
	defer s.Close() //nolint:errcheck
	c, err := p.check(ctx, req, s)
	if err != nil {
		return sdk.RefusalPlan(err)
	}
	defer c.snap.Close()
	stale := c.stale()
	summary := fmt.Sprintf("Recover etcd of %s from %s (revision %d, %s old) on %s; everything written after %s is lost. Evidence: %s",
		s.Inv.Name, c.snap.ID, c.snap.Revision, c.age.Round(time.Minute), c.recovery.Node, c.snap.At.UTC().Format(time.RFC3339), strings.Join(c.view.Lines(), "; "))
	if sl := c.survivorLines(); len(sl) > 0 {
		summary += ". Stale members' own data: " + strings.Join(sl, "; ")
	}
	if l, from, ok := c.lost(); ok {
		summary += fmt.Sprintf(". Lost by this recovery (in %s's newer data): %s", strings.Join(from, ", "), l.Words())
	}
	summary += fmt.Sprintf(". Snapshot: sha256 %s, %d keys, off-site %s, last restore drill %s", short(c.snap.SHA256), c.snap.TotalKeys, c.snap.Offsite, lastDrill(req, c.snap))
	plan := &sdk.OperationPlan{Summary: summary,
		CanonicalInputs: sdk.NewCanonical(req).Str("snapshot", c.snap.ID).Str("sha256", c.snap.SHA256).Int("revision", c.snap.Revision).
			Str("node", c.recovery.Node).Map("evidence", c.view.Canonical()).Bool("accept-age", req.Args["accept-age"] == "true").
			Bool("accept-loss", req.Args["accept-loss"] == "true").
			Duration("max-age", c.maxAge).Bytes()}
	add := func(id, title, node, kind string) {
		plan.Steps = append(plan.Steps, &sdk.Step{ID: id, Title: title, Node: node, Kind: kind})
	}
	add(StepConfirm, "confirm quorum is lost: no majority of healthy etcd members", "", "quorum")
	add(StepIsolate, fmt.Sprintf("no competing cluster: %s restores; stale member(s) %s have no leader and are never accepted by the new cluster", c.recovery.Node, orNone(stale)), "", "quorum")
	add(StepUpload, fmt.Sprintf("%s: upload %s (MachineService.EtcdRecover)", c.recovery.Node, c.snap.ID), c.recovery.Node, "etcd")
	add(StepBootstrap, c.recovery.Node+": Bootstrap with recover_etcd (talosctl bootstrap --recover-from)", c.recovery.Node, "etcd")
	add(StepEtcd, c.recovery.Node+": etcd running and healthy from the restore, Kubernetes API answering", c.recovery.Node, "etcd")
	add(StepRejoin, "reset EPHEMERAL of stale member(s) so they rejoin: "+orNone(stale), "", "reset")
	add(StepMembers, fmt.Sprintf("one leader and %d voting members", len(c.view.Members)), "", "quorum")
	for _, pi := range gate.Probes() {
		add("gate/"+pi.Name, "gate: "+pi.Title, "", "gate")
	}
	return plan, nil
}

func orNone(l []string) string {
	if len(l) == 0 {
		return "none"
	}
	return strings.Join(l, ", ")
}

func short(s string) string {
	if len(s) > 12 {
		return s[:12]
	}
	return s
}

// Run recovers. Each step reads the state first, so a resumed run skips
// what an earlier attempt did: the upload and the bootstrap happen only
// while no member is healthy, on the node RecoveryNode picks (the same on
// every attempt), and a bootstrap that answers AlreadyExists on a resumed
// run is the earlier attempt's.
func (p *Plugin) Run(ctx context.Context, req *sdk.OperationRequest, r sdk.Reporter) error {
	if req.Command == GuideCommand {
		return p.runGuide(ctx, req, r)
	}
	start := p.now()
	s, err := cluster.OpenRequest(ctx, req)
	if err != nil {
		return err
	}
	defer s.Close() //nolint:errcheck
	resumed := req.Attempt > 1
	c, err := p.check(ctx, req, s)
	if err != nil {
		if re, ok := sdk.AsRefusal(err); ok {
			_ = r.StepFailed(StepConfirm, re.Error())
			return r.Result(sdk.RefusedResult(err, "refused: nothing was changed"))
		}
		return err
	}
	defer c.snap.Close()
	n := c.recovery
	fail := func(step, summary string, err error) error {
		_ = r.StepFailed(step, err.Error())
		return r.Result(&sdk.Result{OK: false, Summary: summary, Error: err.Error()})
	}
	_ = r.Log("info", StepConfirm, "etcd before the recovery: "+strings.Join(c.view.Lines(), "; "))
	if c.done {
		_ = r.StepSkipped(StepConfirm, "resumed: "+n.Node+" already runs etcd from the restore")
		_ = r.StepSkipped(StepIsolate, "resumed: the restore happened")
	} else {
		_ = r.StepOK(StepConfirm, fmt.Sprintf("quorum lost: %d of %d members healthy, %d needed", c.view.Count(Healthy), len(c.view.Members), etcd.Majority(len(c.view.Members))))
		_ = r.StepOK(StepIsolate, fmt.Sprintf("%s restores; %s: no leader, cannot form a cluster", n.Node, orNone(c.stale())))
	}
	where := "etcd snapshot restored on " + n.Node
	if c.done {
		// Any healthy member may be the first one found now; the earlier
		// attempt's record names the node it restored on.
		where = "etcd snapshot restored by an earlier attempt (now with a leader: " + strings.Join(append(c.view.Names(Healthy), c.view.Names(Joined)...), ", ") + ")"
	}
	_ = r.Artifact(&sdk.Artifact{ID: c.snap.ID, Name: where, Sha256: c.snap.SHA256, Size: c.snap.Size, Location: c.snap.Stored, Revision: c.snap.Revision})

	nctx := client.WithNode(ctx, n.Address)
	if c.done {
		_ = r.StepSkipped(StepUpload, "resumed: "+n.Node+" already restored")
		_ = r.StepSkipped(StepBootstrap, "resumed: "+n.Node+" already bootstrapped")
	} else {
		_ = r.StepStarted(StepUpload, "")
		f, err := os.Open(c.snap.Plain)
		if err != nil {
			return fail(StepUpload, "could not read the snapshot; nothing was changed", err)
		}
		_, err = s.Talos.EtcdRecover(nctx, f)
		f.Close()
		if err != nil {
			return fail(StepUpload, "the upload to "+n.Node+" failed; nothing was bootstrapped", err)
		}
		_ = r.StepOK(StepUpload, fmt.Sprintf("%s uploaded to %s (%d bytes)", c.snap.ID, n.Node, c.snap.Size))
		_ = r.StepStarted(StepBootstrap, "")
		err = s.Talos.Bootstrap(nctx, &machineapi.BootstrapRequest{RecoverEtcd: true})
		switch {
		case err == nil:
			_ = r.StepOK(StepBootstrap, n.Node+" bootstraps etcd from the snapshot")
		case resumed && status.Code(err) == codes.AlreadyExists:
			_ = r.StepSkipped(StepBootstrap, n.Node+" was bootstrapped by the earlier attempt (AlreadyExists)")
		default:
			return fail(StepBootstrap, "Bootstrap on "+n.Node+" failed", err)
		}
	}

	// etcd from the restore, then the Kubernetes API on it.
	_ = r.StepStarted(StepEtcd, "")
	nodeTO := talos.NodeTimeout(req.Settings)
	if err := waitEtcd(ctx, s, n, nodeTO); err != nil {
		return fail(StepEtcd, "etcd on "+n.Node+" did not come up from the snapshot", err)
	}
	detail := n.Node + " runs etcd from the snapshot"
	if s.Kube != nil {
		if err := waitKube(ctx, s, nodeTO); err != nil {
			return fail(StepEtcd, "the Kubernetes API did not answer after the restore", err)
		}
		detail += "; the Kubernetes API answers"
	}
	_ = r.StepOK(StepEtcd, detail)

	// Stale members: reset EPHEMERAL (not STATE) and reboot, so their etcd
	// service starts with an empty data dir and joins. Read just before:
	// a member that names a leader in its own EtcdStatus has joined the
	// restored cluster (Joined; its health check may not have run yet, or it
	// is a learner) and is never reset, and a Running member whose
	// EtcdStatus did not answer is not reset on that evidence.
	now := ReadView(ctx, s.Clients, s.Inv, evidenceTimeout(req.Settings))
	var reset []string
	for _, m := range now.Members {
		// A member that gave up joining has an empty data dir but no join
		// loop any more: the reset reboots it into a new one.
		if m.Node == n.Node || (m.State != Stale && m.State != Failed && m.State != GaveUp) {
			continue
		}
		if m.State == Stale && !m.LeaderKnown {
			return fail(StepRejoin, "not reset: could not tell whether "+m.Node+"'s etcd has joined the restored cluster",
				fmt.Errorf("%s: etcd Running and not healthy, and its EtcdStatus did not answer (%s); run the recovery again, or reset it by hand once `talosctl -n %s etcd status` shows no leader",
					m.Node, m.Message, m.Address))
		}
		// EPHEMERAL, and on v1.14 a dedicated ETCD volume too (volume.go).
		labels := etcdWipeLabels(ctx, s, m.Address)
		_, err := s.Talos.ResetGenericWithResponse(client.WithNode(ctx, m.Address), &machineapi.ResetRequest{Graceful: false, Reboot: true,
			SystemPartitionsToWipe: wipeSpecs(labels)})
		if err != nil {
			return fail(StepRejoin, "could not reset "+m.Node+"'s "+wipeFlag(labels), err)
		}
		reset = append(reset, m.Node+" ("+wipeFlag(labels)+")")
	}
	joined := ""
	if j := now.Names(Joined); len(j) > 0 {
		joined = "; joined the restored cluster (a leader, health check pending), not reset: " + strings.Join(j, ", ")
	}
	if len(reset) == 0 {
		_ = r.StepSkipped(StepRejoin, "no member on stale data"+joined)
	} else {
		_ = r.StepOK(StepRejoin, "wiped, rebooting to join: "+strings.Join(reset, ", ")+joined)
	}

	_ = r.StepStarted(StepMembers, "")
	want := len(s.Inv.ControlPlanes())
	// Members are matched to control planes by peer URL: the restore gave
	// every member a new id, so names are resolved now, not before.
	ids := identity.Resolve(ctx, s.Clients, s.Inv, identity.Options{})
	q, err := etcd.WaitQuorum(ctx, s.Clients, ids, gate.Timeout(req.Settings), func(q etcd.Quorum) error {
		if err := q.CheckRestored(); err != nil {
			return err
		}
		if len(q.Members) != want {
			return fmt.Errorf("%d of %d control planes are voting members", len(q.Members), want)
		}
		return nil
	})
	if err != nil {
		return fail(StepMembers, "etcd was restored on "+n.Node+" but not every control plane rejoined", err)
	}
	_ = r.StepOK(StepMembers, q.Summary())

	verdict := gate.Until(ctx, s.Clients, s.Inv, gate.OptionsFor(s, req.Settings, []string{}), gate.Timeout(req.Settings))
	if err := gate.Report(r, "gate/", verdict); err != nil {
		return err
	}
	on := n.Node
	if c.done {
		on = "the node of the earlier attempt"
	}
	lines := []string{
		fmt.Sprintf("♻️ restored %s on %s: revision %d, %d keys, sha256 %s", c.snap.ID, on, c.snap.Revision, c.snap.TotalKeys, short(c.snap.SHA256)),
		fmt.Sprintf("🕳️ lost: everything written after %s (%s before the recovery started): objects created or changed since are gone, deleted ones are back",
			c.snap.At.UTC().Format(time.RFC3339), start.Sub(c.snap.At).Round(time.Second)),
	}
	switch l, from, ok := c.lost(); {
	case ok:
		lines = append(lines, fmt.Sprintf("🕳️ lost objects (in %s's data, newer than the snapshot): %s", strings.Join(from, ", "), l.Words()))
	case c.done:
		lines = append(lines, "🕳️ the stale members' newer data was wiped by an earlier attempt: the objects it lost are named in this operation's earlier plan (its approval card)")
	default:
		lines = append(lines, "🕳️ no control plane that answered held data newer than the snapshot, so the objects written after it cannot be named")
	}
	lines = append(lines, fmt.Sprintf("⏱️ took %s", p.now().Sub(start).Round(time.Second)))
	for _, sv := range c.survivors {
		if sv.Err == nil && sv.Revision > c.snap.Revision {
			lines = append(lines, fmt.Sprintf("🕳️ %s held revision %d, %d newer than the snapshot's (--accept-loss); its data was wiped to rejoin", sv.Node, sv.Revision, sv.Revision-c.snap.Revision))
		}
	}
	if !verdict.Passed {
		return r.Result(&sdk.Result{OK: false, Summary: "etcd was restored but the closing health gate failed", Error: verdict.Err().Error(), Lines: lines})
	}
	return r.Result(&sdk.Result{OK: true, Summary: fmt.Sprintf("%s recovered from %s (revision %d) on %s", s.Inv.Name, c.snap.ID, c.snap.Revision, on), Lines: lines})
}

func waitEtcd(ctx context.Context, s *cluster.Session, n Member, within time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	inv := cluster.Inventory{Name: s.Inv.Name, Environment: s.Inv.Environment}
	if nd, ok := s.Inv.Node(n.Node); ok {
		inv.Nodes = []cluster.Node{nd}
	}
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	last := "waiting"
	for {
		v := ReadView(ctx, s.Clients, inv, 5*time.Second)
		if len(v.Members) == 1 {
			m := v.Members[0]
			switch m.State {
			case Healthy:
				return nil
			case Failed:
				// Bootstrap answered, the restore did not work (the etcd
				// service's pre stage): Talos reports it there, not in the reply.
				return fmt.Errorf("the etcd service failed: %s; its data dir is not empty now: wipe it with talosctl -n %s reset --graceful=false --reboot --system-labels-to-wipe=EPHEMERAL before another attempt", m.Message, m.Address)
			}
			last = m.Service + " " + m.Message
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not healthy within %s (%s): %w", within, last, errors.New("timeout"))
		case <-tick.C:
		}
	}
}

func waitKube(ctx context.Context, s *cluster.Session, within time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		// The API answering on the restored etcd is enough here: full
		// readiness (every etcd endpoint, nodes, pods) is the closing gate's.
		_, err := s.Kube.CoreV1().Namespaces().Get(ctx, "kube-system", metav1.GetOptions{})
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the Kubernetes API within %s: %w", within, err)
		case <-tick.C:
		}
	}
}
