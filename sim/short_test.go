package sim

import "testing"

// slow marks a test of the slow tier: it drives real talosctl, a real
// kube-apiserver, or whole upgrades, resets and recoveries through the
// simulator, and takes seconds to minutes on 2 shared cores. `go test
// -short` (the fast tier) skips it; `make test` and CI run it.
func slow(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("slow tier: drives talosctl, a kube-apiserver or a whole operation; run without -short")
	}
}
