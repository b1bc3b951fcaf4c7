package rollback

import (
	"context"

	"github.com/talosbot/talosbot/plugins/cluster"
	"github.com/talosbot/talosbot/plugins/cluster/gate"
	"github.com/talosbot/talosbot/plugins/cluster/storage"
	"github.com/talosbot/talosbot/plugins/sdk"
)

// The storage-aware reboot of a rollback (docs/UPGRADES.md, "Storage"):
// the same forecast, the wait before the node goes down, and the wait for
// its volumes to be healthy again before the closing gate.

// storageSettings are the plugin's storage settings: the storage key of
// its section (plugins.rollback.storage), over the defaults.
func storageSettings(req *sdk.OperationRequest) (storage.Settings, error) {
	cfg, err := decodeConfig(req.Config)
	return cfg.Storage.Settings(), err
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

// forecast adds the node's forecast to the plan, or refuses (R3).
func forecast(ctx context.Context, s *cluster.Session, t *target, req *sdk.OperationRequest, plan *sdk.OperationPlan) error {
	kn := t.ids.KubeNode(t.node.Name)
	if kn == "" || s.Kube == nil || s.Dynamic == nil {
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

// waiter is nil without Kubernetes access or a resolved Node.
func waiter(s *cluster.Session, t *target, req *sdk.OperationRequest, r sdk.Reporter) (*storage.Waiter, string) {
	kn := t.ids.KubeNode(t.node.Name)
	if kn == "" || s.Kube == nil || s.Dynamic == nil {
		return nil, ""
	}
	set, _ := storageSettings(req) // Run decoded the section before anything
	return &storage.Waiter{Kube: s.Kube, Dyn: s.Dynamic, Settings: set,
		Progress: func(line string) { _ = r.Log("info", "rollback", line) }}, kn
}
