package etcdops

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	etcdres "github.com/siderolabs/talos/pkg/machinery/resources/etcd"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/talosbot/talosbot/internal/talosrbac"
	"github.com/talosbot/talosbot/plugins/cluster"
	"github.com/talosbot/talosbot/plugins/sdk"
)

// Commands for etcd's alarms.
const (
	CmdAlarms = "etcd alarms"
	CmdDisarm = "etcd disarm"
)

// DefaultQuotaBytes is etcd's --quota-backend-bytes when Talos passes none
// (etcd v3.7.3 server/storage/quota.go DefaultQuotaBytes, 2 GiB); Talos
// sets it only from cluster.etcd.extraArgs.
const DefaultQuotaBytes int64 = 2 << 30

const quotaArg = "quota-backend-bytes"

// DisarmMethods are the Talos calls of a disarm (os:operator or os:admin
// may make EtcdAlarmDisarm, Talos machined.go v1.13.9).
var DisarmMethods = []string{talosrbac.EtcdStatus, talosrbac.EtcdAlarmList, talosrbac.EtcdAlarmDisarm}

// Alarm is one active etcd alarm as talosctl `etcd alarm list` shows it:
// the member (by node name when a control plane runs it) and the alarm.
type Alarm struct {
	Node   string // "" when no control plane of the inventory runs the member
	Member uint64
	Alarm  string
}

// Line is the chat line, talosctl's columns (MEMBER, ALARM) with the node.
func (a Alarm) Line() string {
	who := a.Node
	if who == "" {
		who = "unknown member"
	}
	return fmt.Sprintf("%s (member %s): %s", who, etcdres.FormatMemberID(a.Member), a.Alarm)
}

// readAlarms asks every control plane for etcd's alarm list (Talos
// EtcdAlarmList: the local member's client, and etcd's list is the
// cluster's), and names each alarm's member by the node whose status has its
// id. The alarms every answering member lists are the same; a control plane
// that does not answer is a failure the caller reports.
func readAlarms(ctx context.Context, c *cluster.Clients, inv cluster.Inventory) ([]Alarm, []cluster.NodeFailure) {
	targets := cluster.EtcdTargets(inv)
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	ok, fails := cluster.PerNode(sctx, inv, targets, func(nctx context.Context) ([]*machineapi.EtcdAlarm, error) {
		resp, err := c.Machine.EtcdAlarmList(nctx, &emptypb.Empty{})
		return resp.GetMessages(), err
	})
	st, _ := cluster.PerNode(sctx, inv, targets, func(nctx context.Context) ([]*machineapi.EtcdStatus, error) {
		resp, err := c.Machine.EtcdStatus(nctx, &emptypb.Empty{})
		return resp.GetMessages(), err
	})
	names := map[uint64]string{}
	for n, s := range st {
		names[s.GetMemberStatus().GetMemberId()] = n
	}
	seen := map[string]bool{}
	var out []Alarm
	for _, a := range ok {
		for _, x := range a.GetMemberAlarms() {
			if x.GetAlarm() == machineapi.EtcdMemberAlarm_NONE {
				continue
			}
			al := Alarm{Node: names[x.GetMemberId()], Member: x.GetMemberId(), Alarm: x.GetAlarm().String()}
			if k := al.Line(); !seen[k] {
				seen[k] = true
				out = append(out, al)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Line() < out[j].Line() })
	return out, fails
}

// readQuotas reads each control plane's etcd quota from its EtcdSpec
// resource (EtcdSpecs.etcd.talos.dev: the machine config's
// cluster.etcd.extraArgs, Talos internal/app/machined/pkg/controllers/etcd/spec.go,
// v1.13.9), DefaultQuotaBytes when the argument is not set. A value that is
// not a byte count is an error: the bot does not guess a quota.
func readQuotas(ctx context.Context, c *cluster.Clients, inv cluster.Inventory) (map[string]int64, error) {
	out := map[string]int64{}
	for _, n := range inv.ControlPlanes() {
		spec, err := safe.StateGetByID[*etcdres.Spec](client.WithNode(ctx, n.Address), c.COSI, etcdres.SpecID)
		if err != nil {
			return nil, fmt.Errorf("read the etcd spec of %s: %w", n.Name, err)
		}
		out[n.Name] = DefaultQuotaBytes
		if v := spec.TypedSpec().ExtraArgs[quotaArg].Values; len(v) > 0 {
			q, err := strconv.ParseInt(v[len(v)-1], 10, 64)
			if err != nil || q < 0 {
				return nil, fmt.Errorf("%s: etcd's %s is %q, not a byte count", n.Name, quotaArg, sdk.Clip(v[len(v)-1]))
			}
			if q > 0 {
				out[n.Name] = q
			}
		}
	}
	return out, nil
}

// DisarmBlockers says why disarming would not hold: etcd checks each write
// against the database file of the member serving it (BackendQuota.Available:
// DbSize plus the write under the quota), so while any member's file is at or
// over its quota the next write raises NOSPACE again. Each line names the
// sizes and the fix. Members not read block too: their size is unknown.
func DisarmBlockers(ms []Member, quotas map[string]int64, cl string) []string {
	var out []string
	for _, m := range ms {
		q, ok := quotas[m.Node]
		switch {
		case m.DBSize == 0 && m.Err != "":
			out = append(out, fmt.Sprintf("%s: size not read (%s); fix: bring its etcd back (/talos etcd status %s)", m.Node, m.Err, cl))
		case !ok:
			out = append(out, fmt.Sprintf("%s: quota not read", m.Node))
		case m.DBSize < q:
		case m.InUse < q-MinFreeBytes:
			out = append(out, fmt.Sprintf("%s: database %s is over its quota %s (in use %s); fix: defragment first, /talos etcd defrag %s",
				m.Node, mib(m.DBSize), mib(q), mib(m.InUse), cl))
		default:
			out = append(out, fmt.Sprintf("%s: database %s, %s of it in use, is over its quota %s; fix: free space (delete keys; kube-apiserver compacts old revisions every 5 minutes) or raise %s in cluster.etcd.extraArgs, then defragment",
				m.Node, mib(m.DBSize), mib(m.InUse), mib(q), quotaArg))
		}
	}
	return out
}

// disarmer is the part of Talos's machine API cluster.MachineAPI leaves out.
type disarmer interface {
	EtcdAlarmDisarm(ctx context.Context, in *emptypb.Empty, opts ...grpc.CallOption) (*machineapi.EtcdAlarmDisarmResponse, error)
}

// disarmCheck reads what a disarm depends on and refuses while it would not
// hold; it returns the alarms to disarm. Its refusals name no runbook rule:
// the runbook has none for alarms (R16 is the quorum around a control
// plane), and a refusal that cites one sends the reader to the wrong row.
func disarmCheck(ctx context.Context, c *cluster.Clients, inv cluster.Inventory) ([]Alarm, error) {
	alarms, fails := readAlarms(ctx, c, inv)
	if d, _ := cluster.DescribeFailures(fails); d != "" {
		return nil, &sdk.Refusal{Reason: "etcd alarms not read from every control plane: " + d, Fix: "bring the control planes back (/talos health " + inv.Name + ")"}
	}
	if len(alarms) == 0 {
		return nil, &sdk.Refusal{Reason: "etcd has no alarm on " + inv.Name, Fix: "nothing to disarm; /talos etcd alarms " + inv.Name + " lists them"}
	}
	// Talos disarms every alarm at once (AlarmDisarm with no member): only
	// a NOSPACE alarm has a cause the bot checks is gone. A CORRUPT alarm
	// means a member's data differs from the others'; disarming it lets that
	// member serve again, so it is left to a person.
	var other []string
	for _, a := range alarms {
		if a.Alarm != machineapi.EtcdMemberAlarm_NOSPACE.String() {
			other = append(other, a.Line())
		}
	}
	if len(other) > 0 {
		return nil, &sdk.Refusal{Reason: "etcd has an alarm the bot does not disarm: " + strings.Join(other, ", ") + "; a disarm clears every alarm at once",
			Fix: "a CORRUPT member's data differs from the others': replace the member (/talos node remove, then add it back) or restore from a snapshot; then disarm with talosctl etcd alarm disarm"}
	}
	quotas, err := readQuotas(ctx, c, inv)
	if err != nil {
		return nil, &sdk.Refusal{Reason: err.Error(), Fix: "set " + quotaArg + " in cluster.etcd.extraArgs to a byte count"}
	}
	if b := DisarmBlockers(read(ctx, c, inv), quotas, inv.Name); len(b) > 0 { // the cause is still there
		return nil, &sdk.Refusal{Reason: "the space is not back, so NOSPACE would be raised again at the next write: " + strings.Join(b, "; "),
			Fix: "defragment (/talos etcd defrag " + inv.Name + ") or free space, then disarm"}
	}
	return alarms, nil
}

func planAlarms(ctx context.Context, req *sdk.OperationRequest, inv cluster.Inventory) (*sdk.OperationPlan, error) {
	if req.Command == CmdAlarms {
		return &sdk.OperationPlan{Summary: "list the etcd alarms of " + inv.Name, Steps: []*sdk.Step{{ID: "alarms", Title: "etcd alarm list", Kind: "read"}},
			CanonicalInputs: sdk.NewCanonical(req).Bytes()}, nil
	}
	if err := cluster.CheckRole(req.Credentials.Talosconfig, "the disarm", DisarmMethods); err != nil {
		return sdk.RefusalPlan(err)
	}
	c, err := cluster.Connect(ctx, inv, &req.Credentials)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	alarms, err := disarmCheck(ctx, c, inv)
	if err != nil {
		return sdk.RefusalPlan(err)
	}
	var names []string
	for _, a := range alarms {
		names = append(names, a.Line())
	}
	return &sdk.OperationPlan{
		Summary: fmt.Sprintf("disarm etcd's alarms on %s (the space is back under every member's quota): %s", inv.Name, strings.Join(names, ", ")),
		Target:  inv.Name, Steps: []*sdk.Step{{ID: "disarm", Title: "disarm etcd alarms", Kind: "etcd"}, {ID: "verify", Title: "no alarm comes back", Kind: "read"}},
		CanonicalInputs: sdk.NewCanonical(req).Str("alarms", strings.Join(names, ",")).Bytes(),
	}, nil
}

func runAlarms(ctx context.Context, req *sdk.OperationRequest, inv cluster.Inventory, r sdk.Reporter) error {
	c, err := cluster.Connect(ctx, inv, &req.Credentials)
	if err != nil {
		return err
	}
	defer c.Close()
	if req.Command == CmdAlarms {
		alarms, fails := readAlarms(ctx, c, inv)
		lines := []string{}
		for _, a := range alarms {
			lines = append(lines, a.Line())
		}
		if len(alarms) == 0 {
			lines = append(lines, "no alarms")
		}
		for _, f := range fails {
			lines = append(lines, fmt.Sprintf("%s: not read (%s)", f.Node, f.Msg))
		}
		_ = r.StepOK("alarms", fmt.Sprintf("%d alarm(s)", len(alarms)))
		return r.Result(&sdk.Result{OK: true, Summary: "etcd alarms of " + inv.Name, Lines: lines})
	}
	// The cluster may have changed since the plan: check again.
	alarms, err := disarmCheck(ctx, c, inv)
	if err != nil {
		re, _ := sdk.AsRefusal(err)
		_ = r.StepFailed("disarm", err.Error())
		return r.Result(&sdk.Result{OK: false, Summary: "refused", Error: err.Error(), Refusal: re})
	}
	d, ok := c.Machine.(disarmer)
	if !ok {
		return fmt.Errorf("this Talos client cannot call EtcdAlarmDisarm")
	}
	// Talos disarms every listed alarm through the local member's client,
	// and etcd's alarms are the cluster's: one control plane is enough.
	cp := inv.ControlPlanes()[0]
	_ = r.StepStarted("disarm", "on "+cp.Name)
	if _, err := d.EtcdAlarmDisarm(client.WithNode(ctx, cp.Address), &emptypb.Empty{}); err != nil {
		_ = r.StepFailed("disarm", err.Error())
		return r.Result(&sdk.Result{OK: false, Summary: "disarm failed", Error: err.Error()})
	}
	_ = r.StepOK("disarm", fmt.Sprintf("%d alarm(s)", len(alarms)))
	after, _ := readAlarms(ctx, c, inv)
	if len(after) > 0 {
		var l []string
		for _, a := range after {
			l = append(l, a.Line())
		}
		_ = r.StepFailed("verify", "raised again: "+strings.Join(l, ", "))
		return r.Result(&sdk.Result{OK: false, Summary: "alarms came back after the disarm", Error: strings.Join(l, ", "), Lines: l})
	}
	_ = r.StepOK("verify", "no alarms")
	var lines []string
	for _, a := range alarms {
		lines = append(lines, "disarmed "+a.Line())
	}
	return r.Result(&sdk.Result{OK: true, Summary: fmt.Sprintf("disarmed %d etcd alarm(s) on %s", len(alarms), inv.Name), Lines: lines})
}
