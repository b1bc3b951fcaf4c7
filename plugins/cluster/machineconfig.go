package cluster

import (
	"context"
	"errors"
	"fmt"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/config"
	resconfig "github.com/siderolabs/talos/pkg/machinery/resources/config"
)

// MachineConfigOf reads the active machine config of the node at addr from its
// MachineConfig resource (namespace "config", id "v1alpha1"), as talosctl
// get machineconfig does. Talos v1.12 stopped mounting the STATE partition,
// so the config file that used to live there cannot be read. st is the Talos
// client's COSI state (client.Client.COSI). The config holds secrets: the
// caller keeps it in memory only.
func MachineConfigOf(ctx context.Context, st state.State, addr string) (config.Provider, error) {
	if st == nil {
		return nil, errors.New("this Talos client has no resource (COSI) API")
	}
	mc, err := safe.StateGetByID[*resconfig.MachineConfig](client.WithNode(ctx, addr), st, resconfig.ActiveID)
	if err != nil {
		// The resource API's errors name the resource, never its content.
		return nil, fmt.Errorf("get the MachineConfig resource: %w", err)
	}
	return mc.Provider(), nil
}
