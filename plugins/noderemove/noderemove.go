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
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"

	"github.com/talosbot/talosbot/internal/version"
	"github.com/talosbot/talosbot/plugins/cluster"
	lifecyclev1 "github.com/talosbot/talosbot/plugins/proto/lifecycle/v1"
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
func (*Plugin) Describe(context.Context) (*lifecyclev1.Manifest, error) {
	return &lifecyclev1.Manifest{Name: Name, Version: version.Version, Commands: []*lifecyclev1.Command{{
		Name: Command,
		Summary: "Remove a node while the inventory still has it: gate, graceful reset (drain, leave etcd), " +
			"wait for the membership change, delete the Kubernetes Node, gate; then remove the inventory entry in Terraform",
		Args: []*lifecyclev1.Arg{
			{Name: "node", Description: "the node to remove (must be in the inventory)", Required: true},
			{Name: "cluster", Description: "cluster of the node (default: the channel's cluster)"},
		},
		Effect:  lifecyclev1.Effect_EFFECT_DISRUPTIVE,
		Drill:   lifecyclev1.Drill_DRILL_NODE_REPLACEMENT,
		Example: "/talos node remove worker-3 staging",
	}}}, nil
}

type target struct {
	node    cluster.Node
	removed bool // already reset and out of etcd: only the follow-up is left
	quorum  cluster.Quorum
}

// check resolves the node (R8) and applies R9. It changes nothing.
func check(ctx context.Context, req *lifecyclev1.OperationRequest, s *cluster.Session) (*target, error) {
	name := strings.TrimSpace(req.GetArgs()["node"])
	n, ok := s.Inv.Node(name)
	if !ok {
		return nil, &cluster.RuleError{Rule: "R8",
			Reason: fmt.Sprintf("%q is not in the inventory of %s: the bot removes a node only while the inventory (Terraform) still has its address and credentials", name, s.Inv.Name),
			Fix: fmt.Sprintf("check the name (nodes: %s); if the entry was already removed from Terraform, restore it, apply, then remove the node here first",
				strings.Join(cluster.Names(s.Inv.Nodes), ", "))}
	}
	t := &target{node: n}
	_, verr := cluster.TalosTag(ctx, s, n)
	if !n.IsControlPlane() {
		t.removed = verr != nil && !kubeNodeExists(ctx, s, n.Name)
		return t, nil
	}
	t.quorum = cluster.ReadQuorum(ctx, s.Clients, s.Inv)
	if !t.quorum.IsMember(n.Name) && verr != nil {
		t.removed = true
		return t, nil
	}
	if re := t.quorum.CheckRemoval(n.Name); re != nil {
		return nil, re
	}
	return t, nil
}

func kubeNodeExists(ctx context.Context, s *cluster.Session, name string) bool {
	if s.Kube == nil {
		return false
	}
	_, err := s.Kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	return err == nil
}

// followUp is the Terraform half of R8.
func followUp(inv cluster.Inventory, n cluster.Node) []string {
	return []string{
		fmt.Sprintf("📝 Terraform follow-up (R8): remove the inventory entry of %s (%s) from talos_nodes for %s, run tofu plan — it must destroy only that node's VM (stop if it replaces talos_machine_secrets or any other VM, R5) — then apply.", n.Name, n.Address, inv.Name),
		fmt.Sprintf("⚠️ Drift until then: the inventory lists %s but the cluster no longer has it; `/talos node remove %s %s` repeats this note.", n.Name, n.Name, inv.Name),
	}
}

// Plan checks the node and quorum; it changes nothing.
func (p *Plugin) Plan(ctx context.Context, req *lifecyclev1.OperationRequest) (*lifecyclev1.OperationPlan, error) {
	s, err := cluster.OpenRequest(ctx, req)
	if err != nil {
		return nil, err
	}
	inv := s.Inv
	defer s.Close() //nolint:errcheck
	t, err := check(ctx, req, s)
	if err != nil {
		return cluster.RefusalPlan(err)
	}
	summary := fmt.Sprintf("Remove %s (%s) from %s: graceful reset, delete the Kubernetes Node, then the Terraform follow-up", t.node.Name, t.node.Role, inv.Name)
	if t.removed {
		summary = fmt.Sprintf("%s is already reset and out of the cluster; only the Terraform follow-up is left", t.node.Name)
	}
	plan := &lifecyclev1.OperationPlan{Summary: summary, Target: t.node.Name,
		CanonicalInputs: sdk.NewCanonical(req).Str("node", t.node.Name).Str("address", t.node.Address).Str("role", t.node.Role).
			Bool("removed", t.removed).List("members", t.quorum.Members).List("nodes", cluster.Names(inv.Nodes)).Bytes()}
	for _, pi := range cluster.Probes() {
		plan.Steps = append(plan.Steps, &lifecyclev1.Step{Id: "gate-before/" + pi.Name, Title: "gate before: " + pi.Title, Kind: "gate"})
	}
	plan.Steps = append(plan.Steps,
		&lifecyclev1.Step{Id: "reset", Title: t.node.Name + ": graceful reset (drain, leave etcd)", Node: t.node.Name, Kind: "reset"},
		&lifecyclev1.Step{Id: "membership", Title: t.node.Name + ": gone from etcd and the Talos API", Node: t.node.Name, Kind: "quorum"},
		&lifecyclev1.Step{Id: "kube-node", Title: "delete Kubernetes Node " + t.node.Name, Node: t.node.Name, Kind: "kubernetes"})
	for _, pi := range cluster.Probes() {
		plan.Steps = append(plan.Steps, &lifecyclev1.Step{Id: "gate-after/" + pi.Name, Title: "gate after (without " + t.node.Name + "): " + pi.Title, Kind: "gate"})
	}
	plan.Steps = append(plan.Steps, &lifecyclev1.Step{Id: "terraform", Title: "Terraform follow-up: remove the inventory entry, then apply", Kind: "note"})
	return plan, nil
}

// Run removes the node.
func (p *Plugin) Run(ctx context.Context, req *lifecyclev1.OperationRequest, r sdk.Reporter) error {
	s, err := cluster.OpenRequest(ctx, req)
	if err != nil {
		return err
	}
	inv := s.Inv
	defer s.Close() //nolint:errcheck
	t, err := check(ctx, req, s)
	if err != nil {
		if re, ok := cluster.AsRuleError(err); ok {
			return r.Result(&lifecyclev1.Result{Ok: false, Summary: "refused", Error: re.Error(), Refusal: re.Proto()})
		}
		return err
	}
	n := t.node
	after := inv.Without(n.Name)
	nodeTO := cluster.NodeTimeout(req.GetSettings())
	fail := func(summary string, err error) error {
		return r.Result(&lifecyclev1.Result{Ok: false, Summary: summary, Error: err.Error()})
	}

	if t.removed {
		for _, id := range []string{"reset", "membership", "kube-node"} {
			_ = r.StepSkipped(id, n.Name+" is already reset and out of the cluster")
		}
	} else {
		// Gate before (R1), the node to remove being the one drained.
		gate := cluster.Gate(ctx, s.Clients, inv, s.GateOptions(req.GetSettings(), []string{n.Name}))
		if err := cluster.ReportGate(r, "gate-before/", gate); err != nil {
			return err
		}
		if err := cluster.CheckGateBefore("the removal", gate.Reasons); err != nil {
			return r.Result(sdk.RefusedResult(err, "refused: the health gate failed; nothing was changed"))
		}

		_ = r.StepStarted("reset", "")
		resp, err := s.Talos.MachineClient.Reset(client.WithNode(ctx, n.Address), &machineapi.ResetRequest{Graceful: true, Reboot: false})
		if err == nil {
			_, err = client.FilterMessages(resp, err)
		}
		if err != nil {
			_ = r.StepFailed("reset", err.Error())
			return fail("graceful reset of "+n.Name+" failed; the node is still in the cluster", err)
		}
		_ = r.StepOK("reset", "graceful reset requested: Talos drains the node and leaves etcd")

		_ = r.StepStarted("membership", "")
		if err := waitGone(ctx, s, inv, n, nodeTO); err != nil {
			_ = r.StepFailed("membership", err.Error())
			return fail(n.Name+" did not leave the cluster", err)
		}
		detail := n.Name + " no longer answers"
		if n.IsControlPlane() {
			detail = n.Name + " left etcd; " + cluster.ReadQuorum(ctx, s.Clients, after).Summary()
		}
		_ = r.StepOK("membership", detail)

		if s.Kube == nil {
			_ = r.StepSkipped("kube-node", "no kubeconfig: delete it with kubectl delete node "+n.Name)
		} else {
			err := s.Kube.CoreV1().Nodes().Delete(ctx, n.Name, metav1.DeleteOptions{})
			switch {
			case err == nil:
				_ = r.StepOK("kube-node", "deleted")
			case apierrors.IsNotFound(err):
				_ = r.StepSkipped("kube-node", "already gone")
			default:
				_ = r.StepFailed("kube-node", err.Error())
				return fail("could not delete the Kubernetes Node "+n.Name, err)
			}
		}
	}

	// Gate after (R1), on the cluster as it now is.
	gate := cluster.GateUntil(ctx, s.Clients, after, s.GateOptions(req.GetSettings(), []string{}), cluster.GateTimeout(req.GetSettings()))
	if err := cluster.ReportGate(r, "gate-after/", gate); err != nil {
		return err
	}
	lines := followUp(inv, n)
	_ = r.StepOK("terraform", lines[0])
	if !gate.Passed {
		return r.Result(&lifecyclev1.Result{Ok: false, Summary: n.Name + " was removed but the closing health gate failed", Error: gate.Err().Error(), Lines: lines})
	}
	return r.Result(&lifecyclev1.Result{Ok: true, Summary: fmt.Sprintf("%s removed from %s; now remove it from Terraform", n.Name, inv.Name), Lines: lines})
}

// waitGone waits until a reset node is out: a control plane no longer in
// the etcd membership (as the remaining members see it), and the node's
// Talos API no longer answering (it is wiped and powered down).
func waitGone(ctx context.Context, s *cluster.Session, inv cluster.Inventory, n cluster.Node, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	rest := inv.Without(n.Name)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	last := "waiting"
	for {
		gone := true
		if n.IsControlPlane() {
			q := cluster.ReadQuorum(ctx, s.Clients, rest)
			if q.IsMember(n.Name) || len(q.Healthy) == 0 {
				gone, last = false, "etcd: "+q.Summary()
			}
		}
		if gone {
			if _, err := cluster.TalosTag(ctx, s, n); err == nil {
				gone, last = false, n.Name+" still answers (reset in progress)"
			}
		}
		if gone {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not gone within %s (%s): %w", n.Name, timeout, last, errors.New("timeout"))
		case <-tick.C:
		}
	}
}
