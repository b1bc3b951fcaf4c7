package talosupgrade

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/talosbot/talosbot/plugins/cluster"
	"github.com/talosbot/talosbot/plugins/cluster/talos"
	"github.com/talosbot/talosbot/plugins/sdk"
	"github.com/talosbot/talosbot/plugins/sdk/sdktest"
	"github.com/talosbot/talosbot/sim"
)

// simClock is the sim's clock (sim.Options.Now): real time plus an offset the test moves.
type simClock struct {
	mu     sync.Mutex
	offset time.Duration
}

func (c *simClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()

	return time.Now().Add(c.offset)
}

func (c *simClock) Add(d time.Duration) {
	c.mu.Lock()
	c.offset += d
	c.mu.Unlock()
}

func logText(rec *sdktest.Recorder) string {
	var b strings.Builder
	for _, l := range rec.Logs() {
		b.WriteString(l.StepID + " " + l.Message + "\n")
	}
	return b.String()
}

// TestInstallerRemovedByImageGCIsPulledAgain: the roll pulls the installer on
// every node before the first cordon; when it reaches a later node more than
// an hour later (on the sim's clock), Talos's image GC has removed it and
// LifecycleService.Upgrade says "not found in containerd store". The plugin
// pulls it again and installs: the roll finishes. Without that, worker-2's
// upgrade fails.
func TestInstallerRemovedByImageGCIsPulledAgain(t *testing.T) {
	t.Parallel()
	slow(t)
	// The sim's clock starts 80 minutes behind and catches up once worker-1
	// is done: every installer the roll pre-pulled is then past Talos's GC
	// grace period (the certificates the nodes issue stay valid).
	clock := &simClock{offset: -80 * time.Minute}
	e := start(t, 1, 2, true, func(o *sim.Options) { o.TalosVersion = "v1.13.2"; o.Now = clock.Now })
	ctx := ctxFor(t, 3*time.Minute)

	var once sync.Once
	rec := runWatched(ctx, &Plugin{}, e.request(t, target), func(ev *sdk.StepEvent) {
		if ev.StepID == "node/worker-1/upgrade" && ev.Status == sdk.StepOK {
			once.Do(func() { clock.Add(80 * time.Minute) })
		}
	})
	if res := rec.FinalResult(); !res.OK {
		t.Fatalf("roll failed: %v\n%s\n%s", res, dump(rec.Steps()), logText(rec))
	}
	for _, n := range []string{"worker-1", "worker-2", "cp-1"} {
		if v := e.c.NodeVersion(n); v != target {
			t.Fatalf("%s runs %s", n, v)
		}
	}
	// worker-1 installed within the hour: one pull; the later nodes pulled again.
	if got := e.c.Calls("worker-1", "/machine.ImageService/Pull"); got != 1 {
		t.Fatalf("worker-1 pulled %d times, want 1", got)
	}
	for _, n := range []string{"worker-2", "cp-1"} {
		if got := e.c.Calls(n, "/machine.ImageService/Pull"); got != 2 {
			t.Fatalf("%s pulled %d times, want 2 (the pre-pull, and again after the GC)", n, got)
		}
	}
	if logs := logText(rec); !strings.Contains(logs, "worker-2: the installer pulled earlier is gone from containerd") {
		t.Fatalf("the roll did not say why it pulled again:\n%s", logs)
	}
}

// TestInstallerPullWithoutProgressStopsTheRoll: with worker-1's registry
// unreachable, Talos retries for 20 minutes and streams nothing. The plugin
// reports the wait while it lasts and gives up after the node timeout, with
// an error that says what to check; the roll stops before any node is
// cordoned, installed or rebooted.
func TestInstallerPullWithoutProgressStopsTheRoll(t *testing.T) {
	t.Parallel()
	slow(t)
	e := start(t, 1, 1, true, func(o *sim.Options) { o.TalosVersion = "v1.13.2" })
	ctx := ctxFor(t, 2*time.Minute)
	if err := e.c.Inject(ctx, "worker-1", sim.Fault{RegistryUnreachable: true}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.c.ClearAll(context.Background()) })
	req := e.request(t, target)
	req.Settings.NodeTimeoutMs = 2000

	rec, _ := sdktest.Run(ctx, &Plugin{}, req, nil)
	res := rec.FinalResult()
	if res.OK || !strings.Contains(res.Summary, "could not be pulled on worker-1") ||
		!strings.Contains(res.Error, "the pull made no progress for 2s") || !strings.Contains(res.Error, "check that the node reaches the registry") {
		t.Fatalf("want a stalled pull on worker-1, got %v", res)
	}
	if logs := logText(rec); !strings.Contains(logs, "node/worker-1/pull worker-1: still pulling "+e.installer(target)+": no progress for") {
		t.Fatalf("the wait was not reported while it lasted:\n%s", logs)
	}
	for _, n := range e.names() {
		if c := e.c.Calls(n, "/machine.LifecycleService/Upgrade") + e.c.Calls(n, "/machine.MachineService/Reboot"); c != 0 {
			t.Fatalf("%s was changed: %v", n, e.c.CallCounts()[n])
		}
	}
}

// TestLegacyUpgradeWithoutProgressFails: on the legacy path Talos pulls
// inside MachineService.Upgrade, so an unreachable registry holds the call;
// the plugin reports the wait and fails the node after the node timeout, the
// node unchanged.
func TestLegacyUpgradeWithoutProgressFails(t *testing.T) {
	t.Parallel()
	slow(t)
	e := start(t, 1, 1, false, nil)
	ctx := ctxFor(t, 2*time.Minute)
	if err := e.c.Inject(ctx, "worker-1", sim.Fault{RegistryUnreachable: true}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.c.ClearAll(context.Background()) })
	req := e.request(t, target)
	req.Settings.NodeTimeoutMs = 2000

	rec, _ := sdktest.Run(ctx, &Plugin{}, req, nil)
	res := rec.FinalResult()
	if res.OK || !strings.Contains(res.Error, "upgrade worker-1 (legacy Upgrade API): the pull made no progress for 2s") {
		t.Fatalf("want a stalled legacy upgrade of worker-1, got %v", res)
	}
	requireState(t, res, "worker-1 is unchanged: it runs "+from)
	if logs := logText(rec); !strings.Contains(logs, "worker-1: still waiting for Talos to pull and validate") {
		t.Fatalf("the wait was not reported while it lasted:\n%s", logs)
	}
	if e.c.NodeVersion("worker-1") != from || e.upgradeCalls("cp-1") != 0 {
		t.Fatalf("worker-1 runs %s, cp-1 got %d upgrade calls", e.c.NodeVersion("worker-1"), e.upgradeCalls("cp-1"))
	}
}

// TestInstallerExitCodeIsAFailure: an installer whose pre-flight refuses the
// host (Talos's compatibility table: v1.13.9 is too new to downgrade to
// v1.9.0) exits 1; StartUpgrade fails with the installer's last line, the
// node is not installed, cordoned or rebooted.
func TestInstallerExitCodeIsAFailure(t *testing.T) {
	t.Parallel()
	slow(t)
	e := start(t, 1, 1, true, func(o *sim.Options) { o.TalosVersion = "v1.13.9" })
	ctx := ctxFor(t, time.Minute)
	req := e.request(t, target)
	inv, err := cluster.InventoryFrom(&req.Cluster)
	if err != nil {
		t.Fatal(err)
	}
	s, err := cluster.Open(ctx, inv, &req.Credentials)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close() //nolint:errcheck
	n, _ := inv.Node("worker-1")
	image := "ghcr.io/siderolabs/installer:v1.9.0"

	p, err := talos.StartUpgrade(ctx, s, talos.NodeUpgrade{Node: n, KubeNode: e.info(t, "worker-1").NodeName, From: mustRelease(t, "v1.13.9"), To: mustRelease(t, "v1.9.0"), Image: image}, talos.UpgradeOptions{})
	want := `installer exited with code 1 (last message: "pre-flight checks failed: host version 1.13.9 is too new to downgrade to Talos 1.9.0")`
	if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "install "+image+" on worker-1") {
		t.Fatalf("want %q, got %v", want, err)
	}
	if p.Installed || p.Cordoned || p.Rebooting {
		t.Fatalf("progress after a refused install: %+v", p)
	}
	if e.c.Calls("worker-1", "/machine.MachineService/Reboot") != 0 || e.c.NodeVersion("worker-1") != "v1.13.9" {
		t.Fatalf("worker-1 rebooted or changed: %v", e.c.CallCounts()["worker-1"])
	}
}

func mustRelease(t *testing.T, s string) talos.Release {
	t.Helper()
	r, err := talos.ParseRelease(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// installer is the installer the plan derives for version on the sim's nodes.
func (e *env) installer(version string) string {
	return "factory.talos.dev/nocloud-installer/" + sim.DefaultSchematic + ":" + version
}
