package rollback

import (
	"context"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

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
func waiter(s *cluster.Session, t *target, req *sdk.OperationRequest, r sdk.Reporter, now func() time.Time) (*storage.Waiter, string) {
	kn := t.ids.KubeNode(t.node.Name)
	if kn == "" || s.Kube == nil || s.Dynamic == nil {
		return nil, ""
	}
	set, _ := storageSettings(req) // Run decoded the section before anything
	return &storage.Waiter{Kube: s.Kube, Dyn: s.Dynamic, Settings: set, Now: now,
		Progress: func(line string) { _ = r.Log("info", "rollback", line) }}, kn
}

// rolledBackAnnotation marks, on the Kubernetes Node, a rollback that is
// done while its run waits for Longhorn afterwards: "OPERATION FROM TO".
// A run that pauses there (rebuild_wait passed) is resumed by planning
// again, and the node alone cannot say it was already rolled back (a
// second Talos rollback would boot the other entry, the newer version,
// again: grub/revert.go swaps the entries). The mark names the operation,
// so only its own resume reads it; the run that finishes clears it.
const rolledBackAnnotation = "talosbot.io/rolled-back"

// done is a rollback of this operation that an earlier attempt finished.
type done struct{ from, to string }

// rolledBack reads the mark of req's operation on the node; nil when
// there is none (or no Kubernetes access, where no run waits afterwards).
func rolledBack(ctx context.Context, s *cluster.Session, t *target, req *sdk.OperationRequest) *done {
	kn := t.ids.KubeNode(t.node.Name)
	if kn == "" || s.Kube == nil || req.OperationID == "" {
		return nil
	}
	n, err := s.Kube.CoreV1().Nodes().Get(ctx, kn, metav1.GetOptions{})
	if err != nil {
		return nil
	}
	f := strings.Fields(n.Annotations[rolledBackAnnotation])
	if len(f) != 3 || f[0] != req.OperationID {
		return nil
	}
	return &done{from: f[1], to: f[2]}
}

// markRolledBack writes the mark (a merge patch of one annotation).
func markRolledBack(ctx context.Context, s *cluster.Session, kn string, req *sdk.OperationRequest, d done) error {
	return patchMark(ctx, s, kn, fmt.Sprintf("%q", req.OperationID+" "+d.from+" "+d.to))
}

// clearRolledBack removes the mark; a failure is only logged by the
// caller: a stale mark names a finished operation and is never read again.
func clearRolledBack(ctx context.Context, s *cluster.Session, kn string) error {
	return patchMark(ctx, s, kn, "null")
}

func patchMark(ctx context.Context, s *cluster.Session, kn, value string) error {
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%s}}}`, rolledBackAnnotation, value)
	if _, err := s.Kube.CoreV1().Nodes().Patch(ctx, kn, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("annotate Node %s (%s): %w", kn, rolledBackAnnotation, err)
	}
	return nil
}

// pausedResult is a storage wait past its limit: the run pauses (Resume,
// Abandon), it does not fail.
func pausedResult(node string, lines []string, err error, fix string) *sdk.Result {
	return sdk.PausedResult(node, append(lines, "⏸️ "+err.Error()+": "+fix))
}
