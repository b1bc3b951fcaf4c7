package talosupgrade

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"

	"github.com/talosbot/talosbot/plugins/sdk"
	"github.com/talosbot/talosbot/plugins/sdk/sdktest"
	"github.com/talosbot/talosbot/sim"
)

// declareKernelArgs gives node's machine config machine.install.extraKernelArgs, as a user's
// patch would.
func (e *env) declareKernelArgs(t *testing.T, node string, args ...string) {
	t.Helper()
	ctx := ctxFor(t, time.Minute)
	cfg, err := clientconfig.FromBytes(e.c.Talosconfig())
	if err != nil {
		t.Fatal(err)
	}
	cli, err := client.New(ctx, client.WithConfig(cfg))
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close() //nolint:errcheck
	var ip string
	for _, n := range e.c.Nodes() {
		if n.Name == node {
			ip = n.IP
		}
	}
	nctx := client.WithNode(ctx, ip)
	mc, err := safe.StateGetByID[*config.MachineConfig](nctx, cli.COSI, config.ActiveID)
	if err != nil {
		t.Fatal(err)
	}
	patched, err := mc.Provider().PatchV1Alpha1(func(c *v1alpha1.Config) error {
		c.MachineConfig.MachineInstall.InstallExtraKernelArgs = args
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := patched.EncodeBytes()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.ApplyConfiguration(nctx, &machineapi.ApplyConfigurationRequest{Data: raw, Mode: machineapi.ApplyConfigurationRequest_NO_REBOOT}); err != nil {
		t.Fatal(err)
	}
}

// requireStopped checks that the roll failed with want in its error and state, and that no
// node after worker-1 was touched.
func (e *env) requireStopped(t *testing.T, res *sdk.Result, wantErr, wantState string) {
	t.Helper()
	if res.OK || !strings.Contains(res.Error, wantErr) {
		t.Fatalf("want a failure saying %q, got %v", wantErr, res)
	}
	requireState(t, res, wantState)
	if e.upgradeCalls("worker-2") != 0 || e.upgradeCalls("cp-1") != 0 {
		t.Fatal("the roll went on after worker-1")
	}
}

// TestLandingSchematicMismatch: worker-1 comes back on the target, running and ready, but
// with another schematic than its installer's. The roll stops naming both ids.
func TestLandingSchematicMismatch(t *testing.T) {
	t.Parallel()
	e := start(t, 1, 2, false, nil)
	ctx := ctxFor(t, 2*time.Minute)
	other := strings.Repeat("ab", 32)
	if err := e.c.Inject(ctx, "worker-1", sim.Fault{LandSchematic: other}); err != nil {
		t.Fatal(err)
	}
	rec, _ := sdktest.Run(ctx, &Plugin{}, e.request(t, target), nil)
	e.requireStopped(t, rec.FinalResult(),
		"worker-1 came back on "+target+" but did not land as planned: schematic "+other+", not the installer's "+sim.DefaultSchematic,
		"worker-1 runs "+target+" but not as planned: schematic "+other)
}

// TestLandingKernelArgsDropped: worker-1 and worker-2 declare an extra kernel argument in
// their machine config. worker-1 lands it, so the check lets the roll go on; worker-2 boots the
// target without it (as LifecycleService.Upgrade does, siderolabs/talos#13967) and the roll
// stops there.
func TestLandingKernelArgsDropped(t *testing.T) {
	t.Parallel()
	e := start(t, 1, 2, false, nil)
	ctx := ctxFor(t, 2*time.Minute)
	e.declareKernelArgs(t, "worker-1", "net.ifnames=0")
	e.declareKernelArgs(t, "worker-2", "net.ifnames=0")
	if err := e.c.Inject(ctx, "worker-2", sim.Fault{KernelArgsNotApplied: true}); err != nil {
		t.Fatal(err)
	}
	rec, _ := sdktest.Run(ctx, &Plugin{}, e.request(t, target), nil)
	res := rec.FinalResult()
	want := "worker-2 came back on " + target + " but did not land as planned: kernel arguments net.ifnames=0 declared in machine.install.extraKernelArgs are not on the kernel command line"
	if res.OK || !strings.Contains(res.Error, want) {
		t.Fatalf("want a failure saying %q, got %v", want, res)
	}
	requireState(t, res, "worker-2 runs "+target+" but not as planned")
	if e.c.NodeVersion("worker-1") != target || e.upgradeCalls("cp-1") != 0 {
		t.Fatalf("worker-1 at %s, cp-1 %d upgrade calls", e.c.NodeVersion("worker-1"), e.upgradeCalls("cp-1"))
	}
}

// TestLandingNeverRebooted: worker-1 accepts the upgrade and the reboot but never reboots. At
// the node timeout the roll says it never rebooted (its boot id is unchanged), not that it
// did not come back.
func TestLandingNeverRebooted(t *testing.T) {
	t.Parallel()
	slow(t)
	e := start(t, 1, 2, false, nil)
	ctx := ctxFor(t, 2*time.Minute)
	if err := e.c.Inject(ctx, "worker-1", sim.Fault{NoReboot: true}); err != nil {
		t.Fatal(err)
	}
	req := e.request(t, target)
	req.Settings.NodeTimeoutMs = 3000
	rec, _ := sdktest.Run(ctx, &Plugin{}, req, nil)
	res := rec.FinalResult()
	e.requireStopped(t, res, "worker-1 never rebooted: its boot id is unchanged after the node timeout 3s",
		"worker-1 accepted the reboot but never rebooted (its boot id is unchanged): it still runs "+from+" and boots "+target+" at its next reboot")
	if strings.Contains(res.Error, "did not come back") {
		t.Fatalf("a node that never rebooted reported as not back: %v", res)
	}
}

// TestLandingBootedNotReady: worker-1 reboots into the target but its kubelet is unhealthy
// and a static pod pending, so Talos never reports it ready. The roll says it booted and
// which conditions are unmet, not that it did not come back.
func TestLandingBootedNotReady(t *testing.T) {
	t.Parallel()
	slow(t)
	e := start(t, 1, 2, false, nil)
	ctx := ctxFor(t, 2*time.Minute)
	t.Cleanup(func() { _ = e.c.ClearAll(context.Background()) })
	req := e.request(t, target)
	req.Settings.NodeTimeoutMs = 3000
	injected := false
	rec := runWatched(ctx, &Plugin{}, req, func(ev *sdk.StepEvent) {
		// Set as worker-1's upgrade starts (before, the gate would refuse an unhealthy kubelet).
		if !injected && ev.Node == "worker-1" && strings.HasSuffix(ev.StepID, "/upgrade") && ev.Status == sdk.StepRunning {
			injected = true
			if err := e.c.Inject(ctx, "worker-1", sim.Fault{UnmetConditions: "services,staticPods"}); err != nil {
				t.Error(err)
			}
		}
	})
	res := rec.FinalResult()
	e.requireStopped(t, res, "worker-1 booted "+target+" but is not ready: kubelet, static pods",
		"worker-1 booted "+target+" but is not ready: kubelet, static pods")
	if strings.Contains(res.Error, "did not come back") {
		t.Fatalf("a node that booted reported as not back: %v", res)
	}
}
