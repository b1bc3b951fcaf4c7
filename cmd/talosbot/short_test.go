package main

import "testing"

// slow marks a test of the slow tier: it runs the bot against simulated
// clusters (sim, a real kube-apiserver), kills and restarts it, or compiles
// an extra plugin binary, and takes tens of seconds to minutes. `go test
// -short` (the fast tier) skips it; `make test` and CI run it. The CLI,
// config-check, refusal and packaging tests stay in the fast tier.
func slow(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("slow tier: runs the bot against simulated clusters or builds a plugin; run without -short")
	}
}
