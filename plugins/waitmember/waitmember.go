// Package waitmember is the built-in plugin behind `/talos wait-member`
// (rule R7): after Terraform adds a control plane, wait until it is a voting
// etcd member and every member reports the same leader before adding the
// next node. It only reads.
package waitmember

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/talosbot/talosbot/internal/version"
	"github.com/talosbot/talosbot/plugins/cluster"
	"github.com/talosbot/talosbot/plugins/cluster/etcd"
	"github.com/talosbot/talosbot/plugins/cluster/identity"
	"github.com/talosbot/talosbot/plugins/sdk"
	"k8s.io/apimachinery/pkg/util/wait"
)

// Name is the plugin's catalogue name.
const Name = "waitmember"

// Command is the chat command.
const Command = "wait-member"

// DefaultTimeout bounds the wait when --timeout is not given.
const DefaultTimeout = 10 * time.Minute

// Plugin implements sdk.Plugin. Poll is the interval between checks (0: 2s).
type Plugin struct{ Poll time.Duration }

// New returns the plugin.
func New() sdk.Plugin { return &Plugin{} }

// Describe returns the manifest.
func (*Plugin) Describe(context.Context) (*sdk.Manifest, error) {
	return &sdk.Manifest{Name: Name, Version: version.Version, Commands: []*sdk.Command{{
		Name:    Command,
		Summary: "Wait until a new control plane is a voting etcd member and all members agree on the leader (R7; read-only)",
		Args: []*sdk.Arg{
			{Name: "node", Required: true, Description: "the control plane Terraform just added (inventory name)"},
			{Name: "cluster", Description: "cluster (default: the channel's cluster)"},
			{Name: "timeout", Flag: true, Description: "how long to wait, e.g. 10m (default 10m)"},
		},
		Effect:  sdk.EffectReadOnly,
		Example: "/talos wait-member talos-prd-4 production",
	}}}, nil
}

type target struct {
	node    cluster.Node
	timeout time.Duration
}

func check(req *sdk.OperationRequest) (cluster.Inventory, target, error) {
	inv, err := cluster.InventoryFrom(&req.Cluster)
	if err != nil {
		return inv, target{}, err
	}
	name := req.Args["node"]
	n, ok := inv.Node(name)
	if !ok {
		return inv, target{}, &sdk.Refusal{Rule: "R7", Reason: fmt.Sprintf("%s is not in the inventory of %s", sdk.Clip(name), inv.Name),
			Fix: "add the node to Terraform's talos_nodes inventory and apply first; the inventory names: " + strings.Join(cluster.Names(inv.Nodes), ", ")}
	}
	if n.Role != cluster.RoleControlPlane {
		return inv, target{}, &sdk.Refusal{Rule: "R7", Reason: name + " is a worker; only control planes join etcd",
			Fix: "a new worker needs no wait: check it with /talos health"}
	}
	t := target{node: n, timeout: DefaultTimeout}
	if s := req.Args["timeout"]; s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			return inv, target{}, &sdk.Refusal{Rule: "R7", Reason: fmt.Sprintf("--timeout %q is not a duration", s), Fix: "use e.g. --timeout 10m"}
		}
		t.timeout = d
	}
	return inv, t, nil
}

// Plan validates the node; it does not contact the cluster.
func (*Plugin) Plan(_ context.Context, req *sdk.OperationRequest) (*sdk.OperationPlan, error) {
	inv, t, err := check(req)
	if err != nil {
		return sdk.RefusalPlan(err)
	}
	return &sdk.OperationPlan{
		Summary: fmt.Sprintf("Wait up to %s for %s to be a voting etcd member of %s with one agreed leader", t.timeout, t.node.Name, inv.Name),
		Target:  t.node.Name,
		Steps: []*sdk.Step{
			{ID: "member", Title: t.node.Name + " is an etcd member", Node: t.node.Name, Kind: "quorum"},
			{ID: "voting", Title: t.node.Name + " votes (not a learner) and answers", Node: t.node.Name, Kind: "quorum"},
			{ID: "leader", Title: "every member reports the same leader", Kind: "quorum"},
		},
		CanonicalInputs: sdk.NewCanonical(req).Str("node", t.node.Name).Duration("timeout", t.timeout).Bytes(),
	}, nil
}

// Run polls the quorum until the node is a healthy voting member and every
// member agrees on the leader, or the timeout passes.
func (p *Plugin) Run(ctx context.Context, req *sdk.OperationRequest, r sdk.Reporter) error {
	inv, t, err := check(req)
	if err != nil {
		if res := sdk.RefusedResult(err, "refused"); res != nil {
			return r.Result(res)
		}
		return err // not a rule: a bad inventory is the host's error, as in Plan
	}
	clients, err := cluster.Connect(ctx, inv, &req.Credentials)
	if err != nil {
		return err
	}
	defer clients.Close()
	poll := p.Poll
	if poll <= 0 {
		poll = 2 * time.Second
	}
	deadline := time.Now().Add(t.timeout)
	for _, id := range []string{"member", "voting", "leader"} {
		_ = r.StepStarted(id, "")
	}
	// The names are resolved once, within their own bound: the joining
	// node's member is recognised by its id when it answered, else by a peer
	// URL on its address, so a member that appears while we wait is found.
	ictx, icancel := context.WithTimeout(ctx, min(t.timeout, 10*time.Second))
	ids := identity.Resolve(ictx, clients, inv, identity.Options{NodeTimeout: min(t.timeout, 10*time.Second)})
	icancel()
	// The deadline is checked after each reading, not imposed on ctx: the
	// last reading runs to its own bound and the report says what was
	// missing (result is set once the node made it or the time is up).
	var result *sdk.Result
	err = wait.PollUntilContextCancel(ctx, poll, true, func(ctx context.Context) (bool, error) {
		// Each read gets its own bound, so the last reading before the
		// deadline is a real one and the report says what was missing.
		rctx, cancel := context.WithTimeout(ctx, max(min(time.Until(deadline), 10*time.Second), 0)+time.Second)
		q := etcd.ReadQuorum(rctx, clients, ids)
		cancel()
		member, voting := q.IsMember(t.node.Name), q.IsHealthy(t.node.Name)
		// Every member answers under one agreed leader: the one
		// quorum-restored predicate, which R7's "all members report the
		// same leader" is.
		restored := q.CheckRestored()
		if member && voting && restored == nil { // rule:R7
			_ = r.StepOK("member", q.Summary())
			_ = r.StepOK("voting", t.node.Name+" answers as a voting member")
			_ = r.StepOK("leader", "leader "+q.Leader+" agreed by all "+fmt.Sprint(len(q.Members))+" members")
			result = &sdk.Result{OK: true,
				Summary: fmt.Sprintf("%s is a voting etcd member and all %d members agree on leader %s: the next node may be added (R7)", t.node.Name, len(q.Members), q.Leader)}
			return true, nil
		}
		if time.Now().After(deadline) {
			var missing []string
			if !member {
				missing = append(missing, t.node.Name+" is not an etcd member")
			} else if !voting {
				missing = append(missing, t.node.Name+" is a member but not a healthy voting one")
			}
			if restored != nil {
				missing = append(missing, "not every member reports one agreed leader")
			}
			_ = r.StepFailed("member", q.Summary())
			result = &sdk.Result{OK: false, Summary: fmt.Sprintf("%s did not become a voting member within %s", t.node.Name, t.timeout),
				Error: strings.Join(missing, "; ") + " (" + q.Summary() + ")"}
			return true, nil
		}
		return false, nil
	})
	if result == nil {
		return err // ctx ended first
	}
	return r.Result(result)
}
