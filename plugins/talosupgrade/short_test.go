package talosupgrade

import "testing"

// slow marks a test of the slow tier: it drives a roll (reboots, drains, a
// real kube-apiserver or talosctl) on the simulator and takes seconds to a
// minute. `go test -short` (the fast unit tier, and `make mutate`) skips it;
// `make test` and CI run it. The refusals, plans and pure rule checks stay
// in the fast tier, so the tier still notices a rule's line breaking.
func slow(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("slow tier: drives a roll on the simulator; run without -short")
	}
}
