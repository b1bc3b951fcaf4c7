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

// storageSettings are the plugin's storage settings.
func storageSettings(*sdk.OperationRequest) storage.Settings {
	return storage.Defaults()
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
	f, _, err := storage.Plan(ctx, s.Kube, s.Dynamic, []string{kn}, pdbs, storageSettings(req))
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
	return &storage.Waiter{Kube: s.Kube, Dyn: s.Dynamic, Settings: storageSettings(req),
		Progress: func(line string) { _ = r.Log("info", "rollback", line) }}, kn
}
