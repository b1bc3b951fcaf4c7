package etcd

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/talosbot/talosbot/plugins/cluster"
	"github.com/talosbot/talosbot/plugins/cluster/identity"
	"github.com/talosbot/talosbot/plugins/sdk"
	"google.golang.org/protobuf/types/known/emptypb"
	"k8s.io/apimachinery/pkg/util/wait"
)

// Quorum is the etcd membership as the control planes see it.
type Quorum struct {
	// Members are the etcd members by inventory name (resolved by member id
	// or peer URL, never by assuming a member name), sorted; a member no
	// inventory node resolves to is "etcd member <name>" and a problem.
	Members []string
	// Healthy are the members that answered EtcdStatus with the agreed
	// leader, no errors and not as a learner, by inventory name.
	Healthy []string
	// Leader is the agreed leader's name ("" when none or disagreement).
	Leader string
	// Listed is the member list as a healthy member returned it (empty when
	// none could), for callers that look for a member by id or peer URL.
	Listed []*machineapi.EtcdMember
	// Problems lists why members are not healthy, one entry per problem.
	Problems []string
	// cutShort: the status calls ran out of their time, so the reading says
	// more about the deadline than about the cluster.
	cutShort bool
	// forDefrag: a NOSPACE alarm does not make a member unhealthy
	// (ReadQuorumForDefrag, nospace.go).
	forDefrag bool
}

// Majority is the number of voting members a membership of n needs.
func Majority(n int) int { return n/2 + 1 }

// IsHealthy reports whether the member named is healthy.
func (q Quorum) IsHealthy(name string) bool {
	for _, h := range q.Healthy {
		if h == name {
			return true
		}
	}
	return false
}

// IsMember reports whether name is an etcd member.
func (q Quorum) IsMember(name string) bool {
	for _, m := range q.Members {
		if m == name {
			return true
		}
	}
	return false
}

// Summary is a chat line.
func (q Quorum) Summary() string {
	s := fmt.Sprintf("%d/%d etcd members healthy", len(q.Healthy), len(q.Members))
	if q.Leader != "" {
		s += ", leader " + q.Leader
	}
	if len(q.Problems) > 0 {
		s += "; " + strings.Join(q.Problems, "; ")
	}
	return s
}

// ReadQuorum asks every control plane (the R4 targets) for its etcd status
// and one healthy control plane for the member list, and names every member
// by the inventory node ids resolves it to. It never fails: what it cannot
// learn becomes a problem.
func ReadQuorum(ctx context.Context, c *cluster.Clients, ids *identity.Map) Quorum {
	return readQuorum(ctx, c, ids, Quorum{})
}

// readQuorum fills q (whose forDefrag is set) from the cluster.
func readQuorum(ctx context.Context, c *cluster.Clients, ids *identity.Map, q Quorum) Quorum {
	inv := ids.Inventory()
	targets := cluster.EtcdTargets(inv) // rule:R4-quorum
	// One call per member (cluster.PerNode): a member whose etcd is down must not
	// hide the answers of the others.
	// A member whose etcd is down answers only at the deadline, so the status
	// calls get half of what is left: the member list below needs the rest.
	sctx := ctx
	sdl, bounded := ctx.Deadline()
	if bounded {
		sdl = time.Now().Add(time.Until(sdl) / 2)
		var cancel context.CancelFunc
		sctx, cancel = context.WithDeadline(ctx, sdl)
		defer cancel()
	}
	ok, fails := cluster.PerNode(sctx, inv, targets, func(nctx context.Context) ([]*machineapi.EtcdStatus, error) {
		resp, err := c.Machine.EtcdStatus(nctx, &emptypb.Empty{})
		return resp.GetMessages(), err
	})
	// The clock, not only sctx.Err(): gRPC fails a call whose deadline has
	// passed at once, before the context's own timer has fired (late on a
	// loaded machine), and such a reading is cut short too.
	q.cutShort = sctx.Err() != nil || (bounded && !time.Now().Before(sdl))
	if d, _ := cluster.DescribeFailures(fails); d != "" {
		q.Problems = append(q.Problems, d)
	}
	q.fromStatuses(inv, ok)
	// The member list goes through raft: ask a healthy member only.
	for _, h := range q.Healthy {
		cp, _ := inv.Node(h)
		ml, err := c.Machine.EtcdMemberList(client.WithNode(ctx, cp.Address), &machineapi.EtcdMemberListRequest{QueryLocal: true})
		if err != nil || len(ml.GetMessages()) == 0 {
			continue
		}
		q.Listed = ml.GetMessages()[0].GetMembers()
		for _, m := range q.Listed {
			if n, ok := ids.ByMember(m); ok {
				q.Members = append(q.Members, n.Name)
				continue
			}
			q.Members = append(q.Members, "etcd member "+m.GetHostname())
			q.Problems = append(q.Problems, fmt.Sprintf("etcd member %s (peer URLs %s) is not a control plane of the inventory",
				m.GetHostname(), strings.Join(m.GetPeerUrls(), ",")))
		}
		break
	}
	if len(q.Members) == 0 {
		// No healthy member could list the membership: assume the inventory's.
		q.Members = cluster.Names(inv.ControlPlanes())
		if len(q.Healthy) > 0 {
			q.Problems = append(q.Problems, "member list unavailable")
		}
	}
	sort.Strings(q.Members)
	return q
}

// fromStatuses reads the members' own EtcdStatus answers (by inventory name)
// into Leader, Healthy and Problems: a member is healthy when it answered
// with the one agreed leader, no errors and not as a learner (a learner does
// not vote, so it never counts towards a majority: R7). A pure function of
// the answers, so its rules have unit tests without a cluster.
func (q *Quorum) fromStatuses(inv cluster.Inventory, ok map[string]*machineapi.EtcdStatus) {
	names := map[uint64]string{}
	leaders := map[uint64][]string{}
	for _, cp := range inv.ControlPlanes() {
		m, answered := ok[cp.Name]
		if !answered {
			continue
		}
		st := m.GetMemberStatus()
		names[st.GetMemberId()] = cp.Name
		leaders[st.GetLeader()] = append(leaders[st.GetLeader()], cp.Name)
	}
	var leaderID uint64
	switch {
	case len(leaders) == 1 && leaders[0] == nil:
		for id := range leaders {
			leaderID = id
		}
	case len(leaders[0]) > 0:
		q.Problems = append(q.Problems, "no etcd leader on "+strings.Join(leaders[0], ", "))
	case len(leaders) > 1:
		q.Problems = append(q.Problems, "members disagree on the leader")
	}
	if leaderID != 0 {
		q.Leader = MemberName(names, leaderID)
	}
	for _, cp := range inv.ControlPlanes() {
		m, answered := ok[cp.Name]
		if !answered {
			continue
		}
		st := m.GetMemberStatus()
		switch {
		case len(q.statusErrors(st)) > 0:
			q.Problems = append(q.Problems, cp.Name+" reports errors: "+strings.Join(q.statusErrors(st), ", "))
		case st.GetIsLearner():
			q.Problems = append(q.Problems, cp.Name+" is a learner")
		case leaderID == 0 || st.GetLeader() != leaderID:
		default:
			q.Healthy = append(q.Healthy, cp.Name)
		}
	}
}

// CheckDisruption is rule R16 around one control plane: every member is
// healthy with one agreed leader, so taking `node` down leaves a majority.
func (q Quorum) CheckDisruption(node string) error { // rule:R16-before
	if err := q.CheckRestored(); err != nil {
		return fmt.Errorf("etcd quorum is not safe around %s: %w", node, err)
	}
	if len(q.Members) == 1 {
		// A one-control-plane cluster has no quorum to keep: its API is down
		// for the reboot whatever the bot does (the plan warns about it).
		return nil
	}
	if after := len(q.Healthy) - 1; q.IsMember(node) && after < Majority(len(q.Members)) {
		return fmt.Errorf("etcd quorum would be lost while %s is down (R16): %d of %d members would remain, %d needed",
			node, after, len(q.Members), Majority(len(q.Members)))
	}
	return nil
}

// CheckRestored is rule R16 after a control plane is back (and the first half
// of CheckDisruption): every member healthy under one agreed leader, no
// problems reported. The one quorum-restored predicate of every plugin.
func (q Quorum) CheckRestored() error {
	if len(q.Problems) > 0 || len(q.Healthy) < len(q.Members) || q.Leader == "" { // rule:R16-after
		return fmt.Errorf("etcd quorum not restored (R16): %s", q.Summary())
	}
	return nil
}

// CheckRemoval is rule R9: removing the control plane `node` must leave a
// membership that keeps quorum. Refused when the healthy members left after
// the removal are fewer than a majority of the current membership, when only
// two members exist, or when it is the last control plane.
func (q Quorum) CheckRemoval(node string) *sdk.Refusal {
	n := len(q.Members)
	healthyAfter := len(q.Healthy)
	if q.IsHealthy(node) {
		healthyAfter--
	}
	fix := "restore the unhealthy members first (/talos health), or add a control plane and wait until it is a voting member (R7) before removing this one"
	switch {
	case n <= 1:
		return &sdk.Refusal{Rule: "R9", Reason: fmt.Sprintf("%s is the last control plane: removing it destroys the cluster", node),
			Fix: "add control planes first; a last control plane is replaced through disaster recovery, not removal"}
	case n == 2:
		return &sdk.Refusal{Rule: "R9", Reason: fmt.Sprintf("etcd has only two members: removing %s leaves one member that cannot keep quorum through any later failure", node),
			Fix: "add a third control plane and wait until it is a voting member (R7) before removing this one"}
	case healthyAfter < Majority(n): // rule:R9
		return &sdk.Refusal{Rule: "R9", Reason: fmt.Sprintf("removing %s would leave %d healthy member(s), fewer than the majority %d of the current %d members (%s)",
			node, healthyAfter, Majority(n), n, q.Summary()), Fix: fix}
	}
	return nil
}

// WaitQuorum reads the quorum until check passes or within runs out, and
// returns the last reading with check's error.
func WaitQuorum(ctx context.Context, c *cluster.Clients, ids *identity.Map, within time.Duration, check func(Quorum) error) (Quorum, error) {
	return waitQuorum(ctx, within, func(ctx context.Context) Quorum { return ReadQuorum(ctx, c, ids) }, check)
}

func waitQuorum(ctx context.Context, within time.Duration, read func(context.Context) Quorum, check func(Quorum) error) (Quorum, error) {
	var last Quorum
	var lastErr error
	_ = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, within, true, func(ctx context.Context) (bool, error) {
		q := read(ctx)
		err := check(q)
		if err == nil {
			last, lastErr = q, nil
			return true, nil
		}
		// A reading cut short by the deadline says more about the deadline
		// than about the cluster: it never replaces a complete one.
		if lastErr == nil || !q.cutShort || last.cutShort {
			last, lastErr = q, err
		}
		return false, nil
	})
	return last, lastErr
}

// MemberName is the node name of an etcd member id, or the id in hex when
// no node claims it.
func MemberName(names map[uint64]string, id uint64) string {
	if n, ok := names[id]; ok {
		return n
	}
	return fmt.Sprintf("%x", id)
}
