package sim_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"

	"github.com/talosbot/talosbot/sim"
)

// factoryImage is an Image Factory installer of the sim's default schematic.
func factoryImage(version string) string {
	return "factory.talos.dev/nocloud-installer/" + sim.DefaultSchematic + ":" + version
}

// readBoot reads a node's version and boot id in one go ("" while it does not answer).
func readBoot(ctx context.Context, cli *client.Client, ip string) (string, string) {
	v, err := version(ctx, cli, ip)
	if err != nil {
		return "", ""
	}

	r, err := cli.Read(client.WithNode(ctx, ip), "/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "", ""
	}
	defer r.Close() //nolint:errcheck

	var b strings.Builder

	buf := make([]byte, 64)
	for {
		k, err := r.Read(buf)
		b.Write(buf[:k])

		if err != nil {
			break
		}
	}

	return v, strings.TrimSpace(b.String())
}

// TestABFallbackSequence: with bootFailure the new version boots (a second boot id), its boot
// sequence fails and says so in the events, machined counts down and reboots into the old
// version (a third boot id), which ends running and ready; the booted entry is the old one.
func TestABFallbackSequence(t *testing.T) {
	t.Parallel()
	slow(t)
	c, cli := startSim(t, sim.Options{ControlPlanes: 1, Workers: 1, RebootDelay: 100 * time.Millisecond})
	ctx := t.Context()
	ip := nodeIP(t, c, "worker-1")

	if err := c.Inject(ctx, "worker-1", sim.Fault{BootFailure: true}); err != nil {
		t.Fatal(err)
	}

	first := bootID(ctx, t, cli, ip)

	if _, err := cli.Upgrade(client.WithNode(ctx, ip), upgradeImage, false, false); err != nil {
		t.Fatal(err)
	}

	// The failed boot: the new version answers with a new boot id.
	var failed string

	eventually(t, 20*time.Second, "worker-1 boots v1.13.9", func() error {
		v, id := readBoot(ctx, cli, ip)
		if v != "v1.13.9" || id == "" || id == first {
			return fmt.Errorf("version %q boot %q", v, id)
		}

		failed = id

		return nil
	})

	// Its events say the boot sequence failed (the countdown leaves 10 s to read them).
	stream, err := cli.Events(client.WithNode(ctx, ip), client.WithTailEvents(-1))
	if err != nil {
		t.Fatal(err)
	}

	sawFailure := false

	for !sawFailure {
		e, err := stream.Recv()
		if err != nil {
			t.Fatalf("no failed boot sequence in the failed boot's events: %v", err)
		}

		ev, err := client.UnmarshalEvent(e)
		if err != nil {
			continue
		}

		if s, ok := ev.Payload.(*machineapi.SequenceEvent); ok && s.Sequence == "boot" && s.Error != nil && strings.Contains(s.Error.Message, "does not boot") {
			sawFailure = true
		}
	}

	_ = stream.CloseSend()

	// The fallback: the old version with a third boot id, running and ready.
	eventually(t, 30*time.Second, "worker-1 back on v1.12.6", func() error {
		v, id := readBoot(ctx, cli, ip)
		if v != sim.DefaultTalosVersion || id == "" || id == first || id == failed {
			return fmt.Errorf("version %q boot %q", v, id)
		}

		ms, err := safe.StateGetByID[*runtime.MachineStatus](client.WithNode(ctx, ip), cli.COSI, runtime.MachineStatusID)
		if err != nil {
			return err
		}

		if ms.TypedSpec().Stage != runtime.MachineStageRunning || !ms.TypedSpec().Status.Ready {
			return errors.New("not running and ready yet")
		}

		return nil
	})

	be, err := safe.StateGetByID[*runtime.BootedEntry](client.WithNode(ctx, ip), cli.COSI, runtime.BootedEntryID)
	if err != nil || be.TypedSpec().BootedEntry != "Talos-"+sim.DefaultTalosVersion+".efi" {
		t.Fatalf("booted entry after the fallback: %v %v", be, err)
	}
}

// TestNoRebootKeepsBootID: with noReboot a reboot request is acknowledged and its sequence ends,
// but the node keeps its boot id.
func TestNoRebootKeepsBootID(t *testing.T) {
	t.Parallel()
	c, cli := startSim(t, sim.Options{ControlPlanes: 1, Workers: 1, RebootDelay: 100 * time.Millisecond})
	ctx := t.Context()
	ip := nodeIP(t, c, "worker-1")

	if err := c.Inject(ctx, "worker-1", sim.Fault{NoReboot: true}); err != nil {
		t.Fatal(err)
	}

	before := bootID(ctx, t, cli, ip)

	if err := cli.Reboot(client.WithNode(ctx, ip)); err != nil {
		t.Fatal(err)
	}

	stream, err := cli.Events(client.WithNode(ctx, ip), client.WithTailEvents(-1))
	if err != nil {
		t.Fatal(err)
	}

	for {
		e, err := stream.Recv()
		if err != nil {
			t.Fatalf("no end of the reboot sequence: %v", err)
		}

		ev, err := client.UnmarshalEvent(e)
		if err != nil {
			continue
		}

		if s, ok := ev.Payload.(*machineapi.SequenceEvent); ok && s.Sequence == "reboot" && s.Action == machineapi.SequenceEvent_STOP {
			break
		}
	}

	if after := bootID(ctx, t, cli, ip); after != before {
		t.Fatalf("boot id changed under noReboot: %s → %s", before, after)
	}
}

// TestLandingResources: a node publishes its schematic (ExtensionStatus "schematic"), its kernel
// command line and its booted entry; an upgrade lands the installer's, and the faults
// landSchematic and kernelArgsNotApplied land something else.
func TestLandingResources(t *testing.T) {
	t.Parallel()
	slow(t)
	c, cli := startSim(t, sim.Options{ControlPlanes: 1, Workers: 2, RebootDelay: 100 * time.Millisecond})
	ctx := t.Context()

	landed := func(ip string) (schematic, cmdline, entry string) {
		t.Helper()

		nctx := client.WithNode(ctx, ip)

		exts, err := safe.StateListAll[*runtime.ExtensionStatus](nctx, cli.COSI)
		if err != nil {
			t.Fatal(err)
		}

		for e := range exts.All() {
			if e.TypedSpec().Metadata.Name == "schematic" {
				schematic = e.TypedSpec().Metadata.Version
			}
		}

		cl, err := safe.StateGetByID[*runtime.KernelCmdline](nctx, cli.COSI, runtime.KernelCmdlineID)
		if err != nil {
			t.Fatal(err)
		}

		be, err := safe.StateGetByID[*runtime.BootedEntry](nctx, cli.COSI, runtime.BootedEntryID)
		if err != nil {
			t.Fatal(err)
		}

		return schematic, cl.TypedSpec().Cmdline, be.TypedSpec().BootedEntry
	}

	// Both workers declare an extra kernel argument (machine.install.extraKernelArgs).
	for _, w := range []string{"worker-1", "worker-2"} {
		ip := nodeIP(t, c, w)
		mc, err := safe.StateGetByID[*config.MachineConfig](client.WithNode(ctx, ip), cli.COSI, config.ActiveID)
		if err != nil {
			t.Fatal(err)
		}

		raw, err := mc.Provider().EncodeBytes()
		if err != nil {
			t.Fatal(err)
		}

		cfg, err := configloader.NewFromBytes(raw)
		if err != nil {
			t.Fatal(err)
		}

		out, err := cfg.PatchV1Alpha1(func(c *v1alpha1.Config) error {
			c.MachineConfig.MachineInstall.InstallExtraKernelArgs = []string{"net.ifnames=0"}

			return nil
		})
		if err != nil {
			t.Fatal(err)
		}

		patched, err := out.EncodeBytes()
		if err != nil {
			t.Fatal(err)
		}

		if _, err := cli.ApplyConfiguration(client.WithNode(ctx, ip), &machineapi.ApplyConfigurationRequest{Data: patched, Mode: machineapi.ApplyConfigurationRequest_NO_REBOOT}); err != nil {
			t.Fatal(err)
		}
	}

	w1, w2 := nodeIP(t, c, "worker-1"), nodeIP(t, c, "worker-2")

	s, cl, e := landed(w1)
	if s != sim.DefaultSchematic || !strings.Contains(cl, "init_on_alloc=1") || strings.Contains(cl, "net.ifnames=0") || e != "Talos-"+sim.DefaultTalosVersion+".efi" {
		t.Fatalf("before: schematic %q cmdline %q entry %q (the extra argument lands at the next install, not at apply)", s, cl, e)
	}

	other := strings.Repeat("ab", 32)
	if err := c.Inject(ctx, "worker-2", sim.Fault{LandSchematic: other, KernelArgsNotApplied: true}); err != nil {
		t.Fatal(err)
	}

	if err := c.Inject(ctx, "worker-2", sim.Fault{LandSchematic: "nope"}); err == nil || !strings.Contains(err.Error(), "not a schematic id") {
		t.Fatalf("a bad landSchematic: %v", err)
	}

	for _, ip := range []string{w1, w2} {
		before := bootID(ctx, t, cli, ip)

		if _, err := cli.Upgrade(client.WithNode(ctx, ip), factoryImage("v1.13.9"), false, false); err != nil {
			t.Fatal(err)
		}

		eventually(t, 30*time.Second, ip+" on v1.13.9", func() error {
			v, id := readBoot(ctx, cli, ip)
			if v != "v1.13.9" || id == before || id == "" {
				return fmt.Errorf("version %q boot %q", v, id)
			}

			return nil
		})
	}

	s, cl, e = landed(w1)
	if s != sim.DefaultSchematic || !strings.Contains(cl, "net.ifnames=0") || e != "Talos-v1.13.9.efi" {
		t.Fatalf("worker-1: schematic %q cmdline %q entry %q", s, cl, e)
	}

	s, cl, e = landed(w2)
	if s != other || strings.Contains(cl, "net.ifnames=0") || e != "Talos-v1.13.9.efi" {
		t.Fatalf("worker-2 (faults): schematic %q cmdline %q entry %q", s, cl, e)
	}
}

// TestUnmetConditionsHoldReadiness: a node that booted with unmetConditions set publishes
// RUNNING but not ready, naming the conditions as Talos's MachineStatusController does;
// clearing the fault publishes ready.
func TestUnmetConditionsHoldReadiness(t *testing.T) {
	t.Parallel()
	slow(t)
	c, cli := startSim(t, sim.Options{ControlPlanes: 1, Workers: 1, RebootDelay: 100 * time.Millisecond})
	ctx := t.Context()
	ip := nodeIP(t, c, "cp-1")

	if err := c.Inject(ctx, "cp-1", sim.Fault{UnmetConditions: "boot"}); err == nil || !strings.Contains(err.Error(), "time, network, services, staticPods, nodeReady") {
		t.Fatalf("an unknown condition: %v", err)
	}

	if err := c.Inject(ctx, "cp-1", sim.Fault{UnmetConditions: "time,services,staticPods"}); err != nil {
		t.Fatal(err)
	}

	if err := cli.Reboot(client.WithNode(ctx, ip)); err != nil {
		t.Fatal(err)
	}

	var unmet []string

	eventually(t, 30*time.Second, "cp-1 running, not ready", func() error {
		ms, err := safe.StateGetByID[*runtime.MachineStatus](client.WithNode(ctx, ip), cli.COSI, runtime.MachineStatusID)
		if err != nil {
			return err
		}

		if ms.TypedSpec().Stage != runtime.MachineStageRunning {
			return fmt.Errorf("stage %s", ms.TypedSpec().Stage)
		}

		if ms.TypedSpec().Status.Ready {
			t.Fatal("ready with unmet conditions")
		}

		unmet = nil
		for _, u := range ms.TypedSpec().Status.UnmetConditions {
			unmet = append(unmet, u.Name+": "+u.Reason)
		}

		return nil
	})

	// Without Options.Kube the Node's readiness follows the kubelet's health (docs/SIMULATOR.md).
	want := []string{"time: time is not synced", "services: kubelet not healthy", "staticPods: kube-system/kube-scheduler-cp-1 pending",
		`nodeReady: node "cp-1" is not ready`}
	if strings.Join(unmet, "; ") != strings.Join(want, "; ") {
		t.Fatalf("unmet conditions %q, want %q", unmet, want)
	}

	stream, err := cli.Events(client.WithNode(ctx, ip), client.WithTailEvents(-1))
	if err != nil {
		t.Fatal(err)
	}

	cleared := false

	for {
		e, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}

		ev, err := client.UnmarshalEvent(e)
		if err != nil {
			continue
		}

		ms, ok := ev.Payload.(*machineapi.MachineStatusEvent)
		if !ok || ms.Stage != machineapi.MachineStatusEvent_RUNNING {
			continue
		}

		if ms.Status.Ready {
			if !cleared {
				t.Fatal("a RUNNING ready event before the fault was cleared")
			}

			break
		}

		if len(ms.Status.UnmetConditions) != len(want) {
			t.Fatalf("unmet conditions in the event: %v", ms.Status.UnmetConditions)
		}

		if !cleared {
			cleared = true

			if err := c.Clear(ctx, "cp-1"); err != nil {
				t.Fatal(err)
			}
		}
	}
}
