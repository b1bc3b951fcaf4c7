package recover

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/talosbot/talosbot/plugins/cluster"
	"github.com/talosbot/talosbot/plugins/cluster/etcd"
)

// Member states, from the etcd service as ServiceList reports it (Talos's
// service runner, internal/app/machined/pkg/system/service_runner.go).
const (
	// Healthy: Running and its health check (a linearizable read) passes.
	Healthy = "healthy"
	// Stale: Running without a healthy read and, by its own EtcdStatus, no
	// leader: etcd on its old data. Its data dir is not empty: Bootstrap
	// answers AlreadyExists and the new cluster never accepts it (cluster ID
	// mismatch) until its EPHEMERAL partition is wiped. A member whose
	// EtcdStatus did not answer is Stale too (LeaderKnown false): the rejoin
	// step never resets it on that evidence.
	Stale = "stale"
	// Joined: Running without a healthy read yet, but its EtcdStatus names a
	// leader: a member of a cluster with quorum (the old cluster had none),
	// typically one that just joined the restored cluster. Talos's etcd
	// health check runs 5 s after the start and then every 20 s
	// (internal/app/machined/pkg/system/services/etcd.go HealthSettings at
	// v1.13.9) and a learner fails its linearizable read until it is
	// promoted (promoteMember, retried every 15 s): never reset, never a
	// reason to bootstrap again.
	Joined = "joined"
	// Waiting: Preparing ("Running pre state"): an empty data dir, the
	// service waits to join a cluster with a leader (etcd.go
	// buildInitialCluster). Only such a member can be bootstrapped.
	Waiting = "waiting"
	// Failed: the service failed (for example a restore that did not work).
	Failed = "failed"
	// GaveUp: the service failed because its join loop gave up: Talos retries
	// joining for 30 minutes (constants.EtcdJoinTimeout, buildInitialCluster in
	// etcd.go) and then fails the pre stage with "failed to build initial etcd
	// cluster". Its data dir is still empty, so it can be bootstrapped like a
	// waiting member, but it no longer joins by itself: after a restore it is
	// reset (EPHEMERAL wiped, reboot) to start its join loop again.
	GaveUp = "gave up joining"
	// Unreachable: the node's Talos API did not answer.
	Unreachable = "unreachable"
	// Other: any other service state (Finished, Starting, …).
	Other = "other"
)

// joinGaveUp is in the etcd service's message when its join loop gave up
// (argsForControlPlane in etcd.go, v1.13.9).
const joinGaveUp = "failed to build initial etcd cluster"

// Member is one control plane's etcd as the Talos API shows it.
type Member struct {
	Node    string
	Address string
	State   string
	// Service and Message are ServiceList's etcd state and last message.
	Service string
	Message string
	// Leader is the leader its EtcdStatus names (0: none) and LeaderKnown
	// whether EtcdStatus answered; asked only of Running, unhealthy members.
	Leader      uint64
	LeaderKnown bool
}

// View is every control plane's etcd, in inventory order.
type View struct {
	Members []Member
}

// Count returns how many members are in state st.
func (v View) Count(st string) int {
	n := 0
	for _, m := range v.Members {
		if m.State == st {
			n++
		}
	}
	return n
}

// Names returns the members in state st.
func (v View) Names(st string) []string {
	var out []string
	for _, m := range v.Members {
		if m.State == st {
			out = append(out, m.Node)
		}
	}
	return out
}

// Member returns the named member.
func (v View) Member(name string) (Member, bool) {
	for _, m := range v.Members {
		if m.Node == name {
			return m, true
		}
	}
	return Member{}, false
}

// HasQuorum reports whether a majority of the control planes' etcd is
// healthy: then there is nothing to recover.
func (v View) HasQuorum() bool { return v.Count(Healthy) >= etcd.Majority(len(v.Members)) }

// Lines renders the evidence, one line per control plane.
func (v View) Lines() []string {
	var out []string
	for _, m := range v.Members {
		icon := map[string]string{Healthy: "✅", Joined: "🔁", Stale: "⚠️", Waiting: "⏳", GaveUp: "⌛", Failed: "❌", Unreachable: "📵"}[m.State]
		if icon == "" {
			icon = "❔"
		}
		d := m.Service
		if m.Message != "" {
			d += " (" + m.Message + ")"
		}
		switch {
		case m.State == Joined:
			d += fmt.Sprintf(", leader %x", m.Leader)
		case m.State == Stale && m.LeaderKnown:
			d += ", no leader"
		}
		out = append(out, fmt.Sprintf("%s %s: etcd %s — %s", icon, m.Node, m.State, d))
	}
	return out
}

// Canonical is the evidence in a stable form for the plan digest.
func (v View) Canonical() map[string]string {
	out := map[string]string{}
	for _, m := range v.Members {
		out[m.Node] = m.State
	}
	return out
}

// ReadView asks every control plane for its services, one call per node so
// an unreachable node only costs its own answer, within timeout; then every
// Running, unhealthy member for its EtcdStatus (a local etcd client,
// answered without a leader: v1alpha1_server.go EtcdStatus at v1.13.9):
// one that names a leader is Joined, not Stale.
func ReadView(ctx context.Context, c *cluster.Clients, inv cluster.Inventory, timeout time.Duration) View {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ok, fails := cluster.PerNode(ctx, inv, cluster.EtcdTargets(inv), func(nctx context.Context) ([]*machineapi.ServiceList, error) {
		resp, err := c.Machine.ServiceList(nctx, &emptypb.Empty{})
		return resp.GetMessages(), err
	})
	failed := map[string]string{}
	for _, f := range fails {
		failed[f.Node] = f.Msg
	}
	var v View
	for _, cp := range inv.ControlPlanes() {
		m := Member{Node: cp.Name, Address: cp.Address}
		sl, answered := ok[cp.Name]
		if !answered {
			m.State, m.Message = Unreachable, failed[cp.Name]
			v.Members = append(v.Members, m)
			continue
		}
		m.State, m.Service = Other, "absent"
		for _, s := range sl.GetServices() {
			if s.GetId() != "etcd" {
				continue
			}
			m.Service = s.GetState()
			m.Message = s.GetHealth().GetLastMessage()
			if evs := s.GetEvents().GetEvents(); m.Message == "" && len(evs) > 0 {
				m.Message = evs[len(evs)-1].GetMsg()
			}
			switch {
			case m.Service == "Running" && s.GetHealth().GetHealthy():
				m.State = Healthy
			case m.Service == "Running":
				m.State = Stale
			case m.Service == "Preparing":
				m.State = Waiting
			case m.Service == "Failed" && strings.Contains(m.Message, joinGaveUp):
				m.State = GaveUp
			case m.Service == "Failed":
				m.State = Failed
			}
		}
		v.Members = append(v.Members, m)
	}
	var running []string
	for _, m := range v.Members {
		if m.State == Stale {
			running = append(running, m.Address)
		}
	}
	if len(running) > 0 {
		st, sfails := cluster.PerNode(ctx, inv, running, func(nctx context.Context) ([]*machineapi.EtcdStatus, error) {
			resp, err := c.Machine.EtcdStatus(nctx, &emptypb.Empty{})
			return resp.GetMessages(), err
		})
		serr := map[string]string{}
		for _, f := range sfails {
			serr[f.Node] = f.Msg
		}
		for i := range v.Members {
			m := &v.Members[i]
			if m.State != Stale {
				continue
			}
			s, ok := st[m.Node]
			if !ok {
				m.Message += "; EtcdStatus: " + serr[m.Node]
				continue
			}
			m.Leader, m.LeaderKnown = s.GetMemberStatus().GetLeader(), true
			if m.Leader != 0 {
				m.State = Joined
			}
		}
	}
	sort.SliceStable(v.Members, func(i, j int) bool { return v.Members[i].Node < v.Members[j].Node })
	return v
}

// RecoveryNode is the control plane to restore on. The choice depends only
// on states that the recovery itself does not change before its bootstrap,
// so a resumed run picks the same node and never uploads to a second one:
//   - a healthy member (an earlier attempt restored it), else a joined one
//     (Running with a leader, its health check still to pass: a cluster
//     with quorum exists, so nothing is bootstrapped a second time, which
//     would make two clusters from one snapshot), else
//   - a member whose service failed while no other is healthy (an earlier
//     restore that failed there: the run stops, never moves on to another
//     node), else
//   - the first waiting member by name (an empty data dir, which Bootstrap
//     requires), else the first that gave up joining (empty too).
//
// done reports that the restore already happened (a healthy or joined
// member exists).
func (v View) RecoveryNode() (node Member, done bool, err error) {
	for _, st := range []string{Healthy, Joined} {
		for _, m := range v.Members {
			if m.State == st {
				return m, true, nil
			}
		}
	}
	for _, m := range v.Members {
		if m.State == Failed {
			return m, false, fmt.Errorf("etcd on %s failed (%s): if an earlier recovery restored there, its data dir is not empty; "+
				"wipe it with `talosctl -n %s reset --graceful=false --reboot --system-labels-to-wipe=EPHEMERAL` and run the recovery again", m.Node, m.Message, m.Address)
		}
	}
	for _, st := range []string{Waiting, GaveUp} {
		for _, m := range v.Members {
			if m.State == st {
				return m, false, nil
			}
		}
	}
	return Member{}, false, fmt.Errorf("no control plane has an empty etcd data dir (waiting to join) to restore on (%s); "+
		"wipe one with `talosctl -n <address> reset --graceful=false --reboot --system-labels-to-wipe=EPHEMERAL` first", strings.Join(v.Lines(), "; "))
}
