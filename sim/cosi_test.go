package sim_test

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/talosbot/talosbot/sim"
)

// machineConfig reads a node's active MachineConfig resource, as a Talos v1.12+ client must.
func machineConfig(ctx context.Context, t *testing.T, cli *client.Client, ip string) []byte {
	t.Helper()

	mc, err := safe.StateGetByID[*config.MachineConfig](client.WithNode(ctx, ip), cli.COSI, config.ActiveID)
	if err != nil {
		t.Fatalf("get MachineConfig of %s: %v", ip, err)
	}

	b, err := mc.Provider().Bytes()
	if err != nil {
		t.Fatalf("MachineConfig bytes: %v", err)
	}

	return b
}

func TestMachineConfigResourceReplacesStateFile(t *testing.T) {
	c, cli := startSim(t, sim.Options{ControlPlanes: 1, Workers: 1, TalosVersion: "v1.12.6"})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	worker := nodeIP(t, c, "worker-1")

	cfg := machineConfig(ctx, t, cli, worker)
	if !strings.Contains(string(cfg), "type: worker") || !strings.Contains(string(cfg), "installer/"+sim.DefaultSchematic+":v1.12.6") {
		t.Fatalf("worker MachineConfig:\n%s", cfg)
	}

	// Talos v1.12 stopped mounting STATE: the old file path is gone.
	r, err := cli.Read(client.WithNode(ctx, worker), "/system/state/config.yaml")
	if err == nil {
		_, err = r.Read(make([]byte, 1))
	}

	if status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), "stat /system/state/config.yaml: no such file or directory") {
		t.Fatalf("read /system/state/config.yaml on v1.12: %v, want NotFound", err)
	}

	// The API is read-only, as Talos's access policy makes it.
	mc, err := safe.StateGetByID[*config.MachineConfig](client.WithNode(ctx, worker), cli.COSI, config.ActiveID)
	if err != nil {
		t.Fatal(err)
	}

	if err = cli.COSI.Update(client.WithNode(ctx, worker), mc); err == nil || !strings.Contains(err.Error(), "code = PermissionDenied desc = write access is not allowed") {
		t.Fatalf("update through the API: %v, want PermissionDenied", err)
	}

	// A type the sim does not serve is refused rather than listed empty.
	_, err = cli.COSI.List(client.WithNode(ctx, worker), resource.NewMetadata("block", "Disks.block.talos.dev", "", resource.VersionUndefined))
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "not supported") {
		t.Fatalf("list an unserved type: %v", err)
	}

	if _, err = cli.COSI.Get(client.WithNode(ctx, worker), resource.NewMetadata(config.NamespaceName, config.MachineConfigType, "nope", resource.VersionUndefined)); !state.IsNotFoundError(err) {
		t.Fatalf("get a missing id: %v, want not found", err)
	}
}

func TestStateFileBeforeV112(t *testing.T) {
	c, cli := startSim(t, sim.Options{ControlPlanes: 1, TalosVersion: "v1.11.5"})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	r, err := cli.Read(client.WithNode(ctx, nodeIP(t, c, "cp-1")), "/system/state/config.yaml")
	if err != nil {
		t.Fatal(err)
	}

	defer r.Close() //nolint:errcheck

	b, err := io.ReadAll(r)
	if err != nil || !strings.Contains(string(b), "type: controlplane") {
		t.Fatalf("read on v1.11: %v\n%s", err, b)
	}
}
