package talosupgrade

import (
	"strings"
	"testing"
	"time"

	"github.com/talosbot/talosbot/internal/releases"
	"github.com/talosbot/talosbot/plugins/cluster/talos"
	"github.com/talosbot/talosbot/plugins/sdk"
	"github.com/talosbot/talosbot/plugins/sdk/sdktest"
	"github.com/talosbot/talosbot/sim"
)

// refusedEverywhere checks that Plan refuses, that Run refuses the same way
// (a re-plan at run time), and that no node was asked to upgrade.
func refusedEverywhere(t *testing.T, e *env, req *sdk.OperationRequest, rule, want string) {
	t.Helper()
	ctx := ctxFor(t, 2*time.Minute)
	p := &Plugin{}
	plan, err := p.Plan(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	requireRefusal(t, plan, rule, want)
	rec, _ := sdktest.Run(ctx, p, req, nil)
	res := rec.FinalResult()
	if res.OK || res.Refusal.Rule != rule {
		t.Fatalf("Run: want a %s refusal, got %v", rule, res)
	}
	for _, n := range e.names() {
		if c := e.upgradeCalls(n); c != 0 {
			t.Fatalf("%s got %d upgrade calls despite the refusal", n, c)
		}
	}
}

func TestRefusesSkippingAMinor(t *testing.T) {
	t.Parallel()
	e := start(t, 1, 1, false, nil)
	req := e.request(t, "v1.14.1")
	// Only a known release is a target: declare v1.14.1, and no release of
	// v1.13 (the minor between), so that no hop-by-hop path exists and the
	// skipped minor is what is refused. With a v1.13 patch known the same
	// request plans two hops (TestMultiHop*).
	req.Evidence.Releases = sdktest.Releases("v1.12.6", "v1.14.1")
	refusedEverywhere(t, e, req, "R10", "skips a minor")
	// No advice names a version the bot does not know: no "v1.13.x".
	r := plan(t, req).Refusal
	if text := r.Reason + " " + r.Fix; strings.Contains(text, ".x") || !strings.Contains(r.Fix, "declare its newest release under releases.talos") {
		t.Errorf("the refusal names a version the bot does not know, or no way to declare one: %v", r)
	}
}

func TestRefusesDowngrade(t *testing.T) {
	t.Parallel()
	e := start(t, 1, 1, false, nil)
	req := e.request(t, "v1.12.1")
	known := append(req.Evidence.Releases.Versions, "v1.12.1") // a known release, lower
	req.Evidence.Releases = sdktest.Releases(known...)
	refusedEverywhere(t, e, req, "R10", "downgrade")
}

func TestRefusesGenericInstallerOnNocloudNode(t *testing.T) {
	t.Parallel()
	e := start(t, 1, 1, false, nil)
	req := e.request(t, target)
	// The inventory lost worker-1's platform: the derived image would be the
	// generic installer, which can rename eth0 on a Proxmox VM.
	e.node(t, req, "worker-1").Platform = "metal"
	refusedEverywhere(t, e, req, "R14", "factory.talos.dev/installer/")
}

func TestRefusesSchematicClassChange(t *testing.T) {
	t.Parallel()
	e := start(t, 1, 2, false, nil)
	req := e.request(t, target)
	// worker-2 is declared a Longhorn worker, but it runs the default
	// schematic: upgrading it would swap its system extensions.
	e.node(t, req, "worker-2").InstallerClass = talos.ClassLonghorn
	req.Cluster.Declared[talos.DeclaredLonghornInstaller] = "factory.talos.dev/nocloud-installer/" + strings.Repeat("b", 64) + ":" + from
	refusedEverywhere(t, e, req, "R14", "schematic")
}

func TestRefusesWithoutDeclaredSchematic(t *testing.T) {
	t.Parallel()
	e := start(t, 1, 1, false, nil)
	req := e.request(t, target)
	delete(req.Cluster.Declared, talos.DeclaredSchematic)
	refusedEverywhere(t, e, req, "R13", "talos_image_factory_schematic_id")
}

func TestNonLatestPatchWarnsOrRefuses(t *testing.T) {
	t.Parallel()
	e := start(t, 1, 1, false, nil)
	ctx := ctxFor(t, time.Minute)
	req := e.request(t, "v1.13.2")
	plan, err := (&Plugin{}).Plan(ctx, req)
	if err != nil || plan.Refusal != nil {
		t.Fatalf("plan: %v %v", err, plan)
	}
	if len(plan.Warnings) == 0 || !strings.Contains(plan.Warnings[0], "v1.13.9 is known") {
		t.Fatalf("want a warning naming v1.13.9, got %v", plan.Warnings)
	}
	req.Config = []byte(`{"refuse_non_latest_patch": true}`) // plugins.talosupgrade
	plan, err = (&Plugin{}).Plan(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	requireRefusal(t, plan, "R10", "upgrade to v1.13.9 instead")
}

func TestFailingBeforeGateRefuses(t *testing.T) {
	t.Parallel()
	slow(t)
	e := start(t, 3, 1, false, nil)
	ctx := ctxFor(t, 2*time.Minute)
	if err := e.c.Inject(ctx, "cp-2", sim.Fault{UnhealthyService: "kubelet"}); err != nil {
		t.Fatal(err)
	}
	req := e.request(t, target)
	rec, _ := sdktest.Run(ctx, &Plugin{}, req, nil)
	res := rec.FinalResult()
	if res.OK || res.Refusal.Rule != "R1" || !strings.Contains(res.Refusal.Reason, "cp-2: kubelet unhealthy") {
		t.Fatalf("want an R1 refusal naming cp-2's kubelet, got %v", res)
	}
	for _, n := range e.names() {
		if c := e.upgradeCalls(n); c != 0 {
			t.Fatalf("%s got %d upgrade calls after a failed gate", n, c)
		}
	}
	var failed bool
	for _, s := range rec.Steps() {
		failed = failed || (s.StepID == "gate-before/controlplane-services" && s.Status == sdk.StepFailed)
	}
	if !failed {
		t.Fatal("the failing probe was not reported as a failed gate-before step")
	}
}

func TestUnknownNodeInSelectionRefused(t *testing.T) {
	t.Parallel()
	e := start(t, 1, 1, false, nil)
	req := e.request(t, target)
	req.Args["nodes"] = "worker-1,worker-9"
	refusedEverywhere(t, e, req, "R15", "worker-9")
}

// TestRefusesWithoutSnapshotDir is R12's precondition: with nowhere off the
// cluster to keep the snapshot, the upgrade is refused before anything runs.
func TestRefusesWithoutSnapshotDir(t *testing.T) {
	t.Parallel()
	e := start(t, 1, 1, false, nil)
	req := e.request(t, target)
	req.Evidence.Backups.Dir = ""
	refusedEverywhere(t, e, req, "R12", "snapshot_dir")
}

// TestListedOnlyRefusesAnUnlistedTarget: with releases.listed_only (the
// bot's release data says so), a target outside releases.talos is refused
// (R10) naming the fix, and a listed one is planned.
func TestListedOnlyRefusesAnUnlistedTarget(t *testing.T) {
	t.Parallel()
	e := start(t, 1, 1, false, nil)
	req := e.request(t, target)
	req.Evidence.Releases = &sdk.Releases{Versions: []string{"v1.12.6", "v1.13.2", "v1.13.9"}, Targets: []string{"v1.12.6", "v1.13.2"},
		ListedOnly: true, Origin: "Image Factory (test)"}
	refusedEverywhere(t, e, req, "R10", "add v1.13.9 to releases.talos once it is reviewed")

	req.Args["version"] = "v1.13.2"
	plan, err := (&Plugin{}).Plan(ctxFor(t, time.Minute), req)
	if err != nil || plan.Refusal != nil || plan.Target != "v1.13.2" {
		t.Fatalf("a listed target: %v %v", err, plan)
	}
}

// TestRefusesATargetThatIsNotARelease: only a known release is a target
// (releases.CheckTarget). v1.13.99, which the factory does not list, is
// refused before any node is touched, naming the newest v1.13 patch and
// how to declare a release; v9.9.9 names the newest known release and no
// invented version (no "newest v1.14.x patch", no "v9.9"). A release
// declared in releases.talos that the factory does not list is planned.
func TestRefusesATargetThatIsNotARelease(t *testing.T) {
	t.Parallel()
	e := start(t, 1, 1, false, nil)
	// The bot's release data: the factory's list and releases.talos.
	l := &releases.List{Versions: releases.ParseAll([]string{"v1.12.0", "v1.12.6", "v1.13.0", "v1.13.2", "v1.13.9"}),
		Configured: releases.ParseAll([]string{"v1.13.10"}), Origin: releases.OriginFactory}
	req := e.request(t, "v1.13.99")
	req.Evidence.Releases = releases.NotesOf(l, nil, time.Now())
	refusedEverywhere(t, e, req, "R10", "v1.13.99 is not a Talos release the bot knows")
	requireRefusal(t, plan(t, req), "R10", "the newest v1.13 patch is v1.13.10 (declare a release under releases.talos")

	req.Args["version"] = "v9.9.9"
	refusedEverywhere(t, e, req, "R10", "the newest known Talos release is v1.13.10")
	p := plan(t, req)
	if text := strings.ReplaceAll(p.Refusal.Reason+" "+p.Refusal.Fix, "v9.9.9", ""); strings.Contains(text, "v9.9") || strings.Contains(text, ".x") {
		t.Errorf("v9.9.9: the refusal names a version the bot does not know: %v", p.Refusal)
	}

	req.Args["version"] = "v1.13.10" // declared, not listed by the factory
	if p := plan(t, req); p.Refusal != nil || p.Target != "v1.13.10" {
		t.Fatalf("a declared release: %v", p)
	}
}

// TestRefusesAKubernetesReleaseAsTarget: a Kubernetes release given to the
// Talos upgrade is refused R11, naming the Kubernetes upgrade as its own
// operation (releases.CheckKind through Notes.Allowed), before the cluster
// is read: no node gets an upgrade call.
func TestRefusesAKubernetesReleaseAsTarget(t *testing.T) {
	t.Parallel()
	e := start(t, 1, 1, false, nil)
	req := e.request(t, "v1.36.3")
	l := &releases.List{Versions: releases.ParseAll([]string{"v1.12.6", "v1.13.9"})}
	req.Evidence.Releases = releases.NotesOf(l, []string{"1.35.2", "1.36.3"}, time.Now())
	refusedEverywhere(t, e, req, "R11", "run /talos upgrade k8s 1.36.3 as its own operation")
}

// TestRefusesEveryTargetWithoutAKnownRelease: with no release data (the
// factory unreachable, nothing cached) and releases.talos empty, every
// target is refused, even a real release.
func TestRefusesEveryTargetWithoutAKnownRelease(t *testing.T) {
	t.Parallel()
	e := start(t, 1, 1, false, nil)
	req := e.request(t, target)
	req.Evidence.Releases = nil
	refusedEverywhere(t, e, req, "R10", "no Talos release is known")
}

func plan(t *testing.T, req *sdk.OperationRequest) *sdk.OperationPlan {
	t.Helper()
	p, err := (&Plugin{}).Plan(ctxFor(t, time.Minute), req)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestRefusesATalosconfigWithoutAdmin: with an os:operator talosconfig (it may reboot but not
// upgrade, read the boot id or fetch a kubeconfig) the upgrade is refused at Plan and at Run,
// naming the role, and no node is asked to upgrade; the sim would refuse those calls with
// PermissionDenied part way through.
func TestRefusesATalosconfigWithoutAdmin(t *testing.T) {
	t.Parallel()
	e := start(t, 1, 1, false, nil)
	req := e.request(t, target)
	tc, err := e.c.TalosconfigWithRole("os:operator")
	if err != nil {
		t.Fatal(err)
	}
	req.Credentials.Talosconfig = tc
	refusedEverywhere(t, e, req, "R23", "role os:operator")
}
