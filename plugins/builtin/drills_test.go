package builtin_test

import (
	"context"
	"slices"
	"testing"

	"github.com/talosbot/talosbot/plugins/builtin"
	"github.com/talosbot/talosbot/plugins/gates"
	"github.com/talosbot/talosbot/plugins/sdk"
)

// TestDrillEvidenceIsDeclared: the host fills the readiness gates' staging
// drills only from manifests (bot/ knows no command name), so the gates must
// declare the need and the upgrade and node-replacement commands must declare
// their drills. Dropping a declaration would silently turn a drill gate into
// "no succeeded staging run" forever; this test fails instead.
func TestDrillEvidenceIsDeclared(t *testing.T) {
	declared := map[sdk.Drill]string{}
	needs := map[string]bool{}
	for _, name := range builtin.Names() {
		p, _ := builtin.New(name)
		m, err := p.Describe(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range m.Commands {
			if d := c.Drill; d != sdk.DrillUnspecified {
				if prev, dup := declared[d]; dup {
					t.Errorf("%s is declared by both %q and %q", d, prev, c.Name)
				}
				declared[d] = c.Name
			}
			needs[c.Name] = slices.Contains(c.Needs, sdk.NeedStagingDrills)
		}
	}
	if !needs[gates.Command] {
		t.Errorf("%q does not need NEED_STAGING_DRILLS: the host would never send it the drill evidence", gates.Command)
	}
	want := map[sdk.Drill]string{sdk.DrillTalosUpgrade: "upgrade talos", sdk.DrillKubernetesUpgrade: "upgrade k8s", sdk.DrillNodeReplacement: "node remove", sdk.DrillEtcdRestore: "restore-drill"}
	for d, cmd := range want {
		if declared[d] != cmd {
			t.Errorf("%s is declared by %q, want %q", d, declared[d], cmd)
		}
	}
	for _, d := range gates.Drills() {
		if _, ok := declared[d.Kind]; !ok {
			t.Errorf("the gates need drill %s but no built-in command declares it", d.Kind)
		}
	}
}
