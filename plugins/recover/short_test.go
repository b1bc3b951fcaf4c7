package recover

import "testing"

// slow marks a test of the slow tier: it drives a whole operation on the
// simulator (nodes reset and rebooted, etcd restored or members removed) and
// takes tens of seconds. `go test -short` (the fast unit tier, and `make
// mutate`) skips it; `make test` and CI run it. The refusals and pure
// checks that answer in a second or two stay in the fast tier.
func slow(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("slow tier: drives a whole operation on the simulator; run without -short")
	}
}
