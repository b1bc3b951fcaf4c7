package talos

import (
	"slices"
	"strings"
	"testing"

	"github.com/talosbot/talosbot/internal/releases"
	"github.com/talosbot/talosbot/plugins/cluster"
)

func rel(t *testing.T, s string) Release {
	t.Helper()
	v, err := ParseRelease(s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestCheckUpgradePath(t *testing.T) {
	for _, tc := range []struct{ from, to, want string }{
		{"v1.12.6", "v1.13.9", ""},
		{"v1.13.2", "v1.13.9", ""},
		{"v1.13.9", "v1.13.9", ""},
		{"v1.12.6", "v1.14.1", "skips a minor"},
		{"v1.11.6", "v1.13.9", "skips a minor"},
		{"v1.12.6", "v1.12.1", "downgrade"},
		{"v1.13.0", "v1.12.6", "downgrade"},
		{"v1.13.9", "v1.14.0", ""},
		{"v1.13.9", "v1.14.1", ""},
		{"v1.14.1", "v1.15.0", "upgrades to version 1.15.0 are not supported"}, // machinery v1.14.1's tables end at 1.14
	} {
		re := CheckUpgradePath("n1", rel(t, tc.from), rel(t, tc.to))
		switch {
		case tc.want == "" && re != nil:
			t.Errorf("%s → %s refused: %v", tc.from, tc.to, re)
		case tc.want != "" && (re == nil || re.Rule != "R10" || !strings.Contains(re.Reason, tc.want) || re.Fix == ""):
			t.Errorf("%s → %s: want R10 %q, got %v", tc.from, tc.to, tc.want, re)
		}
	}
	if _, err := ParseRelease("v1.13"); err == nil {
		t.Fatal("v1.13 parsed as a release")
	}
}

func TestPatchCheck(t *testing.T) {
	known := releases.ParseAll([]string{"v1.12.6", "v1.13.2", "v1.13.9"})
	if w, re := PatchCheck(rel(t, "v1.13.9"), known, true); w != "" || re != nil {
		t.Fatalf("newest patch: %q %v", w, re)
	}
	if w, re := PatchCheck(rel(t, "v1.13.2"), known, false); re != nil || !strings.Contains(w, "v1.13.9 is known") {
		t.Fatalf("older patch: %q %v", w, re)
	}
	if _, re := PatchCheck(rel(t, "v1.13.2"), known, true); re == nil || !strings.Contains(re.Fix, "v1.13.9") {
		t.Fatalf("older patch with policy: %v", re)
	}
	if w, _ := PatchCheck(rel(t, "v1.13.5"), releases.ParseAll([]string{"v1.12.6"}), false); !strings.Contains(w, "not in the configured list") {
		t.Fatalf("unlisted: %q", w)
	}
	// No release known: the newest patch cannot be confirmed. A warning,
	// and with the policy a refusal (fail closed), saying how to fix it.
	if w, re := PatchCheck(rel(t, "v1.13.9"), nil, false); re != nil || !strings.Contains(w, "cannot confirm") {
		t.Fatalf("nothing known: %q %v", w, re)
	}
	if w, re := PatchCheck(rel(t, "v1.13.9"), nil, true); w != "" || re == nil || re.Rule != "R10" ||
		!strings.Contains(re.Reason, "cannot confirm") || !strings.Contains(re.Fix, "releases.talos") {
		t.Fatalf("nothing known with the policy: %q %v", w, re)
	}
}

func TestInstallerDerivationAndR14(t *testing.T) {
	def, lh := strings.Repeat("a", 64), strings.Repeat("b", 64)
	declared := map[string]string{DeclaredSchematic: def, DeclaredLonghornInstaller: "factory.talos.dev/nocloud-installer/" + lh + ":v1.12.6"}
	running := func(node cluster.Node, schematic string) NodeState {
		return NodeState{Node: node, Version: "v1.12.6", Platform: "nocloud",
			Image: "factory.talos.dev/nocloud-installer/" + schematic + ":v1.12.6"}
	}
	to := rel(t, "v1.13.9")

	w := cluster.Node{Name: "w1", Platform: "nocloud"}
	inst, err := TargetInstaller(running(w, def), declared, to)
	if err != nil || inst.Ref() != "factory.talos.dev/nocloud-installer/"+def+":v1.13.9" {
		t.Fatalf("default class: %v %v", inst.Ref(), err)
	}
	if re := CheckInstallerChange(running(w, def), inst); re != nil {
		t.Fatalf("same platform and schematic refused: %v", re)
	}

	l := cluster.Node{Name: "w2", Platform: "nocloud", InstallerClass: ClassLonghorn}
	inst, _ = TargetInstaller(running(l, lh), declared, to)
	if inst.Schematic != lh || CheckInstallerChange(running(l, lh), inst) != nil {
		t.Fatalf("longhorn class: %v", inst)
	}
	// A Longhorn node declared as default would lose its extensions.
	if re := CheckInstallerChange(running(l, lh), Installer{Registry: FactoryRegistry, Platform: "nocloud", Schematic: def, Tag: "v1.13.9"}); re == nil || re.Rule != "R14" {
		t.Fatalf("schematic change not refused: %v", re)
	}
	// The generic installer on a nocloud node.
	g := cluster.Node{Name: "w3", Platform: "metal"}
	inst, _ = TargetInstaller(running(g, def), declared, to)
	if !strings.HasPrefix(inst.Ref(), "factory.talos.dev/installer/") {
		t.Fatalf("metal platform: %s", inst.Ref())
	}
	if re := CheckInstallerChange(running(g, def), inst); re == nil || !strings.Contains(re.Reason, "generic installer") {
		t.Fatalf("platform change not refused: %v", re)
	}
	if _, err := TargetInstaller(running(w, def), map[string]string{}, to); err == nil {
		t.Fatal("no declared schematic accepted")
	}
	p, err := ParseInstaller("factory.talos.dev/installer/" + def + ":v1.12.6")
	if err != nil || p.Platform != "metal" || p.Schematic != def || p.Tag != "v1.12.6" {
		t.Fatalf("parse generic: %+v %v", p, err)
	}
}

func TestUpgradeOrderLeaderLast(t *testing.T) {
	inv := cluster.Inventory{Nodes: []cluster.Node{
		{Name: "cp-1", Role: cluster.RoleControlPlane}, {Name: "cp-2", Role: cluster.RoleControlPlane}, {Name: "cp-3", Role: cluster.RoleControlPlane},
		{Name: "w-1", Role: cluster.RoleWorker}, {Name: "w-2", Role: cluster.RoleWorker},
	}}
	got := cluster.Names(UpgradeOrder(inv, "cp-1"))
	if want := []string{"w-1", "w-2", "cp-2", "cp-3", "cp-1"}; !slices.Equal(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
}

func TestDriftNote(t *testing.T) {
	to := rel(t, "v1.13.9")
	lines := DriftNote("prod", map[string]string{DeclaredVersion: "v1.12.6"}, map[string]string{"a": "v1.13.9", "b": "v1.13.9"}, to, "abc")
	if !strings.Contains(lines[0], `talos_version = "v1.13.9"`) || !strings.Contains(strings.Join(lines, " "), "image/abc/v1.13.9/nocloud-amd64.iso") {
		t.Fatalf("drift note: %v", lines)
	}
	lines = DriftNote("prod", map[string]string{DeclaredVersion: "v1.12.6"}, map[string]string{"a": "v1.13.9", "b": "v1.12.6"}, to, "abc")
	if !strings.Contains(lines[0], "keep talos_version at v1.12.6") || !strings.Contains(lines[0], "b (v1.12.6)") {
		t.Fatalf("partial roll note: %v", lines)
	}
}
