package noderemove

import (
	"context"
	"fmt"

	"github.com/talosbot/talosbot/plugins/cluster"
	"github.com/talosbot/talosbot/plugins/cluster/gate"
	"github.com/talosbot/talosbot/plugins/cluster/storage"
	"github.com/talosbot/talosbot/plugins/sdk"
)

// The storage-aware drain of a removal (docs/UPGRADES.md, "Storage"):
// the same forecast and the same wait before the drain as the Talos
// upgrade; the node does not come back, so there is no wait after it.

// storageSettings are the plugin's storage settings: the storage key of
// its section (plugins.noderemove.storage), over the defaults.
func storageSettings(req *sdk.OperationRequest) (storage.Settings, error) {
	return decodeConfig(req.Config)
}

// gateStorage is what the gate's Storage probe reads: the integrations
// this plugin's settings enable (nil, the defaults, on a section that does
// not decode; Plan and Run refuse it before any gate).
func gateStorage(req *sdk.OperationRequest) *storage.Settings {
	set, err := storageSettings(req)
	if err != nil {
		return nil
	}
	return &set
}

// forecast adds the node's drain forecast to the plan, or refuses (R3).
func forecast(ctx context.Context, s *cluster.Session, t *target, req *sdk.OperationRequest, plan *sdk.OperationPlan) error {
	kn := t.kubeNode()
	if t.removed || kn == "" || s.Kube == nil || s.Dynamic == nil {
		return nil
	}
	pdbs, err := gate.PDBsByNode(ctx, s.Kube, []string{kn})
	if err != nil {
		return err
	}
	set, err := storageSettings(req)
	if err != nil {
		return err
	}
	f, _, err := storage.Plan(ctx, s.Kube, s.Dynamic, []string{kn}, pdbs, set)
	if err != nil {
		return err
	}
	f.AddTo(plan)
	return nil
}

// storageBefore switches primaries off the node and waits for a healthy
// replica elsewhere of every volume whose last one is there, before the
// reset drains it. A refusal or a wait past its limit stops the removal
// with nothing changed.
func storageBefore(ctx context.Context, s *cluster.Session, t *target, req *sdk.OperationRequest, r sdk.Reporter) ([]string, error) {
	kn := t.kubeNode()
	if kn == "" || s.Kube == nil || s.Dynamic == nil {
		return nil, nil
	}
	set, err := storageSettings(req)
	if err != nil {
		return nil, err
	}
	w := storage.Waiter{Kube: s.Kube, Dyn: s.Dynamic, Settings: set,
		Progress: func(line string) { _ = r.Log("info", "reset", line) }}
	lines, err := w.Before(ctx, kn)
	if err != nil {
		return lines, fmt.Errorf("before draining %s: %w", kn, err)
	}
	return lines, nil
}
