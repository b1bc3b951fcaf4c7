// Package uncordon is the built-in plugin behind `/talos node uncordon
// <node> [cluster]`: make a Kubernetes node that an interrupted or failed
// operation left cordoned schedulable again. It is the button a failed Talos
// upgrade offers when it could not uncordon the node itself, so that no node
// the bot cordoned stays cordoned unseen.
//
// The node is found through its resolved identity (its Kubernetes Node, by
// k8s.Nodename or InternalIP), never by assuming the inventory name is the
// Node name. Only a Ready Node is uncordoned, as talosctl uncordons only
// after the Node is Ready again (cmd/talosctl/cmd/talos/drain.go). It runs
// no health gate: the gate fails on a cordoned node, which is what this
// command repairs (docs/RUNBOOK.md).
package uncordon

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/talosbot/talosbot/internal/version"
	"github.com/talosbot/talosbot/plugins/cluster"
	"github.com/talosbot/talosbot/plugins/cluster/identity"
	"github.com/talosbot/talosbot/plugins/cluster/k8s"
	"github.com/talosbot/talosbot/plugins/sdk"
)

// Name is the plugin's catalogue name.
const Name = "uncordon"

// Command is the chat command.
const Command = "node uncordon"

// Rule is the refusal rule id: the uncordon follows R15's "a node the bot
// cordoned is never left cordoned silently" (docs/RUNBOOK.md).
const Rule = "uncordon"

// Plugin implements sdk.Plugin.
type Plugin struct{}

// New returns the plugin.
func New() sdk.Plugin { return &Plugin{} }

// Describe returns the manifest.
func (*Plugin) Describe(context.Context) (*sdk.Manifest, error) {
	return &sdk.Manifest{Name: Name, Version: version.Version, Commands: []*sdk.Command{{
		Name:    Command,
		Summary: "Make a cordoned Kubernetes node schedulable again, once it is Ready (the follow-up of a failed upgrade)",
		Args: []*sdk.Arg{
			{Name: "node", Required: true, Description: "the node (inventory name)"},
			{Name: "cluster", Description: "cluster (default: the channel's cluster)"},
		},
		Effect:  sdk.EffectDisruptive,
		Example: "/talos node uncordon worker-2 staging",
	}}}, nil
}

type target struct {
	node     identity.Node
	cordoned bool
}

// check resolves the node and reads its Kubernetes Node. It changes nothing.
func check(ctx context.Context, req *sdk.OperationRequest, s *cluster.Session) (*target, error) {
	name := strings.TrimSpace(req.Args["node"])
	if s.Kube == nil {
		return nil, sdk.Refuse(Rule, "no kubeconfig was provided, so the Kubernetes Node cannot be read or uncordoned",
			"configure the cluster's kubeconfig credential, or run kubectl uncordon yourself")
	}
	if _, ok := s.Inv.Node(name); !ok {
		return nil, sdk.Refuse(Rule, fmt.Sprintf("%s is not in the inventory of %s", sdk.Clip(name), s.Inv.Name),
			"use an inventory name: "+strings.Join(cluster.Names(s.Inv.Nodes), ", "))
	}
	ids := identity.Resolve(ctx, s.Clients, s.Inv, identity.Options{})
	if err := ids.Require(identity.Kubernetes, name); err != nil {
		return nil, err
	}
	n, _ := ids.Of(name)
	kn, err := s.Kube.CoreV1().Nodes().Get(ctx, n.KubeNode, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("read Kubernetes node %s of %s: %w", n.KubeNode, n.Name, err)
	}
	if kn.Spec.Unschedulable && !ready(kn) {
		return nil, sdk.Refuse(Rule, fmt.Sprintf("Kubernetes node %s (%s) is not Ready; uncordoning it would send pods to a node that cannot run them", n.KubeNode, n.Name),
			"bring the node back first (/talos health shows why it is not Ready), then uncordon it")
	}
	return &target{node: n, cordoned: kn.Spec.Unschedulable}, nil
}

func ready(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Plan reads the node; it changes nothing.
func (*Plugin) Plan(ctx context.Context, req *sdk.OperationRequest) (*sdk.OperationPlan, error) {
	s, err := cluster.OpenRequest(ctx, req)
	if err != nil {
		return nil, err
	}
	defer s.Close() //nolint:errcheck
	t, err := check(ctx, req, s)
	if err != nil {
		return sdk.RefusalPlan(err)
	}
	summary := fmt.Sprintf("Uncordon %s (Kubernetes node %s) of %s", t.node.Name, t.node.KubeNode, s.Inv.Name)
	if !t.cordoned {
		summary = fmt.Sprintf("%s (Kubernetes node %s) is already schedulable; nothing to do", t.node.Name, t.node.KubeNode)
	}
	return &sdk.OperationPlan{
		Summary: summary,
		Target:  t.node.Name,
		Steps:   []*sdk.Step{{ID: "uncordon", Title: "uncordon " + t.node.KubeNode, Node: t.node.Name, Kind: "uncordon"}},
		CanonicalInputs: sdk.NewCanonical(req).Str("node", t.node.Name).Str("kube_node", t.node.KubeNode).
			Bool("cordoned", t.cordoned).Bytes(),
	}, nil
}

// Run uncordons the node (again checked Ready) and reads it back.
func (*Plugin) Run(ctx context.Context, req *sdk.OperationRequest, r sdk.Reporter) error {
	s, err := cluster.OpenRequest(ctx, req)
	if err != nil {
		return err
	}
	defer s.Close() //nolint:errcheck
	t, err := check(ctx, req, s)
	if err != nil {
		if res := sdk.RefusedResult(err, "refused"); res != nil {
			return r.Result(res)
		}
		return err
	}
	_ = r.StepStarted("uncordon", t.node.KubeNode)
	if !t.cordoned {
		_ = r.StepSkipped("uncordon", "already schedulable")
		return r.Result(&sdk.Result{OK: true, Summary: fmt.Sprintf("%s is already schedulable", t.node.Name)})
	}
	uctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := k8s.Uncordon(uctx, s.Kube, t.node.KubeNode); err != nil {
		_ = r.StepFailed("uncordon", err.Error())
		return r.Result(&sdk.Result{OK: false, Summary: fmt.Sprintf("%s is still cordoned", t.node.Name), Error: err.Error()})
	}
	if still, err := k8s.Cordoned(uctx, s.Kube, t.node.KubeNode); err != nil || still {
		msg := fmt.Sprintf("Kubernetes node %s still reads as cordoned", t.node.KubeNode)
		if err != nil {
			msg = err.Error()
		}
		_ = r.StepFailed("uncordon", msg)
		return r.Result(&sdk.Result{OK: false, Summary: fmt.Sprintf("%s may still be cordoned", t.node.Name), Error: msg})
	}
	_ = r.StepOK("uncordon", "schedulable")
	return r.Result(&sdk.Result{OK: true, Summary: fmt.Sprintf("%s (Kubernetes node %s) is schedulable again", t.node.Name, t.node.KubeNode)})
}
