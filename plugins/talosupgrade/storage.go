package talosupgrade

import (
	"context"
	"fmt"
	"strings"

	"github.com/talosbot/talosbot/plugins/cluster"
	"github.com/talosbot/talosbot/plugins/cluster/gate"
	"github.com/talosbot/talosbot/plugins/cluster/storage"
	"github.com/talosbot/talosbot/plugins/sdk"
)

// The storage-aware drain (docs/UPGRADES.md, "Storage: Longhorn and
// CloudNativePG"): the logic is plugins/cluster/storage's; this file is
// the glue into the roll.

// storageSettings are the plugin's storage settings: the storage key of
// its section (plugins.talosupgrade.storage), over the defaults.
func storageSettings(req *sdk.OperationRequest) (storage.Settings, error) {
	cfg, err := decodeConfig(req.Config)
	return cfg.Storage.Settings(), err
}

// gateStorage is what the gate's Storage probe reads: the integrations
// this plugin's settings enable (nil, the defaults, on a section that does
// not decode; the plan refuses it before any gate).
func gateStorage(req *sdk.OperationRequest) *storage.Settings {
	set, err := storageSettings(req)
	if err != nil {
		return nil
	}
	return &set
}

// planStorage reads Longhorn and CNPG, marks every hop's roll as having
// storage steps when either is installed, and forecasts each node's drain
// in roll order. A forecast that cannot finish is an R3 refusal.
func planStorage(ctx context.Context, s *cluster.Session, pa *path, req *sdk.OperationRequest) (storage.Forecast, bool, error) {
	set, err := storageSettings(req)
	if err != nil {
		return storage.Forecast{}, false, err
	}
	if s.Kube == nil || s.Dynamic == nil {
		return storage.Forecast{Checked: "no kubeconfig: not checked"}, false, nil
	}
	first := pa.hops[0]
	var order []string
	for _, n := range first.toUpgrade() {
		if kn := first.ids.KubeNode(n.node.Name); kn != "" {
			order = append(order, kn)
		}
	}
	pdbs, err := gate.PDBsByNode(ctx, s.Kube, order)
	if err != nil {
		return storage.Forecast{}, false, err
	}
	f, installed, err := storage.Plan(ctx, s.Kube, s.Dynamic, order, pdbs, set)
	for _, h := range pa.hops {
		h.storage = installed
	}
	return f, installed, err
}

// storageSteps are a node's storage steps, around its upgrade.
func storageBeforeStep(r *roll, n nodeStep) *sdk.Step {
	return &sdk.Step{ID: n.id("storage-before"), Title: n.node.Name + ": storage before the drain (switch primaries over, last replicas elsewhere)", Node: n.node.Name, Kind: "storage"}
}

func storageAfterStep(r *roll, n nodeStep) *sdk.Step {
	return &sdk.Step{ID: n.id("storage-after"), Title: n.node.Name + ": Longhorn volumes healthy again", Node: n.node.Name, Kind: "storage"}
}

func (x *run) waiter(step string) (storage.Waiter, error) {
	set, err := storageSettings(x.req)
	return storage.Waiter{Kube: x.s.Kube, Dyn: x.s.Dynamic, Settings: set,
		Progress: func(line string) { _ = x.r.StepStarted(step, line) }}, err
}

// storageBefore makes the node safe to drain (storage.Waiter.Before) and
// names the volumes to wait for afterwards. A wait past its limit pauses
// the roll before this node; a refusal fails it, nothing touched.
func (x *run) storageBefore(ctx context.Context, n nodeStep) ([]string, error) {
	if !x.roll.storage {
		return nil, nil
	}
	id := n.id("storage-before")
	kn := x.roll.ids.KubeNode(n.node.Name)
	_ = x.r.StepStarted(id, "")
	w, err := x.waiter(id)
	var lines []string
	if err == nil {
		lines, err = w.Before(ctx, kn)
		x.lines = append(x.lines, lines...)
	}
	if err == nil {
		var affected []string
		if affected, err = w.Affected(ctx, kn); err == nil {
			_ = x.r.StepOK(id, strings.Join(append(lines, fmt.Sprintf("%d Longhorn volume(s) with a replica here", len(affected))), "; "))
			return affected, nil
		}
	}
	_ = x.r.StepFailed(id, err.Error())
	if storage.IsLimit(err) {
		_ = x.r.Result(sdk.PausedResult(n.node.Name, append(x.lines, "⏸️ "+err.Error()+": Resume once storage caught up, or Abandon")))
		return nil, errReported
	}
	return nil, x.fail(fmt.Sprintf("stopped before %s: storage cannot tolerate its drain; %s and later nodes were not touched", n.node.Name, n.node.Name), err)
}

// storageAfter waits until the volumes that had a replica on the node are
// healthy again; past the limit the roll pauses before the next node.
func (x *run) storageAfter(ctx context.Context, n nodeStep, later []nodeStep, affected []string) error {
	if !x.roll.storage {
		return nil
	}
	id := n.id("storage-after")
	_ = x.r.StepStarted(id, "")
	w, err := x.waiter(id)
	var lines []string
	if err == nil {
		lines, err = w.After(ctx, x.roll.ids.KubeNode(n.node.Name), affected)
	}
	if err == nil {
		x.lines = append(x.lines, lines...)
		_ = x.r.StepOK(id, fmt.Sprintf("%d volume(s) healthy", len(affected)))
		return nil
	}
	_ = x.r.StepFailed(id, err.Error())
	if storage.IsLimit(err) {
		next := "the closing checks"
		for _, l := range later {
			if !l.skip {
				next = l.node.Name
				break
			}
		}
		_ = x.r.Result(sdk.PausedResult(next, append(x.lines, "⏸️ "+err.Error()+": Resume once Longhorn has rebuilt, or Abandon")))
		return errReported
	}
	return x.fail(fmt.Sprintf("storage check after %s failed; the roll stopped, no later node was touched", n.node.Name), err)
}
