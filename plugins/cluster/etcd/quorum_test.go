package etcd

import (
	"strings"
	"testing"
)

func TestQuorumRules(t *testing.T) {
	three := Quorum{Members: []string{"cp-1", "cp-2", "cp-3"}, Healthy: []string{"cp-1", "cp-2", "cp-3"}, Leader: "cp-1"}
	if re := three.CheckRemoval("cp-2"); re != nil {
		t.Fatalf("healthy 3 → remove one refused: %v", re)
	}
	if err := three.CheckDisruption("cp-2"); err != nil {
		t.Fatal(err)
	}
	oneDown := Quorum{Members: three.Members, Healthy: []string{"cp-1", "cp-3"}, Leader: "cp-1", Problems: []string{"unreachable: cp-2"}}
	if re := oneDown.CheckRemoval("cp-1"); re == nil || re.Rule != "R9" {
		t.Fatalf("remove cp-1 with cp-2 down: %v", re)
	}
	if err := oneDown.CheckDisruption("cp-1"); err == nil {
		t.Fatal("upgrading cp-1 with cp-2 down allowed")
	}
	two := Quorum{Members: []string{"cp-1", "cp-2"}, Healthy: []string{"cp-1", "cp-2"}, Leader: "cp-1"}
	if re := two.CheckRemoval("cp-2"); re == nil || !strings.Contains(re.Reason, "only two members") {
		t.Fatalf("two members: %v", re)
	}
	one := Quorum{Members: []string{"cp-1"}, Healthy: []string{"cp-1"}, Leader: "cp-1"}
	if re := one.CheckRemoval("cp-1"); re == nil || !strings.Contains(re.Reason, "last control plane") {
		t.Fatalf("last: %v", re)
	}
	// R16 after a control plane is back: CheckRestored, the one predicate.
	if err := three.CheckRestored(); err != nil {
		t.Fatalf("healthy 3 not restored: %v", err)
	}
	for name, q := range map[string]Quorum{
		"a member down": {Members: three.Members, Healthy: []string{"cp-1", "cp-3"}, Leader: "cp-1"},
		"no leader":     {Members: three.Members, Healthy: three.Members},
		"a problem":     {Members: three.Members, Healthy: three.Members, Leader: "cp-1", Problems: []string{"member list unavailable"}},
	} {
		if err := q.CheckRestored(); err == nil || !strings.Contains(err.Error(), "not restored (R16)") {
			t.Errorf("%s: CheckRestored = %v, want R16 not restored", name, err)
		}
	}
}
