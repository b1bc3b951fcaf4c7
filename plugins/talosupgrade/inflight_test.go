package talosupgrade

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/talosbot/talosbot/plugins/cluster/k8s"
	"github.com/talosbot/talosbot/plugins/sdk"
	"github.com/talosbot/talosbot/plugins/sdk/sdktest"
	"github.com/talosbot/talosbot/sim"
)

// TestResumeAfterFallbackDoesNotUpgradeAgain: the bot dies right after it issued worker-1's
// Upgrade; the new image does not boot and Talos falls back to v1.12.6 while the bot is
// gone. The resumed run is told worker-1's upgrade step was in flight (the host's
// sdk.OperationRequest.InterruptedSteps): it stops there, naming the fallback, and never sends worker-1
// a second Upgrade, nor touches a later node. (Without the check it sees v1.12.6 and
// upgrades worker-1 again.)
func TestResumeAfterFallbackDoesNotUpgradeAgain(t *testing.T) {
	e := start(t, 1, 2, false, nil)
	ctx := ctxFor(t, 4*time.Minute)
	if err := e.c.Inject(ctx, "worker-1", sim.Fault{BootFailure: true}); err != nil {
		t.Fatal(err)
	}
	req := e.request(t, target)
	req.Settings.NodeTimeoutMs = 60_000
	runCtx, kill := context.WithCancel(ctx)
	go func() {
		// The bot dies once worker-1's Upgrade is answered.
		_ = wait.PollUntilContextCancel(runCtx, 20*time.Millisecond, true, func(context.Context) (bool, error) {
			return e.upgradeCalls("worker-1") == 1, nil
		})
		kill()
	}()
	var inFlight string
	rec := runWatched(runCtx, &Plugin{}, req, func(ev *sdk.StepEvent) {
		if ev.Node == "worker-1" && strings.HasSuffix(ev.StepID, "/upgrade") && ev.Status == sdk.StepRunning {
			inFlight = ev.StepID
		}
	})
	kill()
	if rec.FinalResult().OK || inFlight == "" {
		t.Fatalf("the first run: %v (worker-1's step %q)", rec.FinalResult(), inFlight)
	}
	// Talos falls back while the bot is gone: the new version boots, fails, and the old one
	// comes back.
	seen := false
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		v := e.c.NodeVersion("worker-1")
		seen = seen || v == target
		return seen && v == from, nil
	}); err != nil {
		t.Fatalf("worker-1 did not fall back: runs %s", e.c.NodeVersion("worker-1"))
	}

	req.Attempt = 2
	req.InterruptedSteps = []sdk.InterruptedStep{{ID: inFlight, Node: "worker-1"}}
	rec, _ = sdktest.Run(ctx, &Plugin{}, req, nil)
	res := rec.FinalResult()
	if res.OK || !strings.Contains(res.Error, "worker-1's upgrade to "+target+" was in flight when talosbot stopped, and worker-1 runs "+from) ||
		!strings.Contains(res.Error, "A/B fallback") || !strings.Contains(res.Error, "not upgraded again") {
		t.Fatalf("want the resumed run stopped at worker-1, naming the fallback, got %v", res)
	}
	for n, want := range map[string]int{"worker-1": 1, "worker-2": 0, "cp-1": 0} {
		if got := e.upgradeCalls(n); got != want {
			t.Errorf("%s got %d Upgrade calls, want %d", n, got, want)
		}
	}
	// The retry offered is a new upgrade, once the cause is known.
	found := false
	for _, a := range res.SuggestedActions {
		found = found || strings.Contains(a.Command, "/talos upgrade talos "+target)
	}
	if !found {
		t.Errorf("no retry offered: %v", res.SuggestedActions)
	}
}

// TestResumeUncordonsItsOwnLandedNode: the bot died after worker-1 landed on the target but
// before it uncordoned worker-1's Node. The resumed run, told worker-1's upgrade was in
// flight, uncordons it (its own cordon, not a foreign one for the gate to refuse on) and
// goes on; each node gets one Upgrade. (Without it the gate before refuses: worker-1
// cordoned.)
func TestResumeUncordonsItsOwnLandedNode(t *testing.T) {
	e := start(t, 1, 1, true, nil)
	ctx := ctxFor(t, 4*time.Minute)
	req := e.request(t, target)
	runCtx, kill := context.WithCancel(ctx)
	var inFlight, kubeNode string
	rec := runWatched(runCtx, &Plugin{}, req, func(ev *sdk.StepEvent) {
		if ev.Node == "worker-1" && strings.HasSuffix(ev.StepID, "/upgrade") && ev.Status == sdk.StepOK {
			inFlight = ev.StepID
			kill() // the bot is gone right after worker-1 landed
		}
	})
	kill()
	if rec.FinalResult().OK || inFlight == "" {
		t.Fatalf("the first run: %v (worker-1's step %q)", rec.FinalResult(), inFlight)
	}
	kubeNode = e.info(t, "worker-1").NodeName
	// As the stopped run left it: cordoned, the uncordon not yet done.
	if err := k8s.Cordon(ctx, e.kube.Client, kubeNode); err != nil {
		t.Fatal(err)
	}

	req.Attempt = 2
	req.InterruptedSteps = []sdk.InterruptedStep{{ID: inFlight, Node: "worker-1"}}
	rec, _ = sdktest.Run(ctx, &Plugin{}, req, nil)
	if res := rec.FinalResult(); !res.OK {
		t.Fatalf("the resumed run: %s: %s", res.Summary, res.Error)
	}
	n, err := e.kube.Client.CoreV1().Nodes().Get(ctx, kubeNode, metav1.GetOptions{})
	if err != nil || n.Spec.Unschedulable {
		t.Fatalf("worker-1's Node after the resume: unschedulable=%v, %v", n.Spec.Unschedulable, err)
	}
	for _, name := range e.names() {
		if got := e.upgradeCalls(name); got != 1 || e.c.NodeVersion(name) != target {
			t.Errorf("%s: %d Upgrade calls, runs %s", name, got, e.c.NodeVersion(name))
		}
	}
}
