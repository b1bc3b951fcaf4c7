package cluster_test

import (
	"strings"
	"testing"

	"github.com/talosbot/talosbot/plugins/cluster"
	"github.com/talosbot/talosbot/plugins/sdk"
)

// TestCheckGateBefore is R1 in its own package: any failure of the gate
// before a disruptive operation refuses it, naming every failure and the
// operation; a gate with nothing failing lets it run.
func TestCheckGateBefore(t *testing.T) {
	if err := cluster.CheckGateBefore("the upgrade", nil); err != nil {
		t.Fatalf("a passed gate refused: %v", err)
	}
	err := cluster.CheckGateBefore("the removal", []string{"etcd status: no etcd leader", "Flux: stalled"})
	re, ok := sdk.AsRefusal(err)
	if !ok || re.Rule != "R1" || re.Fix == "" {
		t.Fatalf("a failed gate: %v, want an R1 refusal with a fix", err)
	}
	for _, want := range []string{"before the removal", "etcd status: no etcd leader", "Flux: stalled"} {
		if !strings.Contains(re.Reason, want) {
			t.Errorf("refusal %q does not name %q", re.Reason, want)
		}
	}
}

// TestCheckSnapshotDir is R12's precondition in its own package: without a
// snapshot directory off the cluster the operation is refused, saying what
// to set; with one it runs.
func TestCheckSnapshotDir(t *testing.T) {
	if err := cluster.CheckSnapshotDir("/var/lib/talosbot/snapshots", "the upgrade"); err != nil {
		t.Fatalf("a configured directory refused: %v", err)
	}
	re, ok := sdk.AsRefusal(cluster.CheckSnapshotDir("", "the upgrade"))
	if !ok || re.Rule != "R12" || !strings.Contains(re.Reason, "precede the upgrade") || re.Fix == "" {
		t.Fatalf("no directory: %v, want an R12 refusal with a fix", re)
	}
}
