package talosupgrade

import (
	"strings"
	"testing"
	"time"

	"github.com/talosbot/talosbot/plugins/cluster"
	"github.com/talosbot/talosbot/plugins/cluster/talos"
)

// TestFinalCheckNeedsEveryNodeOnTheTarget is R17 in its own package's fast
// tier: after the roll every node of it must run the target, read from the
// nodes (not remembered from the roll). Nodes still on the old release fail
// the check, each named with what it runs; in a hop before the last, a node
// already past the hop's target is accepted, in the last hop it is not.
func TestFinalCheckNeedsEveryNodeOnTheTarget(t *testing.T) {
	t.Parallel()
	e := start(t, 1, 1, false, nil)
	ctx := ctxFor(t, time.Minute)
	s, err := cluster.OpenRequest(ctx, e.request(t, target))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	var steps []nodeStep
	for _, n := range s.Inv.Nodes {
		steps = append(steps, nodeStep{node: n})
	}
	check := func(version string, hop, hops int) (map[string]string, string, error) {
		t.Helper()
		rel, err := talos.ParseRelease(version)
		if err != nil {
			t.Fatal(err)
		}
		x := &run{s: s, roll: &roll{target: rel, steps: steps, hop: hop, hops: hops}}
		return x.verify(ctx)
	}

	running, _, err := check(target, 1, 1)
	if err == nil || !strings.Contains(err.Error(), "(R17)") {
		t.Fatalf("nodes on %s passed the final check for %s: %v", from, target, err)
	}
	for _, n := range s.Inv.Nodes {
		if running[n.Name] != from || !strings.Contains(err.Error(), n.Name+" runs "+from) {
			t.Errorf("%s: read %q; error %v should name it running %s", n.Name, running[n.Name], err, from)
		}
	}

	if _, flux, err := check(from, 1, 1); err != nil || !strings.Contains(flux, "not checked") {
		t.Fatalf("every node on the target: %q, %v; want it passed, Flux not checked (no kubeconfig)", flux, err)
	}
	// v1.12.6 is past a hop target of v1.12.2: fine in hop 1 of 2, not in the last hop.
	if _, _, err := check("v1.12.2", 1, 2); err != nil {
		t.Errorf("a node past a middle hop's target failed the check: %v", err)
	}
	if _, _, err := check("v1.12.2", 2, 2); err == nil {
		t.Error("a node past the last hop's target (not on it) passed the check")
	}
}
