package talosupgrade

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/talosbot/talosbot/plugins/cluster/k8s"
	"github.com/talosbot/talosbot/plugins/cluster/talos"
	"github.com/talosbot/talosbot/plugins/sdk"
)

// outcome is what one node's upgrade left behind, so that a failure says
// what state the node is in and offers only the follow-ups that can work.
type outcome struct {
	node, kubeNode string
	from, to       string
	p              *talos.Progress
	// sequenceFailed: Talos reported the upgrade sequence failed and the
	// node stayed up (legacy path).
	sequenceFailed bool
	// back: the node came back from its reboot, on version (note: Talos's
	// boot message, e.g. the A/B fallback after a failed boot).
	back          bool
	version, note string
	// fellBack: it came back on the old version (an A/B fallback, landing.go);
	// landing: how a node on the target differs from the plan.
	fellBack bool
	landing  []string
	// notRebooted: it accepted the reboot and kept its boot id; notReady:
	// it booted and runs but Talos's readiness conditions are unmet (the
	// sentence that says which).
	notRebooted bool
	notReady    string
	// uncordoned: the bot made the Node schedulable again; cordoned: the
	// Node still reads as cordoned after the failure (cordonErr: why the bot
	// could not tell).
	uncordoned bool
	cordoned   bool
	cordonErr  string
}

// line says the node's state in one sentence.
func (o *outcome) line() string {
	var s string
	switch {
	case o.back && o.version == o.from:
		s = fmt.Sprintf("%s rolled back: it came back on %s, not %s", o.node, o.from, o.to)
		if o.fellBack {
			s += ": the new image did not boot, Talos fell back"
		}
		if o.note != "" {
			s += " (" + o.note + ")"
		}
	case o.back && len(o.landing) > 0:
		s = fmt.Sprintf("%s runs %s but not as planned: %s", o.node, o.version, strings.Join(o.landing, "; "))
	case o.back:
		s = fmt.Sprintf("%s runs %s", o.node, o.version)
	case o.notReady != "":
		s = o.notReady
	case o.notRebooted:
		s = fmt.Sprintf("%s accepted the reboot but never rebooted (its boot id is unchanged): it still runs %s and boots %s at its next reboot", o.node, o.from, o.to)
	case o.sequenceFailed:
		s = fmt.Sprintf("Talos's upgrade sequence failed on %s; it stayed up on %s", o.node, o.from)
	case o.p.Rebooting:
		s = fmt.Sprintf("%s was rebooted into %s and has not come back", o.node, o.to)
	case o.p.Installed:
		s = fmt.Sprintf("%s is the default boot entry but the node did not reboot: %s still runs %s and boots %s at its next reboot", o.to, o.node, o.from, o.to)
	default:
		s = fmt.Sprintf("%s is unchanged: it runs %s", o.node, o.from)
	}
	switch {
	case o.uncordoned:
		s += "; uncordoned"
	case o.cordoned:
		s += fmt.Sprintf("; Kubernetes node %s is still cordoned", o.kubeNode)
	case o.cordonErr != "":
		s += fmt.Sprintf("; it may still be cordoned (%s)", o.cordonErr)
	}
	return s
}

// settleCordon makes the cordon state after a failure true and known: a node
// the bot cordoned that is Ready (it never rebooted, or came back) is
// uncordoned; one that is down stays cordoned and the result says so. The
// Node is read back either way, so a cordon Talos's own sequence left (the
// legacy path) is reported too.
func (x *run) settleCordon(ctx context.Context, o *outcome) {
	kube := x.s.DrainedWith()
	if kube == nil || o.kubeNode == "" {
		return
	}
	// The run's context may be what failed: the cleanup gets its own time.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(x.nodeTO, 2*time.Minute))
	defer cancel()
	if o.p.Cordoned && !o.uncordoned && (!o.p.Rebooting || o.back) {
		wait := time.Second
		if o.back {
			wait = min(x.nodeTO, time.Minute)
		}
		if err := k8s.WaitReady(ctx, kube, o.kubeNode, 0, wait); err == nil {
			o.uncordoned = k8s.Uncordon(ctx, kube, o.kubeNode) == nil
		}
	}
	cordoned, err := k8s.Cordoned(ctx, kube, o.kubeNode)
	switch {
	case err != nil:
		o.uncordoned, o.cordonErr = false, err.Error()
	case cordoned:
		o.uncordoned, o.cordoned = false, true
	}
}

// actions are the follow-ups that can work from the node's state: a retry
// while the node still runs its old version, a rollback only once it runs
// the new one and answers, an uncordon while its Node stays cordoned.
func (x *run) actions(o *outcome) []*sdk.SuggestedAction {
	var out []*sdk.SuggestedAction
	switch {
	case o.back && o.version == o.to:
		out = append(out, &sdk.SuggestedAction{Label: "Rollback node " + o.node, Command: "/talos rollback " + o.node + " " + x.cluster})
	case !o.p.Rebooting || o.sequenceFailed || (o.back && o.version == o.from):
		out = append(out, &sdk.SuggestedAction{Label: "Retry " + o.node,
			Command: fmt.Sprintf("/talos upgrade talos %s %s --nodes %s", o.to, x.cluster, o.node)})
	}
	if o.cordoned || o.cordonErr != "" {
		out = append(out, &sdk.SuggestedAction{Label: "Uncordon " + o.node, Command: "/talos node uncordon " + o.node + " " + x.cluster})
	}
	return out
}

// pullAll pulls the installer on every v1.13 node of the roll, in parallel,
// before any node is cordoned; the first failure stops the roll untouched.
func (x *run) pullAll(ctx context.Context) error {
	var todo []nodeStep
	for _, n := range x.roll.toUpgrade() {
		if n.mechanics == talos.MechanicsLifecycle {
			todo = append(todo, n)
		}
	}
	errs := make([]error, len(todo))
	var wg sync.WaitGroup
	for i, n := range todo {
		_ = x.r.StepStarted(n.id("pull"), n.image)
		wg.Go(func() {
			errs[i] = talos.PullInstaller(ctx, x.s, n.node, n.image, talos.PullOptions{Stall: talos.PullStall(x.req.Settings),
				Log: func(msg string) { _ = x.r.Log("warn", n.id("pull"), n.node.Name+": "+msg) }})
			if errs[i] != nil {
				_ = x.r.StepFailed(n.id("pull"), errs[i].Error())
				return
			}
			_ = x.r.StepOK(n.id("pull"), "pulled")
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return x.fail(fmt.Sprintf("the installer could not be pulled on %s; the roll stopped before any node was touched: no node was cordoned, installed or rebooted", todo[i].node.Name), err)
		}
	}
	for _, n := range todo {
		x.pulled[n.node.Name] = true
	}
	return nil
}
