package talosupgrade

import (
	"context"
	"errors"
	"fmt"

	"github.com/talosbot/talosbot/plugins/cluster/talos"
	"github.com/talosbot/talosbot/plugins/sdk"
)

// resumeInFlight settles, in a resumed run, every node of this hop whose upgrade step was in
// flight when the earlier attempt stopped (the host names those steps:
// sdk.InterruptedSteps), before the gate and before any node is touched:
//   - a node that runs the hop's target landed: the stopped run may not have uncordoned it,
//     so it is uncordoned once Ready, as that run would have (its own cordon is no foreign
//     one for the gate to refuse on), and the roll goes on;
//   - a node that still runs the version it had is never upgraded a second time in one
//     operation: Talos may have fallen back to it after the new image failed to boot (the
//     A/B fallback leaves nothing on the node to tell once it booted the old entry), or the
//     stopped run may not have issued the upgrade yet. The roll stops there and says so; a
//     new /talos upgrade, once the cause is known, tries again.
func (x *run) resumeInFlight(ctx context.Context) error {
	if !x.resumed {
		return nil
	}
	inflight := sdk.InterruptedSteps(x.req)
	to := x.roll.target.String()
	for _, n := range x.roll.steps {
		if !inflight[n.id("upgrade")] {
			continue
		}
		o := &outcome{node: n.node.Name, kubeNode: x.kubeNode(n), from: n.from.String(), to: to,
			p: &talos.Progress{Cordoned: true}, back: true, version: n.from.String()}
		if n.skip {
			o.version = to
			x.settleCordon(ctx, o)
			_ = x.r.Log("info", n.id("upgrade"), fmt.Sprintf("%s's upgrade was in flight when talosbot stopped; it runs %s: landed", n.node.Name, n.from))
			if o.uncordoned {
				x.lines = append(x.lines, fmt.Sprintf("▶️ %s's upgrade was in flight when talosbot stopped: it landed (runs %s); uncordoned", n.node.Name, n.from))
			}
			continue
		}
		x.settleCordon(ctx, o)
		line := fmt.Sprintf("%s's upgrade to %s was in flight when talosbot stopped, and %s runs %s: Talos fell back to it after the new image failed to boot (A/B fallback), or the stopped run had not issued the upgrade yet; not upgraded again in this operation",
			n.node.Name, to, n.node.Name, n.from)
		switch {
		case o.uncordoned:
			line += "; uncordoned"
		case o.cordoned:
			line += fmt.Sprintf("; Kubernetes node %s is still cordoned", o.kubeNode)
		}
		_ = x.r.Step(&sdk.StepEvent{StepID: n.id("upgrade"), Status: sdk.StepFailed, Detail: line,
			Node: n.node.Name, FromVersion: n.from.String(), ToVersion: to})
		x.lines = append(x.lines, "🩺 "+line)
		return x.fail(fmt.Sprintf("stopped at %s: its upgrade was in flight when talosbot stopped and it runs %s, not %s; the roll stopped, no node was touched again", n.node.Name, n.from, to),
			fmt.Errorf("%s; read its boot log (talosctl -n %s dmesg) and, once the cause is known, run the upgrade again: %w", line, n.node.Address, errInFlight),
			x.actions(o)...)
	}
	return nil
}

// errInFlight marks the stop of a resumed roll at a node whose upgrade was in flight.
var errInFlight = errors.New("an upgrade is never issued twice to one node in one operation")

// kubeNode is the Kubernetes Node name of n (as node() resolves it).
func (x *run) kubeNode(n nodeStep) string {
	k := x.roll.ids.KubeNode(n.node.Name)
	if k == "" && n.mechanics == talos.MechanicsLifecycle {
		if id, ok := x.roll.ids.Of(n.node.Name); ok {
			k = id.Nodename
		}
	}
	return k
}
