package etcd

import (
	"slices"
	"strings"
	"testing"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"

	"github.com/talosbot/talosbot/plugins/cluster"
)

func etcdStatus(id, leader uint64, learner bool, errs ...string) *machineapi.EtcdStatus {
	return &machineapi.EtcdStatus{MemberStatus: &machineapi.EtcdMemberStatus{
		MemberId: id, Leader: leader, IsLearner: learner, Errors: errs}}
}

func threeCPs() cluster.Inventory {
	inv := cluster.Inventory{Name: "prod"}
	for _, n := range []string{"cp-1", "cp-2", "cp-3"} {
		inv.Nodes = append(inv.Nodes, cluster.Node{Name: n, Role: cluster.RoleControlPlane, Address: n})
	}
	return inv
}

// R7: a learner does not vote, so it is never a healthy member, even when
// it follows the agreed leader; with one learner among three, two voters are
// healthy and the third is a problem, so no disruption may take a voter.
// (Issue 34: a learner counted as a healthy voter survived mutation.)
func TestLearnerIsNotAHealthyVoter(t *testing.T) {
	var q Quorum
	q.fromStatuses(threeCPs(), map[string]*machineapi.EtcdStatus{
		"cp-1": etcdStatus(1, 1, false), "cp-2": etcdStatus(2, 1, false), "cp-3": etcdStatus(3, 1, true),
	})
	if q.Leader != "cp-1" {
		t.Errorf("leader %q, want cp-1", q.Leader)
	}
	if !slices.Equal(q.Healthy, []string{"cp-1", "cp-2"}) {
		t.Errorf("healthy %v, want cp-1 and cp-2 (cp-3 is a learner)", q.Healthy)
	}
	if !slices.ContainsFunc(q.Problems, func(p string) bool { return strings.Contains(p, "cp-3 is a learner") }) {
		t.Errorf("problems %v do not name the learner", q.Problems)
	}
	q.Members = []string{"cp-1", "cp-2", "cp-3"}
	if err := q.CheckDisruption("cp-2"); err == nil {
		t.Error("disrupting a voter while cp-3 is only a learner was allowed")
	}
}

// A member is healthy only with the one agreed leader and no errors.
func TestHealthyNeedsTheAgreedLeaderAndNoErrors(t *testing.T) {
	var q Quorum
	q.fromStatuses(threeCPs(), map[string]*machineapi.EtcdStatus{
		"cp-1": etcdStatus(1, 1, false), "cp-2": etcdStatus(2, 1, false, "NOSPACE"), "cp-3": etcdStatus(3, 1, false),
	})
	if !slices.Equal(q.Healthy, []string{"cp-1", "cp-3"}) || len(q.Problems) != 1 || !strings.Contains(q.Problems[0], "cp-2 reports errors: NOSPACE") {
		t.Errorf("healthy %v problems %v, want cp-1, cp-3 and cp-2's error", q.Healthy, q.Problems)
	}
	var split Quorum
	split.fromStatuses(threeCPs(), map[string]*machineapi.EtcdStatus{
		"cp-1": etcdStatus(1, 1, false), "cp-2": etcdStatus(2, 2, false), "cp-3": etcdStatus(3, 1, false),
	})
	if len(split.Healthy) != 0 || split.Leader != "" || !slices.Contains(split.Problems, "members disagree on the leader") {
		t.Errorf("split view: healthy %v leader %q problems %v", split.Healthy, split.Leader, split.Problems)
	}
	var none Quorum
	none.fromStatuses(threeCPs(), map[string]*machineapi.EtcdStatus{"cp-1": etcdStatus(1, 0, false), "cp-2": etcdStatus(2, 0, false)})
	if len(none.Healthy) != 0 || !slices.Contains(none.Problems, "no etcd leader on cp-1, cp-2") {
		t.Errorf("no leader: healthy %v problems %v", none.Healthy, none.Problems)
	}
}
