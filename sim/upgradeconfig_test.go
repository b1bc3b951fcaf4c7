package sim_test

import (
	"context"
	"strings"
	"testing"
	"time"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	talosconfig "github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
	"github.com/siderolabs/talos/pkg/machinery/config/types/meta"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"

	"github.com/talosbot/talosbot/sim"
)

// TestUpgradeKeepsMachineConfig: an upgrade reboot keeps the machine config the node
// had, patches included, as Talos does (the installer gets the running config and the
// persisted config is not rewritten; docs/SIMULATOR.md): the kubelet's extraArgs applied
// before the upgrade are still there after it, and machine.install.image is still the one
// the config names, not the image the upgrade ran.
func TestUpgradeKeepsMachineConfig(t *testing.T) {
	t.Parallel()
	c, cli := startSim(t, sim.Options{ControlPlanes: 1, Workers: 1, TalosVersion: "v1.12.6", RebootDelay: 100 * time.Millisecond})
	ctx := t.Context()
	w1 := nodeIP(t, c, "worker-1")
	nctx := client.WithNode(ctx, w1)

	before := mustLoad(t, machineConfig(ctx, t, cli, w1)).Machine().Install().Image()
	applyPatch(ctx, t, cli, w1, func(c *v1alpha1.Config) {
		c.MachineConfig.MachineKubelet.KubeletExtraArgs = meta.Args{"max-pods": meta.NewArgValue("250", nil)}
	})

	image := strings.TrimSuffix(before, ":v1.12.6") + ":v1.13.9"
	if image == before+":v1.13.9" {
		t.Fatalf("install image %q has no v1.12.6 tag", before)
	}

	if _, err := cli.Upgrade(nctx, image, false, false); err != nil {
		t.Fatal(err)
	}

	waitVersion(ctx, t, cli, w1, "v1.13.9")

	after := mustLoad(t, machineConfig(ctx, t, cli, w1))

	if got := after.K8sKubeletConfig().ExtraArgs()["max-pods"]; len(got) != 1 || got[0] != "250" {
		t.Errorf("after the upgrade the kubelet's extraArgs are %v, want max-pods=250 kept", after.K8sKubeletConfig().ExtraArgs())
	}

	if got := after.Machine().Install().Image(); got != before {
		t.Errorf("after the upgrade machine.install.image is %q, want %q (an upgrade does not rewrite the config)", got, before)
	}
}

// applyPatch applies the node's machine config, patched, without a reboot.
func applyPatch(ctx context.Context, t *testing.T, cli *client.Client, ip string, patch func(*v1alpha1.Config)) {
	t.Helper()

	patched, err := mustLoad(t, machineConfig(ctx, t, cli, ip)).PatchV1Alpha1(func(c *v1alpha1.Config) error {
		patch(c)

		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	data, err := patched.EncodeBytes(encoder.WithComments(encoder.CommentsDisabled))
	if err != nil {
		t.Fatal(err)
	}

	if _, err := cli.ApplyConfiguration(client.WithNode(ctx, ip), &machineapi.ApplyConfigurationRequest{Data: data, Mode: machineapi.ApplyConfigurationRequest_NO_REBOOT}); err != nil {
		t.Fatal(err)
	}
}

func mustLoad(t *testing.T, data []byte) talosconfig.Provider {
	t.Helper()

	cfg, err := configloader.NewFromBytes(data)
	if err != nil {
		t.Fatal(err)
	}

	return cfg
}
