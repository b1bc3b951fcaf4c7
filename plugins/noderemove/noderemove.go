// Package noderemove is the built-in plugin behind `/talos node remove
// <node> [cluster]` (rules R8, R9): while the inventory still has the node,
// reset it gracefully (Talos drains it and leaves etcd), wait for the etcd
// membership to drop it, delete its Kubernetes Node, and post the Terraform
// follow-up (remove the inventory entry, then apply). Running it again on a
// node already removed skips every step and repeats the follow-up, so the
// drift stays visible until Terraform catches up.
package noderemove

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/cosi-project/runtime/pkg/safe"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"

	"github.com/talosbot/talosbot/internal/version"
	"github.com/talosbot/talosbot/plugins/cluster"
	"github.com/talosbot/talosbot/plugins/cluster/etcd"
	"github.com/talosbot/talosbot/plugins/cluster/gate"
	"github.com/talosbot/talosbot/plugins/cluster/identity"
	"github.com/talosbot/talosbot/plugins/cluster/k8s"
	"github.com/talosbot/talosbot/plugins/cluster/talos"
	"github.com/talosbot/talosbot/plugins/sdk"
)

// Name is the plugin's catalogue name.
const Name = "noderemove"

// Command is the chat command.
const Command = "node remove"

// Plugin implements sdk.Plugin. It keeps no per-call state.
type Plugin struct{}

// New returns the plugin.
func New() sdk.Plugin { return &Plugin{} }

// Describe returns the manifest.
func (*Plugin) Describe(context.Context) (*sdk.Manifest, error) {
	return &sdk.Manifest{Name: Name, Version: version.Version, Commands: []*sdk.Command{{
		Name: Command,
		Summary: "Remove a node while the inventory still has it: gate, graceful reset (drain, leave etcd), " +
			"wait for the membership change, delete the Kubernetes Node, gate; then remove the inventory entry in Terraform",
		Args: []*sdk.Arg{
			{Name: "node", Description: "the node to remove (must be in the inventory)", Required: true},
			{Name: "cluster", Description: "cluster of the node (default: the channel's cluster)"},
		},
		Effect:  sdk.EffectDisruptive,
		Drill:   sdk.DrillNodeReplacement,
		Example: "/talos node remove worker-3 staging",
	}}}, nil
}

type target struct {
	node    cluster.Node
	ids     *identity.Map
	removed bool // already reset and out of etcd: only the follow-up is left
	// resetIssued: a resumed run whose reset was already sent (resetInFlight, or the node is
	// resetting): the run waits for the node to leave and never resets it again.
	resetIssued bool
	quorum      etcd.Quorum
}

// kubeNode is the node's Kubernetes Node name, "" when it has none.
func (t *target) kubeNode() string { return t.ids.KubeNode(t.node.Name) }

// check resolves the node (R8) and applies R9. It changes nothing. resetIssued: a resumed
// run whose reset was already in flight (resetInFlight): the node is on its way out, so R9,
// which reads the membership the reset is changing, no longer applies.
func check(ctx context.Context, req *sdk.OperationRequest, s *cluster.Session, resetIssued bool) (*target, error) {
	name := strings.TrimSpace(req.Args["node"])
	n, ok := s.Inv.Node(name)
	if !ok { // rule:R8
		return nil, &sdk.Refusal{Rule: "R8",
			Reason: fmt.Sprintf("%s is not in the inventory of %s: the bot removes a node only while the inventory (Terraform) still has its address and credentials", sdk.Quote(name), s.Inv.Name),
			Fix: fmt.Sprintf("check the name (nodes: %s); if the entry was already removed from Terraform, restore it, apply, then remove the node here first",
				strings.Join(cluster.Names(s.Inv.Nodes), ", "))}
	}
	t := &target{node: n, ids: identity.Resolve(ctx, s.Clients, s.Inv, identity.Options{})}
	_, verr := talos.TalosTag(ctx, s, n)
	// The stopped run's reset may have reached the node before the host recorded its step
	// (the step's start and the call are a moment apart): Talos's MachineStatus says a reset
	// runs (stage resetting, the sequence machined runs for it).
	if !resetIssued && verr == nil && req.Attempt > 1 {
		resetIssued = resetting(ctx, s, n)
	}
	// Or the reset got further than Talos's API: the node no longer answers, and its Node is
	// cordoned, as the reset's drain leaves it (soak seed 1000: killed right after the reset,
	// the resume found cp-2 silent and still an etcd member, refused on R9 and left the cordon
	// unsaid). A node that merely does not answer keeps its Node schedulable. The run then
	// waits for the node to leave and, if it never does, fails naming the cordon; it never
	// resets twice.
	if !resetIssued && verr != nil && req.Attempt > 1 {
		resetIssued = drainedAndSilent(ctx, s, t.kubeNode())
	}
	t.resetIssued = resetIssued
	if verr == nil {
		// The reset goes to this machine and the Node deleted is its own:
		// both names must be resolved, never guessed from the inventory name.
		if err := t.ids.Require(identity.All, n.Name); err != nil {
			return nil, err
		}
	}
	if !n.IsControlPlane() {
		t.removed = verr != nil && t.kubeNode() == ""
		return t, nil
	}
	t.quorum = etcd.ReadQuorum(ctx, s.Clients, t.ids)
	if !t.quorum.IsMember(n.Name) && verr != nil {
		t.removed = true
		return t, nil
	}
	if re := t.quorum.CheckRemoval(n.Name); re != nil && !resetIssued {
		return nil, re
	}
	return t, nil
}

// resetting reports whether n's machine is in Talos's reset sequence (MachineStatus stage
// resetting, internal/app/machined/pkg/controllers/runtime/machine_status.go).
func resetting(ctx context.Context, s *cluster.Session, n cluster.Node) bool {
	ms, err := safe.StateGetByID[*runtime.MachineStatus](client.WithNode(ctx, n.Address), s.COSI, runtime.MachineStatusID)
	return err == nil && ms.TypedSpec().Stage == runtime.MachineStageResetting
}

// drainedAndSilent reports whether the Kubernetes Node kn of a node that does not answer is
// cordoned (the caller has seen it silent).
func drainedAndSilent(ctx context.Context, s *cluster.Session, kn string) bool {
	if s.Kube == nil || kn == "" {
		return false
	}
	c, err := k8s.Cordoned(ctx, s.Kube, kn)
	return err == nil && c
}

// resetInFlight: this is a resumed run and the stopped one had its reset in flight (the host
// names its interrupted steps, sdk.InterruptedSteps): the reset was sent, or was about to be.
// The resumed run then waits for the node to be gone instead of checking R9 and the gate
// again on a cluster the reset is changing, and never sends a second reset (soak seed 1000:
// killed right after the reset, the resume was refused by R9 and left the Node cordoned).
func resetInFlight(req *sdk.OperationRequest) bool {
	in := sdk.InterruptedSteps(req)
	return req.Attempt > 1 && (in["reset"] || in["membership"])
}

func orInventory(name, fallback string) string {
	if name == "" {
		return fallback
	}
	return name
}

// followUp is the Terraform half of R8.
func followUp(inv cluster.Inventory, n cluster.Node) []string {
	return []string{
		fmt.Sprintf("📝 Terraform follow-up (R8): remove the inventory entry of %s (%s) from talos_nodes for %s, run tofu plan — it must destroy only that node's VM (stop if it replaces talos_machine_secrets or any other VM, R5) — then apply.", n.Name, n.Address, inv.Name),
		fmt.Sprintf("⚠️ Drift until then: the inventory lists %s but the cluster no longer has it; `/talos node remove %s %s` repeats this note.", n.Name, n.Name, inv.Name),
	}
}

// Plan checks the node and quorum; it changes nothing.
func (p *Plugin) Plan(ctx context.Context, req *sdk.OperationRequest) (*sdk.OperationPlan, error) {
	if _, err := decodeConfig(req.Config); err != nil {
		return nil, err
	}
	if err := cluster.CheckRole(req.Credentials.Talosconfig, "the removal", cluster.GateMethods, cluster.RemoveMethods); err != nil {
		return sdk.RefusalPlan(err)
	}
	s, err := cluster.OpenRequest(ctx, req)
	if err != nil {
		return nil, err
	}
	inv := s.Inv
	defer s.Close() //nolint:errcheck
	t, err := check(ctx, req, s, resetInFlight(req))
	if err != nil {
		return sdk.RefusalPlan(err)
	}
	summary := fmt.Sprintf("Remove %s (%s) from %s: graceful reset, delete the Kubernetes Node, then the Terraform follow-up", t.node.Name, t.node.Role, inv.Name)
	if t.removed {
		summary = fmt.Sprintf("%s is already reset and out of the cluster; only the Terraform follow-up is left", t.node.Name)
		if kn := t.kubeNode(); kn != "" {
			summary = fmt.Sprintf("%s is already reset and out of the cluster; delete its Kubernetes Node %s, then the Terraform follow-up", t.node.Name, kn)
		}
	}
	plan := &sdk.OperationPlan{Summary: summary, Target: t.node.Name, Warnings: gate.PlanWarnings(ctx, s.Clients),
		CanonicalInputs: sdk.NewCanonical(req).Str("node", t.node.Name).Str("address", t.node.Address).Str("role", t.node.Role).
			Bool("removed", t.removed).List("members", t.quorum.Members).List("nodes", cluster.Names(inv.Nodes)).Bytes()}
	for _, pi := range gate.Probes() {
		plan.Steps = append(plan.Steps, &sdk.Step{ID: "gate-before/" + pi.Name, Title: "gate before: " + pi.Title, Kind: "gate"})
	}
	plan.Steps = append(plan.Steps,
		&sdk.Step{ID: "reset", Title: t.node.Name + ": graceful reset (drain, leave etcd)", Node: t.node.Name, Kind: "reset"},
		&sdk.Step{ID: "membership", Title: t.node.Name + ": gone from etcd and the Talos API", Node: t.node.Name, Kind: "quorum"},
		&sdk.Step{ID: "kube-node", Title: "delete Kubernetes Node " + orInventory(t.kubeNode(), t.node.Name), Node: t.node.Name, Kind: "kubernetes"})
	for _, pi := range gate.Probes() {
		plan.Steps = append(plan.Steps, &sdk.Step{ID: "gate-after/" + pi.Name, Title: "gate after (without " + t.node.Name + "): " + pi.Title, Kind: "gate"})
	}
	plan.Steps = append(plan.Steps, &sdk.Step{ID: "terraform", Title: "Terraform follow-up: remove the inventory entry, then apply", Kind: "note"})
	if err := forecast(ctx, s, t, req, plan); err != nil {
		return sdk.RefusalPlan(err)
	}
	return plan, nil
}

// Run removes the node.
func (p *Plugin) Run(ctx context.Context, req *sdk.OperationRequest, r sdk.Reporter) (err error) {
	defer func() {
		if errors.Is(err, errReported) {
			err = nil
		}
	}()
	if _, err := decodeConfig(req.Config); err != nil {
		return err
	}
	s, err := cluster.OpenRequest(ctx, req)
	if err != nil {
		return err
	}
	inv := s.Inv
	defer s.Close() //nolint:errcheck
	t, err := check(ctx, req, s, resetInFlight(req))
	if err != nil {
		if re, ok := sdk.AsRefusal(err); ok {
			return r.Result(&sdk.Result{OK: false, Summary: "refused", Error: re.Error(), Refusal: re})
		}
		return err
	}
	n := t.node
	after := t.ids.Without(n.Name)
	nodeTO := talos.NodeTimeout(req.Settings)
	fail := func(summary string, err error) error {
		// Talos's graceful reset drains the node, cordoning its Node: a removal that fails
		// after it says so, as no later step will uncordon it (soak seed 1156).
		var lines []string
		if kn := t.kubeNode(); s.Kube != nil && kn != "" {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			if c, cerr := k8s.Cordoned(cctx, s.Kube, kn); cerr == nil && c {
				lines = append(lines, fmt.Sprintf("🩺 Kubernetes node %s (%s) is cordoned: the graceful reset's drain cordoned it", kn, n.Name))
			}
			cancel()
		}
		if rerr := r.Result(&sdk.Result{OK: false, Summary: summary, Error: err.Error(), Lines: lines}); rerr != nil {
			return rerr
		}
		// Reported: the caller stops here. (Returning Result's nil made gone() succeed, and a
		// removal whose node never left went on to delete its Node and run the gate after.)
		return errReported
	}

	gone := func() error {
		_ = r.StepStarted("membership", "")
		if err := waitGone(ctx, s, t.ids, n, nodeTO); err != nil {
			_ = r.StepFailed("membership", err.Error())
			return fail(n.Name+" did not leave the cluster", err)
		}
		detail := n.Name + " no longer answers"
		if n.IsControlPlane() {
			detail = n.Name + " left etcd; " + etcd.ReadQuorum(ctx, s.Clients, after).Summary()
		}
		_ = r.StepOK("membership", detail)
		return nil
	}
	var storageLines []string // the switchovers and waits before the drain
	switch {
	case t.removed:
		for _, id := range []string{"reset", "membership"} {
			_ = r.StepSkipped(id, n.Name+" is already reset and out of the cluster")
		}
	case t.resetIssued:
		_ = r.StepSkipped("reset", "requested before talosbot stopped: not sent again")
		if err := gone(); err != nil {
			return err
		}
	default:
		// Gate before (R1), the node to remove being the one drained.
		gopts := gate.OptionsFor(s, req.Settings, []string{n.Name})
		gopts.Identity, gopts.Storage = t.ids, gateStorage(req)
		verdict := gate.Run(ctx, s.Clients, inv, gopts)
		if err := gate.Report(r, "gate-before/", verdict); err != nil {
			return err
		}
		if err := cluster.CheckGateBefore("the removal", verdict.Reasons); err != nil {
			return r.Result(sdk.RefusedResult(err, "refused: the health gate failed; nothing was changed"))
		}

		_ = r.StepStarted("reset", "")
		lines, err := storageBefore(ctx, s, t, req, r)
		if err != nil {
			_ = r.StepFailed("reset", err.Error())
			res := &sdk.Result{OK: false, Summary: "stopped before the reset: storage cannot tolerate draining " + n.Name + "; the node is still in the cluster",
				Error: err.Error(), Lines: lines}
			if re, ok := sdk.AsRefusal(err); ok {
				res.Refusal = re
			}
			return r.Result(res)
		}
		storageLines = lines
		resp, err := s.Talos.MachineClient.Reset(client.WithNode(ctx, n.Address), &machineapi.ResetRequest{Graceful: true, Reboot: false})
		if err == nil {
			_, err = client.FilterMessages(resp, err)
		}
		if err != nil {
			_ = r.StepFailed("reset", err.Error())
			return fail("graceful reset of "+n.Name+" failed; the node is still in the cluster", err)
		}
		_ = r.StepOK("reset", "graceful reset requested: Talos drains the node and leaves etcd")
		if err := gone(); err != nil {
			return err
		}
	}

	// The Kubernetes Node goes also when the node was already reset: a run
	// stopped right after the reset (talosbot killed) is resumed as
	// "already reset", and its Node, cordoned by the reset's drain, would
	// otherwise stay behind and fail the gate after (found by the soak, seed 22).
	if s.Kube == nil {
		_ = r.StepSkipped("kube-node", "no kubeconfig: delete it with kubectl delete node "+orInventory(t.kubeNode(), "<its Node name>"))
	} else if kn := t.kubeNode(); kn == "" {
		_ = r.StepSkipped("kube-node", n.Name+" has no Kubernetes Node")
	} else {
		err := s.Kube.CoreV1().Nodes().Delete(ctx, kn, metav1.DeleteOptions{})
		switch {
		case err == nil:
			_ = r.StepOK("kube-node", "deleted")
		case apierrors.IsNotFound(err):
			_ = r.StepSkipped("kube-node", "already gone")
		default:
			_ = r.StepFailed("kube-node", err.Error())
			return fail("could not delete the Kubernetes Node "+kn+" of "+n.Name, err)
		}
	}

	// Gate after (R1), on the cluster as it now is.
	aopts := gate.OptionsFor(s, req.Settings, []string{})
	aopts.Identity = after
	verdict := gate.Until(ctx, s.Clients, after.Inventory(), aopts, gate.AfterWait(req.Settings))
	if err := gate.Report(r, "gate-after/", verdict); err != nil {
		return err
	}
	lines := followUp(inv, n)
	_ = r.StepOK("terraform", lines[0])
	lines = append(lines, storageLines...)
	if !verdict.Passed {
		return r.Result(&sdk.Result{OK: false, Summary: n.Name + " was removed but the closing health gate failed", Error: verdict.Err().Error(), Lines: lines})
	}
	return r.Result(&sdk.Result{OK: true, Summary: fmt.Sprintf("%s removed from %s; now remove it from Terraform", n.Name, inv.Name), Lines: lines})
}

// errReported: the failure was sent as the Result; the run stops there.
var errReported = errors.New("result reported")

// goneRead bounds one read of a node being reset: silent that long, it is taken as gone.
const goneRead = 5 * time.Second

// goneFor is how long a node must stay silent to be gone.
const goneFor = 2 * time.Second

// waitGone waits until a reset node is out: a control plane no longer in
// the etcd membership (as the remaining members see it), and the node's
// Talos API no longer answering (it is wiped and powered down).
func waitGone(ctx context.Context, s *cluster.Session, ids *identity.Map, n cluster.Node, timeout time.Duration) error {
	// The node being reset is not asked (it may not answer); its member is
	// still recognised in the others' member list by id or peer URL.
	rest := ids.Without(n.Name)
	last := "waiting"
	var silentSince time.Time // the first failed read of a run of them
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		gone := true
		if n.IsControlPlane() {
			q := etcd.ReadQuorum(ctx, s.Clients, rest)
			still := slices.ContainsFunc(q.Listed, func(m *machineapi.EtcdMember) bool {
				got, ok := ids.ByMember(m)
				return ok && got.Name == n.Name
			})
			if still || len(q.Healthy) == 0 {
				gone, last = false, "etcd: "+q.Summary()
			}
		}
		if gone {
			// A node that fails a read of its own (refused, or silent for goneRead) is gone;
			// a read cut short by the wait's own deadline says nothing of the node (on a
			// loaded machine a worker still up read "gone" that way, and its Node was
			// deleted: TestFailureAfterResetNamesTheCordon).
			// One failed read is not enough either: the node must stay silent for goneFor
			// (a live worker failed one read on a loaded machine and was taken as gone).
			rctx, cancel := context.WithTimeout(ctx, goneRead)
			_, err := talos.TalosTag(rctx, s, n)
			cancel()
			switch {
			case err == nil:
				gone, last, silentSince = false, n.Name+" still answers (reset in progress)", time.Time{}
			case ctx.Err() != nil:
				gone = false
			case silentSince.IsZero():
				gone, last, silentSince = false, n.Name+" stopped answering: "+err.Error(), time.Now()
			case time.Since(silentSince) < goneFor:
				gone = false
			}
		}
		return gone, nil
	})
	if err != nil {
		return fmt.Errorf("%s not gone within %s (%s): %w", n.Name, timeout, last, errors.New("timeout"))
	}
	return nil
}
