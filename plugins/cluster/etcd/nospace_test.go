package etcd

import (
	"slices"
	"testing"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
)

// A NOSPACE alarm (as etcd lists it among a member's status errors) makes a
// member unhealthy for every reading but a defragmentation's: an upgrade
// still stops on it (R16), a defragmentation, its remedy, goes on. Any other
// error stays a problem for both.
func TestNoSpaceIsHealthyOnlyForDefrag(t *testing.T) {
	const noSpace = "memberID:1 alarm:NOSPACE "
	statuses := map[string]*machineapi.EtcdStatus{
		"cp-1": etcdStatus(1, 1, false, noSpace), "cp-2": etcdStatus(2, 1, false, noSpace), "cp-3": etcdStatus(3, 1, false, noSpace, "etcdserver: corrupt"),
	}
	var upgrade Quorum
	upgrade.fromStatuses(threeCPs(), statuses)
	if len(upgrade.Healthy) != 0 {
		t.Errorf("plain reading counts %v healthy under NOSPACE", upgrade.Healthy)
	}
	defrag := Quorum{forDefrag: true}
	defrag.fromStatuses(threeCPs(), statuses)
	if !slices.Equal(defrag.Healthy, []string{"cp-1", "cp-2"}) {
		t.Errorf("defrag reading: healthy %v, want cp-1 and cp-2 (cp-3 has another error)", defrag.Healthy)
	}
	if !RemediedByDefrag("memberID:9 alarm: NOSPACE") || RemediedByDefrag("memberID:9 alarm:CORRUPT") {
		t.Error("RemediedByDefrag matches the wrong alarms")
	}
}
