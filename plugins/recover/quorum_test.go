package recover

import (
	"fmt"
	"testing"
)

// Recovery is refused while a majority of members is healthy, including
// exactly a majority (2 of 3, 3 of 5, 3 of 4): that cluster still has quorum
// and its data is newer than any snapshot. One fewer is lost quorum.
// (Issue 34: the refusal at exactly a majority survived mutation.)
func TestHasQuorumAtExactlyAMajority(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		members, healthy int
		want             bool
	}{
		{1, 1, true}, {1, 0, false},
		{2, 2, true}, {2, 1, false},
		{3, 3, true}, {3, 2, true}, {3, 1, false}, {3, 0, false},
		{4, 3, true}, {4, 2, false},
		{5, 3, true}, {5, 2, false},
	} {
		var v View
		for i := range c.members {
			st := Stale
			if i < c.healthy {
				st = Healthy
			}
			v.Members = append(v.Members, Member{Node: fmt.Sprintf("cp-%d", i+1), State: st})
		}
		if got := v.HasQuorum(); got != c.want {
			t.Errorf("%d of %d healthy: HasQuorum = %t, want %t", c.healthy, c.members, got, c.want)
		}
	}
}
