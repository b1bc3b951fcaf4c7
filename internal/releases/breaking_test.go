package releases

import (
	"strings"
	"testing"
)

// TestCrossed: an upgrade lists the breaking changes of every minor it
// enters, and none of the minor it starts in; a patch upgrade none.
func TestCrossed(t *testing.T) {
	v := func(s string) Version {
		t.Helper()
		x, err := Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	ids := func(cs []Change) string {
		var out []string
		for _, c := range cs {
			out = append(out, c.ID)
		}
		return strings.Join(out, ",")
	}
	for _, tc := range []struct {
		from, to string
		has, not []string
	}{
		{"v1.12.6", "v1.14.1", []string{"lifecycle-extra-kernel-args", "factory-installer", "etcd-3.6", "etcd-metrics-port", "tls13"}, nil},
		{"v1.13.9", "v1.14.1", []string{"factory-installer", "etcd-metrics-port", "workload-isolation-iscsi"}, []string{"lifecycle-extra-kernel-args"}},
		{"v1.12.6", "v1.13.9", []string{"lifecycle-extra-kernel-args"}, []string{"factory-installer", "etcd-3.6"}},
		{"v1.14.0", "v1.14.1", nil, []string{"factory-installer", "lifecycle-extra-kernel-args"}},
	} {
		got := ids(Crossed(v(tc.from), v(tc.to)))
		for _, id := range tc.has {
			if !strings.Contains(got, id) {
				t.Errorf("%s → %s: %s missing from %s", tc.from, tc.to, id, got)
			}
		}
		for _, id := range tc.not {
			if strings.Contains(got, id) {
				t.Errorf("%s → %s: %s listed in %s", tc.from, tc.to, id, got)
			}
		}
	}
	lines := CrossedLines(v("v1.12.6"), v("v1.14.1"))
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "v1.13 breaking changes: ") || !strings.Contains(lines[1], "etcd metrics on port 2383") {
		t.Errorf("lines: %q", lines)
	}
	if CrossedLines(v("v1.14.0"), v("v1.14.1")) != nil {
		t.Error("a patch upgrade crosses no minor")
	}
}

// TestBreakingTable: every change names its source, what to do, and a
// known check; ids are unique (docs/UPGRADES.md cites them).
func TestBreakingTable(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range BreakingChanges() {
		if c.ID == "" || seen[c.ID] || c.Source == "" || c.Action == "" || c.What == "" || c.Minor.Patch != 0 {
			t.Errorf("bad change %+v", c)
		}
		seen[c.ID] = true
		if c.Check != CheckRefuse && c.Check != CheckWarn && c.Check != CheckListed {
			t.Errorf("%s: check %q", c.ID, c.Check)
		}
	}
}
