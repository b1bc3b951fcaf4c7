// Package etcdops is the plugin behind `/talos etcd status` and `/talos etcd
// defrag` (docs/OPERATIONS.md "etcd hygiene"). Status shows every member's
// database size, size in use, fragmentation, leader, raft index and alarms.
// Defrag is disruptive and gated like any operation: members one at a time,
// the leader last, the etcd quorum checked before and after each (R16's
// predicates, etcd.CheckDisruption and CheckRestored), and a member whose
// fragmentation is under --min-fragmentation skipped. Talos's EtcdDefragment
// defragments the member it is sent to (v1alpha1_server.go, v1.13.9), so the
// call goes to one node at a time.
package etcdops

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/talosbot/talosbot/internal/version"
	"github.com/talosbot/talosbot/plugins/cluster"
	"github.com/talosbot/talosbot/plugins/cluster/etcd"
	"github.com/talosbot/talosbot/plugins/cluster/identity"
	"github.com/talosbot/talosbot/plugins/sdk"
)

// Name is the plugin's catalogue name.
const Name = "etcdops"

// Commands.
const (
	CmdStatus = "etcd status"
	CmdDefrag = "etcd defrag"
)

// DefaultMinFragmentation is the share of the database (percent) that must
// be free pages for a member to be defragmented.
const DefaultMinFragmentation = 20

// MinFreeBytes is the least free space worth a defragmentation: a small
// database can be mostly free pages in percent and gain nothing.
const MinFreeBytes = 1 << 20

// Plugin implements sdk.Plugin. QuorumWithin bounds each quorum wait
// (0: 2m).
type Plugin struct{ QuorumWithin time.Duration }

// New returns the plugin.
func New() sdk.Plugin { return &Plugin{} }

// Describe returns the manifest.
func (*Plugin) Describe(context.Context) (*sdk.Manifest, error) {
	cl := &sdk.Arg{Name: "cluster", Description: "cluster (default: the channel's cluster)"}
	return &sdk.Manifest{Name: Name, Version: version.Version, Commands: []*sdk.Command{
		{Name: CmdStatus, Summary: "every etcd member's database size, size in use, fragmentation, leader, raft index and alarms (read-only)",
			Args: []*sdk.Arg{cl}, Effect: sdk.EffectReadOnly, Example: "/talos etcd status production"},
		{Name: CmdDefrag, Summary: "defragment etcd one member at a time, the leader last, quorum checked before and after each; members under the fragmentation threshold are skipped",
			Args:   []*sdk.Arg{cl, {Name: "min-fragmentation", Flag: true, Description: fmt.Sprintf("percent of the database that must be free pages to defragment a member (default %d)", DefaultMinFragmentation)}},
			Effect: sdk.EffectDisruptive, Example: "/talos etcd defrag production",
			// It checks the quorum before and after each member and refuses
			// when nothing is over the threshold: safe for maintenance_schedule.
			Maintenance: true},
		{Name: CmdAlarms, Summary: "every etcd alarm and its member, as talosctl etcd alarm list shows them (read-only)",
			Args: []*sdk.Arg{cl}, Effect: sdk.EffectReadOnly, Example: "/talos etcd alarms production"},
		{Name: CmdDisarm, Summary: "disarm etcd's alarms once their cause is gone (every member's database back under its quota)",
			Args: []*sdk.Arg{cl}, Effect: sdk.EffectDisruptive, Example: "/talos etcd disarm production"},
	}}, nil
}

// Member is one member's status.
type Member struct {
	Node      string
	DBSize    int64
	InUse     int64
	Leader    bool
	RaftIndex uint64
	Alarms    []string
	Err       string
}

// Fragmentation is the free share of the database in percent.
func (m Member) Fragmentation() int {
	if m.DBSize <= 0 || m.InUse >= m.DBSize {
		return 0
	}
	return int(100 * (m.DBSize - m.InUse) / m.DBSize)
}

// Order is the defragmentation order: the members at or over the threshold
// (and with at least MinFreeBytes free),
// followers by name first and the leader last, and the members skipped.
func Order(ms []Member, minFrag int) (todo, skipped []Member) {
	var leader []Member
	for _, m := range ms {
		switch {
		case m.Err != "":
			skipped = append(skipped, m)
		case m.Fragmentation() < minFrag || m.DBSize-m.InUse < MinFreeBytes:
			skipped = append(skipped, m)
		case m.Leader:
			leader = append(leader, m)
		default:
			todo = append(todo, m)
		}
	}
	sort.Slice(todo, func(i, j int) bool { return todo[i].Node < todo[j].Node })
	return append(todo, leader...), skipped
}

// skipWhy is why Order skips m: a member not read or reporting errors (an
// alarm such as NOSPACE among them) is not "under the threshold".
func (m Member) skipWhy(minFrag int) string {
	if m.Err != "" {
		return "status error: " + m.Err
	}
	return fmt.Sprintf("%d%% free, %s; under %d%% or 1 MiB", m.Fragmentation(), mib(m.DBSize-m.InUse), minFrag)
}

func minFrag(req *sdk.OperationRequest) (int, error) {
	s := req.Args["min-fragmentation"]
	if s == "" {
		return DefaultMinFragmentation, nil
	}
	n, err := strconv.Atoi(strings.TrimSuffix(s, "%"))
	if err != nil || n < 0 || n > 100 {
		return 0, &sdk.Refusal{Rule: "R16", Reason: fmt.Sprintf("--min-fragmentation %s is not a percent", sdk.Clip(s)), Fix: "use e.g. --min-fragmentation 20"}
	}
	return n, nil
}

// read asks every control plane for its member's status and alarms.
func read(ctx context.Context, c *cluster.Clients, inv cluster.Inventory) []Member {
	targets := cluster.EtcdTargets(inv)
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	ok, fails := cluster.PerNode(sctx, inv, targets, func(nctx context.Context) ([]*machineapi.EtcdStatus, error) {
		resp, err := c.Machine.EtcdStatus(nctx, &emptypb.Empty{})
		return resp.GetMessages(), err
	})
	alarms, _ := cluster.PerNode(sctx, inv, targets, func(nctx context.Context) ([]*machineapi.EtcdAlarm, error) {
		resp, err := c.Machine.EtcdAlarmList(nctx, &emptypb.Empty{})
		return resp.GetMessages(), err
	})
	var out []Member
	for _, n := range inv.ControlPlanes() {
		st, good := ok[n.Name]
		if !good {
			continue
		}
		ms := st.GetMemberStatus()
		m := Member{Node: n.Name, DBSize: ms.GetDbSize(), InUse: ms.GetDbSizeInUse(), Leader: ms.GetLeader() != 0 && ms.GetLeader() == ms.GetMemberId(), RaftIndex: ms.GetRaftIndex()}
		if a, has := alarms[n.Name]; has {
			for _, x := range a.GetMemberAlarms() {
				if x.GetMemberId() == ms.GetMemberId() && x.GetAlarm() != machineapi.EtcdMemberAlarm_NONE {
					m.Alarms = append(m.Alarms, x.GetAlarm().String())
				}
			}
		}
		var errs []string
		for _, e := range ms.GetErrors() {
			if !etcd.RemediedByDefrag(e) { // listed in Alarms; a defragmentation is its remedy
				errs = append(errs, e)
			}
		}
		if len(errs) > 0 {
			m.Err = strings.Join(errs, "; ")
		}
		out = append(out, m)
	}
	for _, f := range fails {
		out = append(out, Member{Node: f.Node, Err: f.Msg})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// Line is one member's status line.
func (m Member) Line() string {
	if m.DBSize == 0 && m.Err != "" {
		return fmt.Sprintf("%s: not read (%s)", m.Node, m.Err)
	}
	s := fmt.Sprintf("%s: db %s, in use %s, fragmentation %d%%, raft index %d", m.Node, mib(m.DBSize), mib(m.InUse), m.Fragmentation(), m.RaftIndex)
	if m.Leader {
		s += ", leader"
	}
	if len(m.Alarms) > 0 {
		s += ", alarms " + strings.Join(m.Alarms, ",")
	}
	if m.Err != "" {
		s += ", errors: " + m.Err
	}
	return s
}

// Plan reads the members and, for defrag, lists the order.
func (p *Plugin) Plan(ctx context.Context, req *sdk.OperationRequest) (*sdk.OperationPlan, error) {
	inv, err := cluster.InventoryFrom(&req.Cluster)
	if err != nil {
		return sdk.RefusalPlan(err)
	}
	if req.Command == CmdAlarms || req.Command == CmdDisarm {
		return planAlarms(ctx, req, inv)
	}
	if req.Command == CmdStatus {
		return &sdk.OperationPlan{Summary: "read the etcd status of every member of " + inv.Name, Steps: []*sdk.Step{{ID: "status", Title: "etcd status", Kind: "read"}},
			CanonicalInputs: sdk.NewCanonical(req).Bytes()}, nil
	}
	min, err := minFrag(req)
	if err != nil {
		return sdk.RefusalPlan(err)
	}
	c, err := cluster.Connect(ctx, inv, &req.Credentials)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	todo, skipped := Order(read(ctx, c, inv), min)
	if len(todo) == 0 {
		// Nothing to do is said at the plan, so neither a person nor a
		// maintenance schedule is asked to approve a defragmentation of
		// nothing.
		var why []string
		for _, m := range skipped {
			why = append(why, m.Node+": "+m.skipWhy(min))
		}
		return sdk.RefusalPlan(&sdk.Refusal{Reason: fmt.Sprintf("no etcd member of %s needs a defragmentation: %s", inv.Name, strings.Join(why, "; ")),
			Fix: fmt.Sprintf("nothing to do; /talos etcd status %s shows the fragmentation, --min-fragmentation lowers the threshold", inv.Name)})
	}
	steps := []*sdk.Step{}
	var names []string
	for _, m := range todo {
		names = append(names, m.Node)
		steps = append(steps, &sdk.Step{ID: "defrag/" + m.Node, Title: fmt.Sprintf("%s: defragment (%d%% free)", m.Node, m.Fragmentation()), Node: m.Node, Kind: "etcd"})
	}
	for _, m := range skipped {
		steps = append(steps, &sdk.Step{ID: "skip/" + m.Node, Title: fmt.Sprintf("%s: skipped (%s)", m.Node, m.skipWhy(min)), Node: m.Node, Kind: "etcd"})
	}
	return &sdk.OperationPlan{
		Summary: fmt.Sprintf("defragment etcd on %s one member at a time, the leader last, quorum checked before and after each: %s (%d skipped under %d%%)",
			inv.Name, orNone(names), len(skipped), min),
		Target: inv.Name, Steps: steps,
		CanonicalInputs: sdk.NewCanonical(req).Str("order", strings.Join(names, ",")).Bytes(),
	}, nil
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, " → ")
}

// Run serves both commands.
func (p *Plugin) Run(ctx context.Context, req *sdk.OperationRequest, r sdk.Reporter) error {
	inv, err := cluster.InventoryFrom(&req.Cluster)
	if err != nil {
		return err
	}
	if req.Command == CmdAlarms || req.Command == CmdDisarm {
		return runAlarms(ctx, req, inv, r)
	}
	c, err := cluster.Connect(ctx, inv, &req.Credentials)
	if err != nil {
		return err
	}
	defer c.Close()
	ms := read(ctx, c, inv)
	if req.Command == CmdStatus {
		var lines []string
		for _, m := range ms {
			lines = append(lines, m.Line())
		}
		_ = r.StepOK("status", fmt.Sprintf("%d member(s)", len(ms)))
		return r.Result(&sdk.Result{OK: true, Summary: "etcd status of " + inv.Name, Lines: lines})
	}
	min, err := minFrag(req)
	if err != nil {
		re, _ := sdk.AsRefusal(err)
		return r.Result(&sdk.Result{OK: false, Summary: "refused", Error: err.Error(), Refusal: re})
	}
	todo, skipped := Order(ms, min)
	for _, m := range skipped {
		_ = r.StepSkipped("skip/"+m.Node, m.skipWhy(min))
	}
	within := p.QuorumWithin
	if within <= 0 {
		within = 2 * time.Minute
	}
	ictx, icancel := context.WithTimeout(ctx, 10*time.Second)
	ids := identity.Resolve(ictx, c, inv, identity.Options{NodeTimeout: 10 * time.Second})
	icancel()
	var lines []string
	for _, m := range todo {
		id := "defrag/" + m.Node
		_ = r.StepStarted(id, "quorum before")
		// R16's predicates around one member: it stops serving while it
		// defragments, so the others must hold the quorum.
		if q, err := etcd.WaitQuorumForDefrag(ctx, c, ids, within, func(q etcd.Quorum) error { return q.CheckDisruption(m.Node) }); err != nil {
			_ = r.StepFailed(id, err.Error())
			return r.Result(&sdk.Result{OK: false, Summary: "stopped before " + m.Node, Error: err.Error() + " (" + q.Summary() + ")", Lines: lines})
		}
		n, _ := inv.Node(m.Node)
		if err := defragment(client.WithNode(ctx, n.Address), c); err != nil {
			_ = r.StepFailed(id, err.Error())
			return r.Result(&sdk.Result{OK: false, Summary: "defragment failed on " + m.Node, Error: err.Error(), Lines: lines})
		}
		if q, err := etcd.WaitQuorumForDefrag(ctx, c, ids, within, func(q etcd.Quorum) error { return q.CheckRestored() }); err != nil {
			_ = r.StepFailed(id, err.Error())
			return r.Result(&sdk.Result{OK: false, Summary: "quorum not back after " + m.Node, Error: err.Error() + " (" + q.Summary() + ")", Lines: lines})
		}
		after := m
		for _, x := range read(ctx, c, inv) {
			if x.Node == m.Node {
				after = x
			}
		}
		line := fmt.Sprintf("%s: %s → %s", m.Node, mib(m.DBSize), mib(after.DBSize))
		lines = append(lines, line)
		_ = r.StepOK(id, line)
	}
	return r.Result(&sdk.Result{OK: true, Summary: fmt.Sprintf("defragmented %d member(s) of %s, %d skipped", len(todo), inv.Name, len(skipped)), Lines: lines})
}

// defragmenter is the part of Talos's machine API cluster.MachineAPI leaves
// out (the real client has it).
type defragmenter interface {
	EtcdDefragment(ctx context.Context, in *emptypb.Empty, opts ...grpc.CallOption) (*machineapi.EtcdDefragmentResponse, error)
}

func defragment(ctx context.Context, c *cluster.Clients) error {
	d, ok := c.Machine.(defragmenter)
	if !ok {
		return fmt.Errorf("this Talos client cannot call EtcdDefragment")
	}
	_, err := d.EtcdDefragment(ctx, &emptypb.Empty{})
	return err
}
